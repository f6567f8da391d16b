"""Secrets never written, by construction: a policy file with a secret-shaped literal is
refused (pointing at it, never quoting it), and recorded URLs keep no credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from litmus_sandbox import ConfigError, load_policy
from litmus_sandbox._config.secrets import redact_url, secret_shape

CANARY = "canary-9e4b1f0d77a2c3"

# Secret-shaped literals, each with the canary inside it where the shape allows.
SHAPES = {
    "pem": "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXk" + CANARY,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0." + CANARY.replace("-", "_"),
    "bearer": "Authorization: Bearer " + CANARY,
    "basic": "Basic dXNlcjpjYW5hcnktOWU0YjFmMGQ3N2EyYzM=",  # user:canary-...
    "userinfo": f"postgresql://app:{CANARY}@db.internal/prod",
    "query": f"https://api.example/v1/x?api_key={CANARY}",
    "openai": "sk-proj-" + CANARY.replace("-", "") + "ABCDEFGH",
    "github": "ghp_" + CANARY.replace("-", "") + "ABCDEFGHIJKL",
    "aws": "AKIAIOSFODNN7EXAMPLE",
    "slack": "xoxb-" + CANARY,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize(
    "where",
    [
        (
            '[judge]\nkind = "python"\nentry = "j:f"\n[judge.params]\nsetting = "{s}"\n',
            "[judge.params] setting",
        ),
        (
            '[judge]\nkind = "python"\nentry = "j:f"\n[judge.params]\nheaders = ["X: 1", "{s}"]\n',
            "[judge.params] headers[1]",
        ),
        ('[tools]\nlookup = {{ mode = "stub", result = "{s}" }}\n', "[tools.lookup] result"),
        (
            '[egress]\n"api.example" = {{ mode = "stub", body = "{s}" }}\n',
            "[egress.api.example] body",
        ),
    ],
    ids=["judge-param", "in-a-list", "stub-result", "egress-stub"],
)
def test_a_secret_shaped_literal_anywhere_is_refused_pointing_at_it(
    tmp_path: Path, shape: str, where: tuple[str, str]
) -> None:
    template, location = where
    (tmp_path / "p.toml").write_text(template.format(s=SHAPES[shape]))
    with pytest.raises(ConfigError) as refused:
        load_policy(tmp_path / "p.toml")
    message = str(refused.value)
    assert location in message
    assert "looks like a secret" in message
    assert "[judge.secrets]" in message
    assert CANARY not in message
    assert SHAPES[shape] not in message


@pytest.mark.parametrize(
    "text",
    [
        "Bearer tokens are sent by the client",
        "uses Basic authentication",
        "ssh://git@github.com/org/repo",
        "https://example.com/search?q=tokens&page=2",
        "sk-short",
        "max_tokens",
        "http://judge.local:8000?notify=ops@corp",
    ],
)
def test_ordinary_text_is_no_secret(text: str) -> None:
    assert secret_shape(text) is None


def test_recorded_urls_keep_no_credentials() -> None:
    assert (
        redact_url(f"http://me:{CANARY}@h:8080/p?x=1&access_token={CANARY}&apiKey={CANARY}#f")
        == "http://h:8080/p?x=1&access_token=<redacted>&apiKey=<redacted>#f"
    )
    assert redact_url("/p?token=abc&q=2", ["q"]) == "/p?token=abc&q=<redacted>"


@pytest.mark.parametrize("run", ["z", "a-", "?", "?a", "a:", "x://a:", "eyJ"])
def test_a_long_value_is_checked_in_one_pass(run: str) -> None:
    """A stub's 300 KB answer is checked in linear time (a backtracking scan took minutes),
    and a secret after it is still found."""
    text = run * (400_000 // len(run))
    assert secret_shape(text) is None
    assert secret_shape(text + f" postgresql://app:{CANARY}@db/prod") is not None
    assert secret_shape(text + f" https://api.example/v1?api_key={CANARY}") is not None
