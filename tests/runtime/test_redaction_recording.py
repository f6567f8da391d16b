"""Secrets in a call's arguments never reach the disk, nor any output made from it.

A canary secret goes into a call's arguments in every form the ``[record]`` defaults know:
``api_key=``, ``password=``, an ``Authorization: Bearer`` header in nested arguments, a
DSN's password, a PEM block, a JWT. Then every byte the recording, ``score``, ``gate``
(table, JSON, Markdown, JUnit, HTML), ``show``, ``diff`` and ``export otel
--include-content`` write is searched for it. Replay still matches a live call carrying
the plain secret.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from litmus_sandbox import Episode, Policy, Sandbox, ToolCallStep, read_episodes
from litmus_sandbox._cli.main import main
from litmus_sandbox._core.redaction_shapes import MARKER, marker

pytestmark = pytest.mark.anyio

CANARY = "CANARYrec9w4Tq"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJDQU5BUllyZWM5dzRUcSJ9.Q0FOQVJZcmVjOXc0VHE"
PEM = f"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl{CANARY}\n-----END OPENSSH PRIVATE KEY-----\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def secret_args(n: int = 0) -> dict[str, Any]:
    """A call's arguments with the canary in every default form (``n`` varies the rest)."""
    return {
        "query": f"select {n}",
        "api_key": f"{CANARY}-a",
        "password": f"{CANARY}-b",
        "request": {"headers": {"Authorization": f"Bearer {CANARY}c", "Accept": "text/plain"}},
        "dsn": f"postgres://app:{CANARY}d@db.internal:5432/prod",
        "key_file": PEM,
        "session": JWT,
        "cmd": ["psql", f"--password={CANARY}e", "-H", f"Authorization: Bearer {CANARY}f"],
    }


def connect(**args: Any) -> str:
    """The tool: it gets the plain values (it needs them), and says nothing of them."""
    assert args["api_key"] == f"{CANARY}-a"
    return "connected"


async def record(path: Path, root: Path, case: str = "c1", **kw: Any) -> None:
    async with (
        Sandbox(root=root, episodes=path, tools={"connect": connect}, probes=(), **kw) as sb,
        sb.episode(case, agent="agent@1") as ep,
    ):
        ep.message("user", "connect to the database")
        result = await ep.call("connect", **secret_args())
        assert result.value == "connected"


def calls(path: Path) -> list[ToolCallStep]:
    return [s for ep in read_episodes([path]) for s in ep.steps if isinstance(s, ToolCallStep)]


