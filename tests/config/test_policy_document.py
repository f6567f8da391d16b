"""The policy document: one decoder for the whole file, the same for every consumer."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from litmus_sandbox import ConfigError, Policy, Sandbox, load_policy, read_policy_file
from litmus_sandbox._cli.main import main
from litmus_sandbox._config.document import TABLES, PolicyDocument, decode_document, read_document
from litmus_sandbox._config.tools import DenyEntry, RealEntry, ReplayEntry, StubEntry

#: Each table gets something wrong; what every consumer must say about it.
BAD = [
    (
        '[tools]\n"send_*" = { mode = "stubbed" }\n',
        r"\[tools\] 'send_\*': unknown tool mode 'stubbed'; did you mean 'stub'\?",
    ),
    (
        "[scoring]\ntruncate_on_refual = true\n",
        r"\[scoring\]: unknown key 'truncate_on_refual'; did you mean 'truncate_on_refusal'\?",
    ),
    ('[judge]\nkind = "rulez"\n', r"\[judge\]: unknown judge kind 'rulez'; did you mean 'rules'\?"),
    ('[replay]\norder = "strikt"\n', r"\[replay\] order: unknown replay order 'strikt'"),
    (
        '[oracle]\nforbidden_findings = ["escpae"]\n',
        r"\[oracle\] forbidden_findings\[0\]: unknown finding 'escpae'; did you mean 'escape'\?",
    ),
    ('[refusal]\nnmae = "x"\n', r"\[refusal\]: unknown key 'nmae'; did you mean 'name'\?"),
    ("[record]\nredakt = false\n", r"\[record\]: unknown key 'redakt'; did you mean 'redact'\?"),
    (
        "[record]\nredact_patterns = ['(unclosed']\n",
        r"\[record\] redact_patterns\[0\]: '\(unclosed' is not a regular expression",
    ),
    ('[egress]\n"x.example" = { stauts = 403 }\n', r"\[egress\] 'x.example': .*'stauts'"),
    ("[tool]\n", r"unknown table \[tool\]; did you mean 'tools'\?"),
    ('[tools]\n"pay_*" = "emulate"\n', r"'pay_\*' in emulate mode, but no \[emulator\] table"),
    ('[emulator]\nlabel = "sim"\n', r"\[emulator\] kind: required"),
    (
        '[emulator]\nkind = "opneai"\n',
        r"\[emulator\] kind: unknown emulator kind 'opneai'; did you mean 'openai'\?",
    ),
    (
        '[emulator]\nkind = "openai"\n[emulator.params]\nbase_url = "http://h/v1"\nmodel = "m"\n'
        'prompt_templat = "x"\n',
        r"\[emulator.params\]: unknown key 'prompt_templat'; did you mean 'prompt_template'\?",
    ),
    (
        '[emulator]\nkind = "openai"\n[emulator.params]\nbase_url = "http://h/v1"\nmodel = "m"\n'
        'prompt_template = "$tool alone"\n',
        r"\[emulator.params\]: prompt_template must show \$arguments",
    ),
    (
        '[refusal]\npatterns = ["fine", "(unclosed"]\n',
        r"\[refusal\]: patterns\[1\] '\(unclosed' is not a valid regular expression",
    ),
]

CONSUMERS: dict[str, Callable[[Path], object]] = {
    "read_document": read_document,
    "read_policy_file": read_policy_file,
    "Policy.from_file": Policy.from_file,
    "load_policy": load_policy,
    "Sandbox": lambda p: Sandbox(root=p.parent / "root", episodes=p.parent / "e.jsonl", policy=p),
}


@pytest.mark.parametrize(("text", "message"), BAD)
@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_every_consumer_checks_every_table_the_same_way(
    tmp_path: Path, consumer: str, text: str, message: str
) -> None:
    """The sandbox refuses a misspelt scoring key, the scorer a misspelt tool mode."""
    policy = tmp_path / "p.toml"
    policy.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(policy))}: {message}"):
        CONSUMERS[consumer](policy)


@pytest.mark.parametrize(
    "command",
    [
        ["score", "e.jsonl", "--policy", "{p}", "-o", "v.jsonl"],
        ["rebaseline", "--episodes", "e.jsonl", "--policy", "{p}", "-o", "v.jsonl"],
        ["proxy", "mcp", "--policy", "{p}", "--", "true"],
        ["replay", "--check", "e.jsonl", "--cassette", "e.jsonl", "--policy", "{p}"],
    ],
)
def test_a_bad_policy_is_one_line_and_exit_2_for_every_command(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.jsonl").write_text(
        '{"kind":"episode","v":1,"episode_id":"e","case_id":"c"}\n'
        '{"kind":"end","v":1,"episode_id":"e","status":"complete"}\n'
    )
    (tmp_path / "p.toml").write_text('[tools]\n"send_*" = { mode = "stubbed" }\n')
    assert main([part.format(p="p.toml") for part in command]) == 2
    err = capsys.readouterr().err
    assert err == (
        "litmus-sandbox: error: p.toml: [tools] 'send_*': unknown tool mode 'stubbed'; "
        "did you mean 'stub'? (one of deny, emulate, real, record-new, replay, spy, stub, swallow)\n"
    )
    assert not (tmp_path / "v.jsonl").exists()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"tools": {"x": {"mode": "deny", "reslt": 1}}}, "unknown key 'reslt'"),
        ({"tools": {"x": {"mode": "stub", "reslt": 1}}}, "did you mean 'result'?"),
        (
            {"tools": {"x": {"mode": "deny", "timeout": 3}}},
            "[tools] 'x': timeout apply to mode = 'real', 'swallow' or 'replay' only, not 'deny'",
        ),
        ({"tools": {"x": {"mode": "real", "on_miss": "spy"}}}, "apply to mode = 'replay' only"),
        ({"tools": {"x": {"mode": "spy", "on_miss": "error"}}}, "already says on_miss = 'spy'"),
        ({"tools": {"x": {"timeout": 0}}}, "[tools] 'x'.timeout: Expected `float` > 0.0"),
        ({"tools": {"default": "rael"}}, "[tools] default: unknown tool mode 'rael'"),
        ({"tools": {"x": {"mode": "replay", "ignore": ["$[["]}}}, "ignored path '$[['"),
        ({"tools": 3}, "[tools] must be a table"),
        ({"scoring": {"truncate_on_refusal": "yes"}}, "[scoring] truncate_on_refusal: Expected"),
        ({"scoring": {"reduction": "any"}}, "[scoring] reduction: 'any' is not supported"),
        ({"judge": {"kind": "python"}}, "[judge]: kind = 'python' needs 'entry'"),
        ({"judge": {"kind": "python", "entry": "nocolon"}}, "must look like 'module:function'"),
        ({"judge": {"entry": "a:b"}}, "[judge]: entry apply to kind = 'python' only, not 'rules'"),
        ({"judge": {"retries": -1}}, "[judge] retries: Expected `int` >= 0"),
        (
            {"judge": {"rules": [{"tool": "x", "fidelty": ["real"]}]}},
            "[judge] rules[0]: unknown key 'fidelty'; did you mean 'fidelity'?",
        ),
        (
            {"judge": {"rules": [{"text": "("}]}},
            "[judge]: rules[0] (rule-0): 'text' is not a valid",
        ),
        ({"judge": {"fallback": {"lable": "x"}}}, "[judge.fallback]: unknown key 'lable'"),
        ({"judge": {"fallback": {"kind": "rulez"}}}, "[judge.fallback]: unknown judge kind"),
        ({"judge": {"fallback": {"fallback": {}}}}, "cannot have a fallback of its own"),
        ({"refusal": {"patterns": ["("]}}, "[refusal]: patterns[0] '(' is not a valid regular"),
        ({"egress": {"x.example": "block"}}, "[egress] 'x.example': unknown egress mode 'block'"),
    ],
)
def test_errors_name_the_table_and_the_key_and_suggest_the_near_miss(
    document: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        decode_document(document, source="p.toml")
    assert str(info.value).startswith("p.toml: ")
    assert message in str(info.value)


def test_a_document_is_decoded_into_one_struct_per_mode(tmp_path: Path) -> None:
    (tmp_path / "p.toml").write_text(
        '[tools]\ndefault = "deny"\nsearch = "spy"\n"send_*" = { mode = "stub", result = "ok" }\n'
        'fetch = { timeout = 2 }\nlookup = { mode = "record-new", ignore = ["$.t"] }\n'
        '[replay]\norder = "strict"\n'
    )
    doc = read_document(tmp_path / "p.toml")
    assert doc.source == str(tmp_path / "p.toml")
    assert doc.base_dir == str(tmp_path.resolve())
    assert doc.default == DenyEntry()
    assert list(doc.tools.items()) == [  # the order written: globs are tried in it
        ("search", ReplayEntry(on_miss="spy")),
        ("send_*", StubEntry(result="ok")),
        ("fetch", RealEntry(timeout=2)),
        ("lookup", ReplayEntry(on_miss="record-new", ignore=("$.t",))),
    ]
    assert doc.replay.order == "strict"
    assert doc.egress is None  # no [egress] table: the sandbox applies its own default
    assert doc.judge.kind == "rules"
    assert (doc.tools["search"].mode, doc.default.mode) == ("replay", "deny")


def test_an_empty_document_is_every_default() -> None:
    assert decode_document({}) == PolicyDocument()
    assert decode_document({"judge": {}, "tools": {}}).judge == PolicyDocument().judge


def test_policy_from_a_document_keeps_modes_as_strings() -> None:
    policy = Policy.from_document(
        {"tools": {"a": "spy", "b": {"mode": "swallow", "run": False}, "c": "stub"}}
    )
    assert [(name, tp.mode) for name, tp in policy.entries()] == [
        ("a", "replay"),
        ("b", "swallow"),
        ("c", "stub"),
        ("default", "real"),
    ]
    assert policy.for_tool("a").on_miss == "spy"
    assert policy.for_tool("b").run is False
    assert policy.modes(["zz"]) == {
        "a": "replay",
        "b": "swallow",
        "c": "stub",
        "default": "real",
        "zz": "real",
    }


def test_the_tables_are_written_once() -> None:
    assert set(TABLES) == {
        "tools",
        "replay",
        "emulator",
        "record",
        "egress",
        "scoring",
        "refusal",
        "judge",
        "oracle",
    }
    assert {"tools", "judge"} <= set(PolicyDocument.__struct_fields__)


def test_policy_file_unknown_keys_are_rejected(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text("[scoring]\ntruncate_on_refusel = true\n")
    with pytest.raises(ConfigError, match="truncate_on_refusel"):
        load_policy(p)
    p.write_text("[scoring\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_policy(p)


def test_policy_file_unknown_table_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "p.toml"
    p.write_text('[tool]\ndefault = "real"\n')
    with pytest.raises(ConfigError, match="unknown table"):
        load_policy(p)
    with pytest.raises(ConfigError, match="unknown table"):
        Policy.from_file(p)


def test_refusal_patterns_may_carry_inline_flags(tmp_path: Path) -> None:
    """README's own example: each pattern is its own expression, so ``(?i)`` at its start is
    valid (joined into one alternation, it was "global flags not at the start")."""
    path = tmp_path / "p.toml"
    path.write_text('[refusal]\npatterns = ["(?i)I can\'t help", "(?s)no.way"]\n')
    detector = load_policy(path).detector
    assert detector.is_refusal_text("Sorry, i CAN'T HELP with that")
    assert detector.is_refusal_text("no\nway")
    assert not detector.is_refusal_text("Here is how to do it")
