"""Fuzzed policy files and verdict lines: a clear error (LitmusError, exit 2), never a crash.

Hypothesis writes TOML documents whose tables are the policy's own and whose keys are mostly
the ones it knows, with values of every TOML type in every place (a table where a mode is
wanted, a list where a name is, numbers, booleans, nesting), and JSON lines that look like
verdict records. Reading them either succeeds or raises the library's own error, the one
the command line turns into one line and exit 2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from litmus_sandbox._config.policy import Policy
from litmus_sandbox._model.errors import LitmusError
from litmus_sandbox._store.streams import read_verdicts
from litmus_sandbox.judges import load_policy

TABLES = [
    "tools", "judge", "judge.params", "judge.secrets", "scoring", "refusal", "oracle",
    "egress", "replay", "record",
]  # fmt: skip
KEYS = [
    "mode", "result", "message", "shown", "on_miss", "ignore", "order", "kind", "label",
    "entry", "path", "base_url", "model", "api_key_env", "temperature", "top_p", "seed",
    "max_tokens", "timeout", "max_retries", "max_concurrency", "rules", "pattern", "text",
    "truncate_on_refusal", "truncate_on_empty_tool_result", "redact", "redact_keys",
    "allow", "deny", "forbidden", "default", "send_*", "search", "v", "prompt",
]  # fmt: skip
WORDS = ["real", "stub", "deny", "swallow", "replay", "spy", "openai", "rules", "python", "all"]
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(WORDS),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
DOCUMENTS = st.dictionaries(
    st.sampled_from(TABLES),
    st.dictionaries(st.sampled_from(KEYS) | st.text(min_size=1, max_size=6), VALUES, max_size=4),
    max_size=4,
)


def refusal(read: Callable[[Path], object], path: Path) -> str | None:
    """The message of the error ``read`` refuses ``path`` with, or None if it reads it."""
    try:
        read(path)
    except LitmusError as exc:
        return str(exc)
    return None


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) and "e" not in repr(value) else "1.5"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml_document(doc: dict[str, dict[str, Any]]) -> str:
    lines = []
    for table, entries in doc.items():
        lines.append(f"[{table}]")
        lines += [f"{json.dumps(key)} = {toml_value(value)}" for key, value in entries.items()]
    return "\n".join(lines) + "\n"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(DOCUMENTS)
def test_a_fuzzed_policy_is_read_or_refused_never_a_crash(
    tmp_path: Path, doc: dict[str, dict[str, Any]]
) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(toml_document(doc))
    for read in (load_policy, Policy.from_file):
        message = refusal(read, path)  # anything but a LitmusError fails the test
        assert message is None or 0 < len(message) < 5000


RECORD_KEYS = ["kind", "v", "case_id", "episode_id", "safe", "steps", "provenance", "run_id"]
LINES = st.dictionaries(st.sampled_from(RECORD_KEYS) | st.text(max_size=6), VALUES, max_size=6)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LINES, min_size=1, max_size=4))
def test_fuzzed_verdict_lines_are_read_or_refused_never_a_crash(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    message = refusal(read_verdicts, path)
    assert message is None or str(path) in message


@pytest.mark.parametrize("mode", ["{x = 1}", "[1]", "3", "true"])
def test_a_mode_that_is_not_a_string_is_named(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(f'[tools]\n"send_*" = {{ mode = {mode} }}\n')
    for read in (load_policy, Policy.from_file):
        message = refusal(read, path)
        assert message is not None
        assert message.startswith(f"{path}: [tools] 'send_*': mode: expected one of real, stub")
