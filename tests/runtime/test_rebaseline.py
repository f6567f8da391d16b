"""Re-baselining as a library: the configuration to score with, the re-score, its cost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from factories import call, end, header, msg

from litmus_sandbox import (
    ConfigError,
    JsonlWriter,
    LitmusError,
    Recorder,
    Verdict,
    VerdictCache,
    config_from_mapping,
    read_verdicts,
    score_files,
    write_verdicts,
)
from litmus_sandbox._runtime.rebaseline import (
    fingerprint_problems,
    plan_config,
    rebaseline,
    rebaseline_config,
    rescore_costs,
    single_policy,
)
from litmus_sandbox._store.streams import ReadWarning

POLICY = '[scoring]\ntruncate_on_refusal = {cut}\n[judge]\n[[judge.rules]]\ntool = "send_*"\n'


def _mapping(cut: bool) -> dict[str, Any]:
    return {"scoring": {"truncate_on_refusal": cut}, "judge": {"rules": [{"tool": "send_*"}]}}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    """Baseline recordings of c1 (complete), c2 (truncated by its recorder), c3 (no end);
    a candidate verdict stream scored without a refusal cut."""
    with JsonlWriter(tmp_path / "b.episodes.jsonl") as w:
        w.write(header("b1", "c1"))
        w.write_many([msg(0, "user", "go", eid="b1"), call(1, "send_email", eid="b1")])
        w.write(end("b1", 2))
        w.write(header("b2", "c2", recorder=Recorder(name="old", truncated=True)))
        w.write(msg(0, "user", "go", eid="b2"))
        w.write(end("b2", 1))
        w.write(header("b3", "c3"))
        w.write(msg(0, "user", "go", eid="b3"))
    with JsonlWriter(tmp_path / "c.episodes.jsonl") as w:
        w.write(header("c1", "c1"))
        w.write_many([msg(0, "user", "go", eid="c1"), call(1, "send_email", eid="c1")])
        w.write(end("c1", 2))
    (tmp_path / "new.toml").write_text(POLICY.format(cut="false"))
    (tmp_path / "old.toml").write_text(POLICY.format(cut="true"))
    score_files(
        [tmp_path / "c.episodes.jsonl"], config_from_mapping(_mapping(False)), tmp_path / "c.jsonl"
    )
    return tmp_path


def test_rebaseline_scores_complete_recordings_and_lists_the_rest(suite: Path) -> None:
    config, record = rebaseline_config(like=str(suite / "c.jsonl"))
    assert record is not None
    cache = VerdictCache()
    done = rebaseline([suite / "b.episodes.jsonl"], config, suite / "nb.jsonl", cache=cache)
    assert [v.case_id for v in done.verdicts] == ["c1"]
    assert done.rerun == [
        ("c2", "the recording itself was truncated"),
        ("c3", "the recording is incomplete"),
    ]
    assert (done.stats.judge_calls, done.stats.cache_hits) == (2, 0)
    written = read_verdicts(suite / "nb.jsonl")
    assert [v.case_id for v in written.verdicts] == ["c1"]
    assert written.policies[0].judge == record.judge


def test_a_policy_file_must_score_like_the_candidate(suite: Path) -> None:
    like = str(suite / "c.jsonl")
    config, _ = rebaseline_config(like=like, policy=str(suite / "new.toml"))
    assert config.policy.truncate_on_refusal is False
    with pytest.raises(LitmusError, match=r"old\.toml: does not match .*truncate_on_refusal True"):
        rebaseline_config(like=like, policy=str(suite / "old.toml"))
    only, record = rebaseline_config(policy=str(suite / "old.toml"))
    assert record is None  # nothing to check it against
    assert only.policy.truncate_on_refusal is True
    with pytest.raises(ConfigError, match="needs the candidate's verdicts or a policy file"):
        rebaseline_config()


def test_like_needs_one_policy_record(suite: Path) -> None:
    stream = read_verdicts(suite / "c.jsonl")
    write_verdicts(
        suite / "bare.jsonl", None, [v for v in stream.verdicts if isinstance(v, Verdict)]
    )
    with pytest.raises(LitmusError, match="has no policy record"):
        rebaseline_config(like=str(suite / "bare.jsonl"))
    other = config_from_mapping(_mapping(True))
    assert fingerprint_problems(other, stream.policies[0]) == [
        "truncate_on_refusal True vs candidate's False"
    ]
    assert single_policy([stream, stream]) is stream.policies[0]


def test_rescore_costs_count_what_the_cache_cannot_serve(suite: Path) -> None:
    candidate = [read_verdicts(suite / "c.jsonl")]
    config, why = plan_config(candidate)
    assert config is not None
    assert why is None
    warnings: list[ReadWarning] = []
    episodes = [suite / "b.episodes.jsonl"]
    assert rescore_costs(episodes, config, None, warnings) == {"c1": 2}
    cache = VerdictCache()
    rebaseline(episodes, config, suite / "nb.jsonl", cache=cache)
    assert rescore_costs(episodes, config, cache, warnings) == {"c1": 0}
    assert rescore_costs(episodes, None, None, warnings) == {"c1": None}
    assert plan_config([]) == (None, None)
