"""``EpisodeRecorder.begin_call``: a real call finished by its caller records the step
``call_with`` records for the same outcome."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from factories import LoopbackHttp
from hypothesis import given, settings
from hypothesis import strategies as st

from litmus_sandbox import OpenCall, Policy, Sandbox, Shown, ToolCallStep, read_episodes
from litmus_sandbox.oracles.egress import EgressPolicy
from litmus_sandbox.oracles.fs import FsProbe

pytestmark = pytest.mark.anyio

#: Fields that differ between two recordings of the same call (time, identity, order).
VOLATILE = {"started_at": 0.0, "ended_at": 0.0, "call_id": "", "index": 0, "episode_id": ""}


def bare(tmp_path: Path, name: str = "eps.jsonl", **kw: Any) -> Sandbox:
    kw.setdefault("probes", ())
    kw.setdefault("egress", False)
    return Sandbox(root=tmp_path / "root", episodes=tmp_path / name, **kw)


def steps(path: Path) -> list[ToolCallStep]:
    return [s for ep in read_episodes([path]) for s in ep.steps if isinstance(s, ToolCallStep)]


def same(a: ToolCallStep, b: ToolCallStep) -> None:
    assert msgspec.structs.replace(a, **VOLATILE) == msgspec.structs.replace(b, **VOLATILE)


class Odd:
    def __repr__(self) -> str:
        return "<odd>"


OUTCOMES: list[Any] = [
    Shown(content=({"type": "text", "text": "shown as is"},), structured={"k": 1}),
    # Capped to its text, the structure dropped (max_result_bytes is 1024 below).
    Shown(content=({"type": "text", "text": "w" * 900},), structured={"w": "w" * 900}),
    {"status": "sent", "n": [1, 2]},
    "plain text",
    "x" * 5000,  # capped: max_result_bytes is 1024 below
    Odd(),  # no JSON form: repr, flagged
    None,
    ValueError("boom " + "y" * 3000),  # its message capped too
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
async def test_a_finished_call_records_what_call_with_records(tmp_path: Path, outcome: Any) -> None:
    async def runner(_tool: str, _args: dict[str, Any]) -> Any:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    args = {"to": "x@example.invalid", "n": 3}
    async with bare(tmp_path, "a.jsonl", max_result_bytes=1024) as sb, sb.episode("c") as ep:
        await ep.call_with(runner, "send", args)
    async with bare(tmp_path, "b.jsonl", max_result_bytes=1024) as sb, sb.episode("c") as ep:
        call = ep.begin_call("send", args)
        assert isinstance(call, OpenCall)
        failed = isinstance(outcome, BaseException)
        written = call.failed(outcome) if failed else call.done(outcome)
    (via_runner,) = steps(tmp_path / "a.jsonl")
    (inline,) = steps(tmp_path / "b.jsonl")
    assert written == inline
    same(via_runner, inline)


async def test_timeouts_and_interruptions_record_alike(tmp_path: Path) -> None:
    policy = Policy({"slow": {"mode": "real", "timeout": 0.05}})

    async def never(_tool: str, _args: dict[str, Any]) -> Any:
        await anyio.sleep(10)

    async with bare(tmp_path, "a.jsonl", policy=policy) as sb, sb.episode("c") as ep:
        await ep.call_with(never, "slow", {})
        with anyio.move_on_after(0.05):
            await ep.call_with(never, "other", {})
    async with bare(tmp_path, "b.jsonl", policy=policy) as sb, sb.episode("c") as ep:
        slow, other = ep.begin_call("slow", {}), ep.begin_call("other", {})
        assert slow is not None
        assert other is not None
        assert (slow.limit, other.limit) == (0.05, None)
        slow.timed_out()
        other.interrupted()
        with pytest.raises(ValueError, match="no time limit"):
            ep.begin_call("other", {}).timed_out()  # type: ignore[union-attr]
    for a, b in zip(steps(tmp_path / "a.jsonl"), steps(tmp_path / "b.jsonl"), strict=True):
        same(a, b)
    timed_out = steps(tmp_path / "b.jsonl")[0]
    assert timed_out.actual is not None
    assert timed_out.actual.outcome == "timeout"
    assert timed_out.shown.text() == "tool timed out after 0.05s"


async def test_steps_are_numbered_as_calls_finish_and_each_finishes_once(tmp_path: Path) -> None:
    async with bare(tmp_path) as sb, sb.episode("c") as ep:
        first, second = ep.begin_call("a", {}), ep.begin_call("b", {})
        assert first is not None
        assert second is not None
        ep.message("assistant", "between")
        second.done("b")
        first.done("a")
        with pytest.raises(RuntimeError, match="already finished"):
            first.failed(ValueError("late"))
        with pytest.raises(RuntimeError, match="already finished"):
            first.interrupted()
    (episode,) = read_episodes([tmp_path / "eps.jsonl"])
    assert [(s.index, getattr(s, "tool", None)) for s in episode.steps] == [
        (0, None),
        (1, "b"),
        (2, "a"),
    ]
    assert [s.call_id for s in steps(tmp_path / "eps.jsonl")] == [
        f"{episode.episode_id}:2",
        f"{episode.episode_id}:1",
    ]


async def test_finalize_annotates_the_step_before_it_is_written(tmp_path: Path) -> None:
    def note(step: ToolCallStep) -> ToolCallStep:
        return msgspec.structs.replace(step, meta={**step.meta, "seen": step.shown.text()})

    async with bare(tmp_path) as sb, sb.episode("c") as ep:
        call = ep.begin_call("t", {})
        assert call is not None
        assert call.done("hello", note).meta == {"seen": "hello"}
    (step,) = steps(tmp_path / "eps.jsonl")
    assert step.meta == {"seen": "hello"}


@pytest.mark.parametrize(
    "shown", OUTCOMES[:5], ids=["small", "capped", "value", "text", "capped-text"]
)
async def test_meta_known_up_front_records_what_a_finalize_adds(tmp_path: Path, shown: Any) -> None:
    """``done(shown, meta=...)`` builds the step once with its annotations: the same step
    a ``finalize`` adding them makes (after the cap's own note), numbered in its place."""
    relay = {"request_id": 7, "reply": "relay"}

    def annotate(step: ToolCallStep) -> ToolCallStep:
        return msgspec.structs.replace(step, meta={**step.meta, "relay": relay})

    async with bare(tmp_path, "a.jsonl", max_result_bytes=1024) as sb, sb.episode("c") as ep:
        ep.message("user", "first")
        call = ep.begin_call("send", {"n": 1})
        assert call is not None
        via_finalize = call.done(shown, annotate)
    async with bare(tmp_path, "b.jsonl", max_result_bytes=1024) as sb, sb.episode("c") as ep:
        ep.message("user", "first")
        call = ep.begin_call("send", {"n": 1})
        assert call is not None
        up_front = call.done(shown, meta={"relay": relay})
    (a,) = steps(tmp_path / "a.jsonl")
    (b,) = steps(tmp_path / "b.jsonl")
    assert (a, b) == (via_finalize, up_front)
    assert b.index == 1
    assert list(b.meta) == (["capped", "relay"] if "capped" in a.meta else ["relay"])
    same(a, b)


async def test_windowed_probes_observe_an_open_call(tmp_path: Path) -> None:
    """The egress probe observes by time window: an open call gets the flows that started
    while it alone was in flight, with the findings they make."""
    policy = EgressPolicy(rules={"127.0.0.1": "allow"}, default="deny")
    with LoopbackHttp(b"hi") as base:
        async with bare(tmp_path, egress=policy) as sb, sb.episode("c") as ep:
            quiet = ep.begin_call("quiet", {})
            assert quiet is not None
            quiet.done("nothing")
            busy = ep.begin_call("busy", {})
            assert busy is not None
            async with sb.http_client() as http:
                assert (await http.get(f"{base}/x")).status_code == 200
                assert (await http.get("http://denied.invalid/")).status_code == 403
            busy.done("fetched")
    first, second = steps(tmp_path / "eps.jsonl")
    assert first.effects.egress == ()
    assert [(e.host, e.decision) for e in second.effects.egress] == [
        ("127.0.0.1", "allow"),
        ("denied.invalid", "deny"),
    ]
    assert "escape" in [f.code for f in second.findings]


async def test_only_a_plain_real_call_qualifies(tmp_path: Path) -> None:
    policy = Policy(
        {"stubbed": {"mode": "stub", "result": "x"}, "denied": {"mode": "deny"}},
        default="real",
    )
    async with bare(tmp_path, policy=policy) as sb, sb.episode("c") as ep:
        assert ep.begin_call("stubbed", {}) is None
        assert ep.begin_call("denied", {}) is None
        assert ep.begin_call("anything", {}) is not None
    # Probes must run around the call; fsync would block the loop: call_with does both.
    probe = FsProbe(tmp_path / "root")
    async with bare(tmp_path, "p.jsonl", probes=(probe,)) as sb, sb.episode("c") as ep:
        assert ep.begin_call("anything", {}) is None
    async with bare(tmp_path, "f.jsonl", fsync=True) as sb, sb.episode("c") as ep:
        assert ep.begin_call("anything", {}) is None


@settings(max_examples=40, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=50),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    )
)
def test_any_returned_value_records_alike(
    tmp_path_factory: pytest.TempPathFactory, value: Any
) -> None:
    tmp_path = tmp_path_factory.mktemp("any")

    async def runner(_tool: str, _args: dict[str, Any]) -> Any:
        return value

    async def both() -> None:
        async with bare(tmp_path, "a.jsonl", max_result_bytes=64) as sb, sb.episode("c") as ep:
            await ep.call_with(runner, "t", {"v": 1})
        async with bare(tmp_path, "b.jsonl", max_result_bytes=64) as sb, sb.episode("c") as ep:
            call = ep.begin_call("t", {"v": 1})
            assert call is not None
            call.done(value)

    anyio.run(both)
    (a,) = steps(tmp_path / "a.jsonl")
    (b,) = steps(tmp_path / "b.jsonl")
    same(a, b)


async def test_a_shown_over_the_cap_is_recorded_capped_and_given_whole(tmp_path: Path) -> None:
    """A runner's :class:`Shown` larger than ``max_result_bytes`` is recorded as its text
    cut to the cap, with the size and hash of its JSON; the agent gets it whole."""
    big = Shown(
        content=({"type": "text", "text": "é" * 800}, {"type": "image", "data": "A" * 900}),
        is_error=True,
        structured={"k": 1},
    )

    async def runner(_tool: str, _args: dict[str, Any]) -> Any:
        return big

    async with bare(tmp_path, "a.jsonl", max_result_bytes=1024) as sb, sb.episode("c") as ep:
        result = await ep.call_with(runner, "look", {})
    assert result.content == big.content
    assert result.is_error
    (step,) = steps(tmp_path / "a.jsonl")
    assert step.shown.is_error
    assert step.shown.structured is None
    assert step.shown.text() == "é" * 512  # 1024 bytes of UTF-8
    whole = msgspec.json.encode((big.content, big.structured))
    assert step.meta["capped"] == {
        "size": len(whole),
        "sha256": hashlib.sha256(whole).hexdigest(),
    }