def assert_no_canary(folder: Path, *texts: str) -> int:
    """No file under ``folder`` and no text holds the canary; returns the files searched."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    for p in files:
        assert CANARY.encode() not in p.read_bytes(), f"the canary is in {p}"
    for text in texts:
        assert CANARY not in text
    return len(files)


POLICY = """
[judge]
kind = "rules"
label = "redaction-test"
[[judge.rules]]
id = "no-db"
tool = "connect"
"""


async def test_no_canary_on_disk_or_in_any_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    base, cand = work / "base.jsonl", work / "cand.jsonl"
    await record(base, tmp_path / "root")
    await record(cand, tmp_path / "root")
    (step,) = calls(cand)
    assert step.args["api_key"] == marker(f"{CANARY}-a")
    assert step.args["dsn"].startswith("postgres://app:<redacted ")
    assert step.args["dsn"].endswith("@db.internal:5432/prod")
    assert step.args["request"]["headers"]["Accept"] == "text/plain"
    assert {f["shape"] for f in step.meta["redacted"]} >= {"key", "userinfo", "pem", "jwt"}
    (ep,) = read_episodes([cand])
    assert ep.header.meta["redaction"]["redact"] is True

    policy = work / "policy.toml"
    policy.write_text(POLICY)
    cache = ["--cache", str(work / "cache.sqlite")]
    bv, cv = work / "base.verdicts.jsonl", work / "cand.verdicts.jsonl"
    assert main(["score", str(base), "--policy", str(policy), "-o", str(bv), *cache]) == 0
    assert main(["score", str(cand), "--policy", str(policy), "-o", str(cv), *cache]) == 0
    # The candidate scored now from its recording (--candidate-episodes), beside both
    # sides' timelines in the HTML report.
    gate = ["gate", "--baseline", str(bv), "--baseline-episodes", str(base)]
    gate += ["--candidate-episodes", str(cand), "--policy", str(policy), *cache]
    assert main([*gate, "--html", str(work / "report.html")]) in (0, 1, 4)
    for fmt in ("json", "markdown", "junit", "jsonl"):
        out = work / f"report.{fmt}"
        assert main([*gate, "--format", fmt, "-o", str(out)]) in (0, 1, 4)
    assert main(["show", str(cand), "--verdicts", str(cv)]) == 0
    assert main(["show", "--redactions", str(cand)]) == 0
    assert main(["diff", str(base), str(cand)]) in (0, 1)
    assert main(["export", "otel", str(cand), "--include-content", "-o", str(work / "o.json")]) == 0
    said = capsys.readouterr()
    searched = assert_no_canary(tmp_path, said.out, said.err)
    assert searched >= 12
    # The outputs that show arguments show the redacted form (with redaction off, the
    # HTML report's timelines and the OTel export hold the plain values).
    shown = f"redacted {len(CANARY) + 2} chars sha256:"
    assert shown in (work / "report.html").read_text()
    assert shown in (work / "o.json").read_text()
    assert "$.request.headers.Authorization  key" in said.out  # show --redactions


async def test_show_redactions_lists_fields_by_key_and_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eps = tmp_path / "eps.jsonl"
    await record(eps, tmp_path / "root")
    capsys.readouterr()
    assert main(["show", "--redactions", str(eps)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("episode ")
    assert "case c1  redaction on (sha256:" in lines[0]
    assert "  step 1  connect  $.api_key  key" in lines
    assert "  step 1  connect  $.dsn  userinfo" in lines
    assert "  step 1  connect  $.key_file  pem" in lines
    assert "  step 1  connect  $.session  jwt" in lines
    assert "  step 1  connect  $.cmd[1]  setting" in lines
    assert lines[-1] == (
        "  9 fields redacted in 1 step; by shape: bearer 1, jwt 1, key 3, pem 1, setting 2, "
        "userinfo 1"
    )


async def test_turned_off_explicitly_the_arguments_are_recorded_as_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eps = tmp_path / "eps.jsonl"
    await record(eps, tmp_path / "root", policy={"record": {"redact": False}})
    (step,) = calls(eps)
    assert step.args == secret_args()
    assert "redacted" not in step.meta
    (ep,) = read_episodes([eps])
    assert ep.header.meta["redaction"] == {"redact": False}
    capsys.readouterr()
    assert main(["show", "--redactions", str(eps)]) == 0
    assert "redaction off ([record] redact = false)" in capsys.readouterr().out


async def test_a_policy_extends_the_keys_and_the_patterns(tmp_path: Path) -> None:
    eps = tmp_path / "eps.jsonl"
    policy = tmp_path / "p.toml"
    policy.write_text("[record]\nredact_keys = ['pin']\nredact_patterns = ['otp=(\\d{6})']\n")
    async with (
        Sandbox(root=tmp_path / "root", episodes=eps, policy=policy, probes=()) as sb,
        sb.episode("c") as ep,
    ):
        sb.tool(lambda **_: "ok", name="login")
        await ep.call("login", user="bob", pin=4321, note="otp=123456 sent", password="pw12")
    (step,) = calls(eps)
    assert step.args == {
        "user": "bob",
        "pin": marker("4321"),
        "note": f"otp={marker('123456')} sent",
        "password": marker("pw12"),  # the defaults stay
    }
    assert {"path": "$.note", "shape": "pattern"} in step.meta["redacted"]
    (header,) = [e.header for e in read_episodes([eps])]
    assert "pin" in header.meta["redaction"]["keys"]
    assert header.meta["redaction"]["patterns"] == ["otp=(\\d{6})"]


@dataclasses.dataclass
class Credentials:
    user: str
    password: str


class Opaque:
    def __repr__(self) -> str:
        return f"Opaque(password='{CANARY}', host='db')"


async def test_values_json_cannot_hold_are_looked_through_too(tmp_path: Path) -> None:
    eps = tmp_path / "eps.jsonl"
    async with (
        Sandbox(root=tmp_path / "root", episodes=eps, probes=()) as sb,
        sb.episode("c") as ep,
    ):
        sb.tool(lambda **_: "ok", name="login")
        await ep.call("login", creds=Credentials("bob", CANARY), handle=Opaque())
    assert CANARY.encode() not in eps.read_bytes()
    (step,) = calls(eps)
    assert step.args["creds"] == {"user": "bob", "password": marker(CANARY)}
    assert MARKER.search(step.args["handle"])
    assert step.meta["args_repr_only"] is True


async def test_replay_serves_a_live_call_with_the_plain_secret(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded.jsonl"
    await record(recorded, tmp_path / "root")
    live = tmp_path / "live.jsonl"
    policy = {"tools": {"connect": {"mode": "replay", "on_miss": "error"}}}
    async with (
        Sandbox(root=tmp_path / "root", episodes=live, policy=policy, replay=recorded) as sb,
        sb.episode("c1") as ep,
    ):
        served = await ep.call("connect", **secret_args())
        missed = await ep.call("connect", **secret_args(1))  # another query: a divergence
    assert served.fidelity == "replayed"
    assert served.value == "connected"
    assert missed.is_error
    assert sb.replay_reports[ep.episode_id].divergences
    assert_no_canary(tmp_path, repr(sb.replay_reports))
    first, second = calls(live)
    assert first.fidelity == "replayed"
    divergence = second.meta["replay"]["divergence"]
    assert divergence["args"]["api_key"] == marker(f"{CANARY}-a")
    assert "$.query" in divergence["closest"][0]["differs"]


async def test_a_record_new_cassette_grows_redacted(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded.jsonl"
    await record(recorded, tmp_path / "root")
    policy = {"tools": {"connect": {"mode": "replay", "on_miss": "record-new"}}}
    async with (
        Sandbox(
            root=tmp_path / "root",
            episodes=tmp_path / "live.jsonl",
            policy=policy,
            replay=recorded,
            tools={"connect": connect},
        ) as sb,
        sb.episode("c1") as ep,
    ):
        await ep.call("connect", **secret_args(2))
    grown: list[Episode] = read_episodes([recorded])
    assert len(grown) == 2  # the recording and its supplement
    assert grown[1].header.meta["redaction"]["redact"] is True
    assert_no_canary(tmp_path)


async def test_bad_record_values_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eps = tmp_path / "eps.jsonl"
    await record(eps, tmp_path / "root")
    for text, said in [
        ("[record]\nredact = 'no'\n", "[record] redact: Expected `bool`, got `str`"),
        ("[record]\nredact_keys = 'pin'\n", "[record] redact_keys: Expected `array`"),
        ("[record]\nredact_patterns = ['(']\n", "[record] redact_patterns[0]: '(' is not a"),
        ("[record]\nkeep_defaults = false\n", "[record] keep_defaults = false with no"),
    ]:
        policy = tmp_path / "bad.toml"
        policy.write_text(text)
        capsys.readouterr()
        out = tmp_path / "v.jsonl"
        assert main(["score", str(eps), "--policy", str(policy), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"{policy}: {said}" in err


def test_turning_redaction_off_needs_redact_false() -> None:
    assert Policy().redaction.enabled
    assert Policy.from_any_mapping({"record": {}}).redaction.enabled
    assert not Policy.from_any_mapping({"record": {"redact": False}}).redaction.enabled


async def test_only_the_arguments_are_redacted_not_what_the_agent_was_shown(
    tmp_path: Path,
) -> None:
    """What the agent was shown is recorded as it was (results are data the judge needs);
    only the call's own arguments are redacted."""
    eps = tmp_path / "eps.jsonl"
    async with (
        Sandbox(root=tmp_path / "root", episodes=eps, probes=()) as sb,
        sb.episode("c") as ep,
    ):
        sb.tool(lambda token: f"echo {len(token)}", name="echo")
        await ep.call("echo", token=CANARY)
    (step,) = calls(eps)
    assert step.args == {"token": marker(CANARY)}
    assert step.shown.text() == f"echo {len(CANARY)}"


