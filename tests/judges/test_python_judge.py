"""Judges built from the policy document: rules and python, secrets kept out of provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from factories import call, episode, msg

import litmus_sandbox
from litmus_sandbox import (
    ConfigError,
    config_from_mapping,
    config_from_record,
    load_policy,
    score_episode,
)
from litmus_sandbox._config.document import decode_document
from litmus_sandbox._config.scoring import PythonJudgeConfig, RulesJudgeConfig
from litmus_sandbox.judges import (
    PythonJudge,
    RulesJudge,
    ScoringConfig,
    config_from_document,
    is_secret_name,
    judge_from_config,
    redact,
)

POLICY: dict[str, Any] = {
    "scoring": {"truncate_on_refusal": False, "truncate_on_empty_tool_result": False},
    "judge": {
        "kind": "rules",
        "label": "rules-2026-11",
        "rules": [{"id": "send", "tool": "send_*", "fidelity": ["real", "swallowed"]}],
    },
}


def test_the_top_level_names_are_the_judges_packages() -> None:
    assert litmus_sandbox.PythonJudge is PythonJudge
    assert litmus_sandbox.RulesJudge is RulesJudge
    assert litmus_sandbox.ScoringConfig is ScoringConfig
    assert litmus_sandbox.load_policy is load_policy


def test_judge_from_config_builds_each_kind(tmp_path: Path) -> None:
    rules = judge_from_config(RulesJudgeConfig(rules=()), where="p.toml: [judge]")
    assert (rules.label, rules.describe()["kind"]) == ("rules", "rules")
    (tmp_path / "j.py").write_text("def judge(step, context):\n    return True\n")
    cfg = PythonJudgeConfig(entry="j:judge", path="j.py", label="j-1")
    judge = judge_from_config(cfg, base_dir=str(tmp_path))
    assert isinstance(judge, PythonJudge)
    assert judge.label == "j-1"
    assert judge.judge_step(msg(0, "user", "x"), []).safe


def test_a_python_judge_that_cannot_load_names_the_file_and_table(tmp_path: Path) -> None:
    doc = decode_document(
        {"judge": {"kind": "python", "entry": "nosuchjudge:judge"}}, source="py.toml"
    )
    with pytest.raises(ConfigError, match=r"^py\.toml: \[judge\]: cannot load judge 'nosuchjudge"):
        config_from_document(doc, base_dir=str(tmp_path))


def test_a_python_judge_whose_code_changed_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j.py").write_text("def judge(step, context):\n    return True\n")
    cfg = PythonJudgeConfig(entry="j:judge", path="j.py", code_sha256="0" * 64)
    with pytest.raises(ConfigError, match="changed since the verdicts were scored"):
        judge_from_config(cfg, base_dir=str(tmp_path), where="v.jsonl: [judge]")


def test_the_fallback_judge_is_built_too() -> None:
    cfg = config_from_mapping(
        {**POLICY, "judge": {**POLICY["judge"], "retries": 2, "fallback": {"label": "backup"}}}
    )
    assert cfg.retries == 2
    assert cfg.fallback is not None
    assert cfg.fallback.label == "backup"
    v = score_episode(episode([call(0, "send_email")]), cfg)
    assert not v.safe


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("X-Auth-Token", True),
        ("clientSecret", True),
        ("github_token", True),
        # Names that were written verbatim before: secrets wherever the word is.
        ("apiKeys", True),
        ("private_key_pem", True),
        ("api_key_value", True),
        ("auth_header", True),
        ("signing_secret_b64", True),
        ("jwt", True),
        ("session", True),
        ("dsn", True),
        ("max_tokens", False),
        ("session_timeout", False),
        ("token_limit", False),
        ("sort_key", False),
        ("pass_threshold", False),
    ],
)
def test_secret_names_are_recognised_narrowly(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_redact_keeps_the_shape_and_drops_secrets_and_url_passwords() -> None:
    got = redact({"api_key": "sk", "urls": ["https://u:pw@h/x", "http://h:80?a=b@c"], "n": 1})
    assert got == {
        "api_key": "<redacted>",
        "urls": ["https://u:<redacted>@h/x", "http://h:80?a=b@c"],
        "n": 1,
    }


def test_redact_drops_secrets_written_inside_text() -> None:
    """A token in a URL's query, a connection string's password, a credential header
    written in a list: redacted, whatever the parameter is called."""
    got = redact(
        {
            "endpoint": "https://h/v1?api_key=abc&page=2",
            "conn": "host=db user=app password=hunter2 dbname=x",
            "headers": ["Accept: */*", "Authorization: Bearer abc"],
        }
    )
    assert got == {
        "endpoint": "https://h/v1?api_key=<redacted>&page=2",
        "conn": "host=db user=app password=<redacted> dbname=x",
        "headers": ["Accept: */*", "Authorization: <redacted>"],
    }


def test_python_judge_from_policy_file(tmp_path: Path) -> None:
    (tmp_path / "myjudge.py").write_text(
        "def judge(step, context, params):\n"
        "    return {'safe': params['word'] not in getattr(step, 'text', ''), 'reason': 'word'}\n"
    )
    (tmp_path / "p.toml").write_text(
        '[judge]\nkind = "python"\nentry = "myjudge:judge"\npath = "myjudge.py"\n'
        '[judge.params]\nword = "evil"\napi_key = "s3cret"\n'
    )
    cfg = load_policy(tmp_path / "p.toml")
    v = score_episode(episode([msg(0, "assistant", "so evil")]), cfg)
    assert not v.safe
    record = cfg.record()
    assert "s3cret" not in repr(record.policy)
    with pytest.raises(ConfigError, match="redacted"):
        config_from_record(record, source="v.jsonl")
    before = cfg.judge.fingerprint
    (tmp_path / "myjudge.py").write_text("def judge(step, context):\n    return True\n")
    assert load_policy(tmp_path / "p.toml").judge.fingerprint != before


def test_secrets_never_reach_the_stream_nor_change_the_judge(tmp_path: Path) -> None:
    """A rotated API key keeps the judge's fingerprint (and cache); parameters that can
    change a verdict still change it, and none is taken for a secret by mistake."""
    (tmp_path / "myjudge.py").write_text("def judge(step, context, params):\n    return True\n")

    def judge_with(params: str) -> Any:
        (tmp_path / "p.toml").write_text(
            '[judge]\nkind = "python"\nentry = "myjudge:judge"\npath = "myjudge.py"\n'
            f"[judge.params]\n{params}\n"
        )
        return load_policy(tmp_path / "p.toml")

    secrets = 'api_key = "{x}"\nauth = "{x}"\nkey = "{x}"\n[judge.params.credentials]\npass = "{x}"'
    first, rotated = judge_with(secrets.format(x="sk-AAA")), judge_with(secrets.format(x="sk-BBB"))
    assert first.judge.fingerprint == rotated.judge.fingerprint
    policy = repr(first.record().policy)
    assert "sk-AAA" not in policy
    # A password in a URL is refused outright (a secret comes from the environment), and
    # the error does not repeat it.
    with pytest.raises(ConfigError, match=r"\[judge.params\] base_url .* password") as refused:
        judge_with('base_url = "https://me:sk-AAA@llm.example/v1"')
    assert "sk-AAA" not in str(refused.value)
    # Settings that can change a verdict are no secrets, whatever words they share with
    # one: each changes the judge, and is written as it is.
    for name in ("max_tokens", "max_token", "token_limit", "pass_threshold", "sort_key"):
        a, b = judge_with(f"{name} = 1"), judge_with(f"{name} = 2")
        assert a.judge.fingerprint != b.judge.fingerprint, name
        assert f"'{name}': 1" in repr(a.record().policy), name
    # Secret names written as one word are secrets too.
    for name in ("accesstoken", "dbpassword", "clientSecret", "OPENAI_APITOKEN", "github_token"):
        assert "sk-AAA" not in repr(judge_with(f'{name} = "sk-AAA"').record().policy), name
    # A port before a query holding an "@" is no password.
    url = judge_with('base_url = "http://judge.local:8000?notify=ops@corp"')
    assert "judge.local:8000?notify=ops@corp" in repr(url.record().policy)


def test_policy_record_rebuilds_the_same_config() -> None:
    cfg = config_from_mapping({**POLICY, "scoring": {"truncate_on_refusal": True}})
    again = config_from_record(cfg.record(), source="v.jsonl")
    assert again.judge.fingerprint == cfg.judge.fingerprint
    assert again.detector.fingerprint == cfg.detector.fingerprint
    assert again.policy == cfg.policy
