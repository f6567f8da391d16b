"""Redaction of a call's arguments: keys, shapes, the redacted form, and its properties."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import ConfigError
from litmus_sandbox._core.redaction import (
    DEFAULT_REDACTION,
    NO_REDACTION,
    Redaction,
    redact_records,
    redact_step,
)
from litmus_sandbox._core.redaction_shapes import MARKER, SHAPES, find_spans, marker
from litmus_sandbox._core.replay_match import ReplayOptions, ReplaySession, Served
from litmus_sandbox._model.records import EpisodeHeader, Shown, ToolCallStep

CANARY = "CANARY7q2x9Zp"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDQU5BUlk3cTJ4OVpwIn0.c2lnQ0FOQVJZN3EyeDlacA"
PEM = f"-----BEGIN PRIVATE KEY-----\nMIIE{CANARY}\n-----END PRIVATE KEY-----"


def test_the_redacted_form_names_the_length_and_a_hash_prefix() -> None:
    digest = hashlib.sha256(CANARY.encode()).hexdigest()[:12]
    assert marker(CANARY) == f"<redacted {len(CANARY)} chars sha256:{digest}>"
    raw = b"\x00\xff"
    assert marker(raw) == f"<redacted 2 bytes sha256:{hashlib.sha256(raw).hexdigest()[:12]}>"
    assert marker("\ud800") == marker("\ud800")  # a lone surrogate hashes too
    assert MARKER.fullmatch(marker(CANARY))


@pytest.mark.parametrize(
    "key",
    ["api_key", "API-Key", "x-api-key", "apiKey", "openaiApiKey", "password", "db_password",
     "password_confirmation", "password2", "client_secret", "access_token", "X-Auth-Token",
     "Authorization", "Proxy-Authorization", "cookie", "private_key", "aws_secret_access_key"],
)  # fmt: skip
def test_secret_keys_match_case_and_separators_aside(key: str) -> None:
    assert DEFAULT_REDACTION.is_secret_key(key)


@pytest.mark.parametrize(
    "key", ["max_token", "max_tokens", "tokens", "token_count", "tokenizer", "sort_key", "author",
            "path", "keys", "password_hint_shown_x", "api_key_env"],
)  # fmt: skip
def test_other_keys_are_no_secrets(key: str) -> None:
    assert not DEFAULT_REDACTION.is_secret_key(key)


def test_a_value_under_a_secret_key_is_redacted_whole_at_any_depth() -> None:
    args = {
        "api_key": CANARY,
        "pin": 1234,
        "req": {"headers": {"Authorization": f"Bearer {CANARY}"}, "retries": 3},
        "credentials": {"user": "bob", "password": CANARY, "remember": True, "ttl": None},
        "secrets": [CANARY, "plain"],
        "tokens": 512,
        "blob": {"secret": b"\x01" + CANARY.encode()},
    }
    out, found = DEFAULT_REDACTION.args(args)
    assert CANARY not in repr(out)
    assert out["api_key"] == marker(CANARY)
    assert out["req"]["headers"]["Authorization"] == marker(f"Bearer {CANARY}")
    assert out["req"]["retries"] == 3
    # Everything under a secret key, but true, false and null (no secret in those).
    assert out["credentials"]["user"] == marker("bob")
    assert out["credentials"]["remember"] is True
    assert out["credentials"]["ttl"] is None
    assert out["secrets"] == [marker(CANARY), marker("plain")]
    assert out["tokens"] == 512
    assert out["pin"] == 1234  # pin is no default key...
    assert out["blob"]["secret"] == marker(b"\x01" + CANARY.encode())
    assert {"path": "$.req.headers.Authorization", "shape": "key"} in found
    assert {"path": "$.credentials.password", "shape": "key"} in found
    assert args["api_key"] == CANARY  # the caller's arguments are left as they were
    extended = Redaction(keys=["pin"])
    assert extended.args(args)[0]["pin"] == marker("1234")  # ...unless a policy adds it


@pytest.mark.parametrize(
    ("text", "kept", "shape"),
    [
        (f"postgres://app:{CANARY}@db.internal:5432/prod", "postgres://app:", "userinfo"),
        (f"https://u:p@ss{CANARY}@example.com/x", "https://u:", "userinfo"),
        (f"Authorization: Bearer {CANARY}", "Authorization: ", "setting"),
        (f"curl -H 'Authorization: Bearer {CANARY}' https://api", "curl -H 'Authorization: ", "setting"),
        (f"please use Bearer {CANARY}", "please use Bearer ", "bearer"),
        (f"key is {PEM} ok", "key is ", "pem"),
        (f"token {JWT}", "token ", "jwt"),
        ("Basic " + base64.b64encode(f"bob:{CANARY}".encode()).decode(), "Basic ", "basic"),
        (f"host=db password={CANARY} dbname=x", "host=db password=", "setting"),
        (f"https://api.example/v1?api_key={CANARY}&q=1", "https://api.example/v1?api_key=", "setting"),
        (f'{{"user": "bob", "token": "{CANARY}"}}', '{"user": "bob", "token": "', "setting"),
        ("sk-" + CANARY * 2, "", "key_prefix"),
    ],
)  # fmt: skip
def test_a_shape_replaces_only_its_secret(text: str, kept: str, shape: str) -> None:
    out, shapes = DEFAULT_REDACTION.text(text)
    assert CANARY not in out
    assert out.startswith(kept)
    assert shape in shapes
    assert MARKER.search(out)


@pytest.mark.parametrize(
    "text",
    [
        "the bearer of bad news",
        "Basic usage: run it",
        "ssh://git@github.com/org/repo",
        "a token: of esteem",
        "max_tokens=512",
        "-----BEGIN-----",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert DEFAULT_REDACTION.text(text) == (text, [])


def test_a_pem_block_that_never_ends_is_redacted_to_the_end() -> None:
    out, _ = DEFAULT_REDACTION.text(f"x -----BEGIN RSA PRIVATE KEY-----\n{CANARY}")
    assert out == "x " + marker(f"-----BEGIN RSA PRIVATE KEY-----\n{CANARY}")


def test_user_patterns_replace_their_first_group() -> None:
    r = Redaction(patterns=[r"otp=(\d{6})", r"PIN\d{4}"])
    out, shapes = r.text("otp=123456 and PIN9876")
    assert out == f"otp={marker('123456')} and {marker('PIN9876')}"
    assert shapes == ["pattern"]


def test_only_the_given_keys_and_patterns_without_the_defaults() -> None:
    r = Redaction(keys=["pin"], keep_defaults=False)
    out, found = r.args({"pin": "1", "password": CANARY, "dsn": f"pg://u:{CANARY}@h"})
    assert out == {"pin": marker("1"), "password": CANARY, "dsn": f"pg://u:{CANARY}@h"}
    assert found == [{"path": "$.pin", "shape": "key"}]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"patterns": ["("]}, r"redact_patterns\[0\]: '\(' is not a regular expression"),
        ({"patterns": ["x", "a*"]}, r"redact_patterns\[1\]: 'a\*' matches the empty string"),
        ({"keys": ["-"]}, r"redact_keys\[0\]: '-' is not a key"),
        ({"keep_defaults": False}, "leaves nothing to redact: write redact = false"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Redaction(**kwargs)


def test_off_keeps_everything_and_paths_are_ascii() -> None:
    args = {"password": CANARY}
    assert NO_REDACTION.args(args) == (args, [])
    assert NO_REDACTION.describe() == {"redact": False}
    _, found = DEFAULT_REDACTION.args({"h": {"x\x1b[31m\u202etoken": CANARY}})
    assert found == [{"path": '$.h["x\\u001b[31m\\u202etoken"]', "shape": "key"}]


def test_the_header_names_the_policy_with_a_fingerprint() -> None:
    described = Redaction(keys=["pin"]).describe()
    assert described["redact"] is True
    assert "pin" in described["keys"]
    assert described["shapes"] == list(SHAPES)
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", described["fingerprint"])
    assert described["fingerprint"] != DEFAULT_REDACTION.describe()["fingerprint"]


def _step(args: dict[str, Any], index: int = 0) -> ToolCallStep:
    return ToolCallStep(
        v=1,
        episode_id="e",
        index=index,
        call_id=f"e:{index}",
        tool="db",
        args=args,
        fidelity="real",
        shown=Shown(content=({"type": "text", "text": "rows"},)),
    )


def test_records_are_redacted_and_the_header_stamped() -> None:
    header = EpisodeHeader(v=1, episode_id="e", case_id="c", meta={"mine": 1})
    step = _step({"dsn": f"pg://u:{CANARY}@h/db"})
    out_header, out_step = redact_records([header, step], DEFAULT_REDACTION)
    assert isinstance(out_header, EpisodeHeader)
    assert out_header.meta["mine"] == 1
    assert out_header.meta["redaction"] == DEFAULT_REDACTION.describe()
    assert isinstance(out_step, ToolCallStep)
    assert out_step.meta["redacted"] == [{"path": "$.dsn", "shape": "userinfo"}]
    assert redact_step(out_step, DEFAULT_REDACTION) == out_step  # a second pass: the same
    assert redact_step(step, NO_REDACTION) is step


def test_a_live_call_with_the_plain_secret_matches_its_redacted_recording() -> None:
    live = {"query": "select 1", "dsn": f"pg://u:{CANARY}@h/db", "api_key": CANARY}
    recorded = redact_step(_step(live), DEFAULT_REDACTION)
    assert CANARY not in repr(recorded.args)
    options = lambda _tool: ReplayOptions()  # noqa: E731
    plain = ReplaySession([recorded], options)
    assert not isinstance(plain.match("db", live), Served)  # compared as they are: no match
    session = ReplaySession([recorded], options, DEFAULT_REDACTION)
    assert isinstance(session.match("db", live), Served)
    # A plain recording (made with redaction off) matches a redacting run too, and what
    # a divergence names is redacted on both sides.
    other = ReplaySession([_step(live)], options, DEFAULT_REDACTION)
    miss = other.match("db", {**live, "query": "select 2"})
    assert not isinstance(miss, Served)
    assert CANARY not in repr(miss)


# ---------------------------------------------------------------- properties

_SECRET = st.text(
    alphabet="ABCDEFGHJKMNPQRSTUVWXYZabcdefghjkmnpqrstuvwxyz23456789", min_size=8, max_size=24
)


@st.composite
def _shaped(draw: st.DrawFn) -> str:
    secret = draw(_SECRET)
    kind = draw(st.sampled_from(["pem", "jwt", "bearer", "basic", "dsn", "setting", "header",
                                 "prefix", "marker", "json"]))  # fmt: skip
    return {
        "pem": f"-----BEGIN KEY-----\n{secret}\n-----END KEY-----",
        "jwt": f"eyJ{secret}.eyJ{secret}.{secret}",
        "bearer": f"Bearer {secret}1",
        "basic": "Basic " + base64.b64encode(f"u:{secret}".encode()).decode(),
        "dsn": f"mysql://root:{secret}@db/x",
        "setting": f"password={secret}",
        "header": f"X-Api-Key: {secret}",
        "prefix": f"ghp_{secret}{secret}{secret}",
        "marker": marker(secret),
        "json": f'{{"client_secret": "{secret}"}}',
    }[kind]


_TEXT = st.lists(
    st.one_of(_shaped(), st.text(max_size=12), st.sampled_from(["@", ":", "=", "'", '"', "\n", " ", "://", "<"])),
    max_size=8,
).map("".join)  # fmt: skip


@given(_TEXT)
def test_redaction_is_idempotent_and_leaves_no_shape(text: str) -> None:
    once, _ = DEFAULT_REDACTION.text(text)
    assert DEFAULT_REDACTION.text(once)[0] == once
    assert find_spans(once, SHAPES, DEFAULT_REDACTION.is_secret_key) == []


_KEYS = st.sampled_from(["a", "token", "Authorization", "url", "x-api-key"])


def _nested(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(inner, st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3))


# Three levels, composed by hand (st.recursive's leaf budget made deep runs flaky).
_JSON = _nested(_nested(_nested(st.one_of(st.none(), st.booleans(), st.integers(), _TEXT))))


@given(st.dictionaries(st.sampled_from(["q", "password", "headers", "dsn"]), _JSON, max_size=4))
def test_redacted_arguments_are_a_fixed_point(args: dict[str, Any]) -> None:
    once, found = DEFAULT_REDACTION.args(args)
    again, _ = DEFAULT_REDACTION.args(once)
    assert again == once
    if not found:
        assert once is args