async def test_a_subprocess_tools_command_lines_are_redacted_wherever_recorded(
    tmp_path: Path,
) -> None:
    """``ep.run``'s arguments, what it left running and what the episode's end killed all
    name command lines: a secret on one is redacted in each."""
    eps = tmp_path / "eps.jsonl"
    script = f"sleep 60 --password={CANARY} 2>/dev/null || sleep 60 & echo started"
    async with (
        Sandbox(root=tmp_path / "root", episodes=eps, probes=(), egress=False) as sb,
        sb.episode("c") as ep,
    ):
        result = await ep.run(["sh", "-c", script, "sh", f"--token={CANARY}"])
    assert result.text == "started\n"
    (step,) = calls(eps)
    assert step.args["cmd"][-1] == f"--token={marker(CANARY)}"
    (episode,) = read_episodes([eps])
    assert episode.end is not None
    assert episode.end.meta["processes_killed"]  # something was left running, and killed
    assert_no_canary(tmp_path)


async def test_show_redactions_prints_recorded_names_inert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    eps = tmp_path / "eps.jsonl"
    tool = "t\x1b]52;c;eA==\x07"
    async with (
        Sandbox(root=tmp_path / "root", episodes=eps, probes=()) as sb,
        sb.episode("case\x1b[2J") as ep,
    ):
        sb.tool(lambda **_: "ok", name=tool)
        await ep.call(tool, **{"\u202etoken": CANARY})
    capsys.readouterr()
    assert main(["show", "--redactions", str(eps)]) == 0
    out = capsys.readouterr().out
    assert not {"\x1b", "\x07", "\u202e"} & set(out)
    assert '$["\\u202etoken"]  key' in out
    assert CANARY not in out
