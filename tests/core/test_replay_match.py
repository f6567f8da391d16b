"""The replay matcher and divergence logic, sans-io: records in, decisions out."""

from __future__ import annotations

import random
from typing import Any

import pytest
from factories import call, episode, msg
from hypothesis import given
from hypothesis import strategies as st

from litmus_sandbox import (
    ConfigError,
    Divergence,
    ReplayOptions,
    ReplaySession,
    Served,
    ToolCallStep,
    check_episodes,
    differing_paths,
)
from litmus_sandbox._core.divergence import select_sources
from litmus_sandbox._model.jsonpath import call_key, format_path, normalize_args, parse_path


def recording(*calls: tuple[str, dict[str, Any]], eid: str = "rec") -> list[ToolCallStep]:
    return [call(i, tool, args=args, eid=eid) for i, (tool, args) in enumerate(calls)]


def session(steps: list[ToolCallStep], **options: Any) -> ReplaySession:
    opts = ReplayOptions(**options)
    return ReplaySession(steps, lambda _tool: opts)


# ---------------------------------------------------------------- paths and keys


def test_paths_parse_and_format_round_trip() -> None:
    for text in ("$._meta", "$.items[*].id", "$['odd key'].x", "$[0]", "$.a.*"):
        assert parse_path(format_path(parse_path(text))) == parse_path(text)
    assert parse_path("request_id") == parse_path("$.request_id")
    assert parse_path("$") == ()
    with pytest.raises(ConfigError, match="cannot read"):
        parse_path("$.a[")


def test_key_ignores_key_order_number_spelling_and_ignored_paths() -> None:
    ignore = [parse_path("$._meta"), parse_path("$.items[*].id")]
    a = {"q": 1, "items": [{"id": "x1", "v": 2}], "_meta": {"trace": "t1"}}
    b = {"_meta": {"trace": "t2"}, "items": [{"v": 2.0, "id": "x2"}], "q": 1.0}
    assert call_key("search", a, ignore) == call_key("search", b, ignore)
    assert call_key("search", a) != call_key("search", b)
    assert call_key("search", {"flag": True}) != call_key("search", {"flag": 1})
    assert call_key("search", {"t": (1, 2)}) == call_key("search", {"t": [1, 2]})


def test_an_ignored_list_element_keeps_the_indices_of_those_after_it() -> None:
    s = session(recording(("t", {"list": [9, 8, 7]})), ignore=("$.list[0]",))
    assert isinstance(s.match("t", {"list": [5, 8, 7]}), Served)
    miss = s.match("t", {"list": [9, 8, 0]})
    assert isinstance(miss, Divergence)
    assert miss.closest[0].differs == ("$.list[2]",)
    # The ignored element never counts, and a list of another length is another call.
    s = session(recording(("t", {"items": [{"v": 1}, {"v": 2}]})), ignore=("$.items[0]",))
    miss = s.match("t", {"items": [{"v": 0}, {"v": 3}]})
    assert isinstance(miss, Divergence)
    assert miss.closest[0].differs == ("$.items[1].v",)
    assert isinstance(s.match("t", {"items": [{"v": 0}, {"v": 2}, {"v": 4}]}), Divergence)


def test_an_ignored_wildcard_ignores_every_element_however_many() -> None:
    s = session(recording(("t", {"list": [1, 2], "q": "a"})), ignore=("$.list[*]",))
    assert isinstance(s.match("t", {"list": [3, 4, 5], "q": "a"}), Served)


def test_differing_paths_name_every_difference() -> None:
    a = normalize_args({"q": "a", "page": 1, "tags": ["x", "y"], "gone": 1})
    b = normalize_args({"q": "b", "page": 1, "tags": ["x"], "new": 2})
    assert differing_paths(a, b) == ["$.gone", "$.new", "$.q", "$.tags[1]"]


def test_options_reject_unknown_values() -> None:
    with pytest.raises(ConfigError, match="order"):
        ReplayOptions(order="random")
    with pytest.raises(ConfigError, match="on_miss"):
        ReplayOptions(on_miss="ignore")
    with pytest.raises(ConfigError, match="ignored path"):
        ReplayOptions(ignore=("$.[",))


# ---------------------------------------------------------------- orders


def test_any_order_serves_repeated_calls_in_recorded_order() -> None:
    s = session(recording(("s", {"q": 1}), ("t", {}), ("s", {"q": 1})))
    first, second, third = (s.match("s", {"q": 1}) for _ in range(3))
    assert isinstance(first, Served)
    assert isinstance(second, Served)
    assert (first.recorded.index, second.recorded.index) == (0, 2)
    assert isinstance(third, Divergence)
    assert third.reason == "repeated"
    assert [u.tool for u in s.unused()] == ["t"]


def test_strict_order_names_the_expected_call_and_consumes_its_position() -> None:
    s = session(recording(("a", {"x": 1}), ("b", {"y": 2}), ("c", {})), order="strict")
    assert isinstance(s.match("a", {"x": 1}), Served)
    miss = s.match("c", {})
    assert isinstance(miss, Divergence)
    assert miss.reason == "out_of_order"  # c was recorded, but third
    assert miss.expected is not None
    assert (miss.expected.tool, miss.expected.differs) == ("b", ("tool",))
    # The position of b is consumed: the third call is compared with the third recording.
    assert isinstance(s.match("c", {}), Served)
    assert [u.tool for u in s.unused()] == ["b"]
    exhausted = s.match("a", {"x": 1})
    assert isinstance(exhausted, Divergence)
    assert exhausted.reason == "repeated"


def test_per_tool_order_counts_within_each_tool() -> None:
    s = session(recording(("a", {"n": 1}), ("b", {}), ("a", {"n": 2})), order="per_tool")
    assert isinstance(s.match("b", {}), Served)  # other tools do not count
    assert isinstance(s.match("a", {"n": 1}), Served)
    miss = s.match("a", {"n": 3})
    assert isinstance(miss, Divergence)
    assert miss.expected is not None
    assert miss.expected.differs == ("$.n",)
    assert miss.reason == "no_match"
    over = s.match("a", {"n": 2})
    assert isinstance(over, Divergence)
    assert over.reason == "out_of_order"  # recorded, but its position went to the miss
    extra = s.match("a", {"n": 9})
    assert isinstance(extra, Divergence)
    assert extra.reason == "recording_exhausted"


def test_closest_calls_rank_unused_and_similar_first() -> None:
    s = session(
        recording(
            ("search", {"q": "cats", "page": 1, "lang": "en"}),
            ("search", {"q": "dogs", "page": 2, "lang": "fr"}),
            ("search", {"q": "cats", "page": 2, "lang": "en"}),
        )
    )
    assert isinstance(s.match("search", {"q": "cats", "page": 1, "lang": "en"}), Served)
    miss = s.match("search", {"q": "cats", "page": 3, "lang": "en"})
    assert isinstance(miss, Divergence)
    assert [(c.step, c.differs, c.used) for c in miss.closest] == [
        (2, ("$.page",), False),
        (1, ("$.lang", "$.page", "$.q"), False),
        (0, ("$.page",), True),
    ]
    assert "no recorded call" in miss.describe()


def test_tools_without_options_are_neither_served_nor_unused() -> None:
    steps = recording(("a", {}), ("real_tool", {}), ("a", {"n": 1}))
    opts = ReplayOptions(order="strict")
    s = ReplaySession(steps, lambda tool: opts if tool == "a" else None)
    assert isinstance(s.match("a", {}), Served)
    assert isinstance(s.match("a", {"n": 1}), Served)  # the real tool's call is skipped
    assert s.unused() == ()
    with pytest.raises(ValueError, match="not served"):
        s.match("real_tool", {})


# ---------------------------------------------------------------- sources and checks


def test_sources_follow_the_case_and_cycle_through_epochs() -> None:
    r1 = episode([], eid="r1", case="c1")
    r2 = episode([], eid="r2", case="c1")
    r3 = episode([], eid="r3", case="c2")
    sup = episode([], eid="s1", case="c1", meta={"replay": {"supplements": ["r2"]}})
    recorded = [r1, r2, r3, sup]
    ids = [[e.episode_id for e in select_sources(recorded, "c1", n)] for n in range(3)]
    assert ids == [["r1"], ["r2", "s1"], ["r1"]]
    # A case never recorded replays the whole cassette (supplements after what they grow).
    pooled = [e.episode_id for e in select_sources(recorded, "other", 0)]
    assert pooled == ["r1", "r2", "r3", "s1"]


def test_check_reports_first_divergence_and_unused_calls() -> None:
    rec = episode(
        [
            msg(0, "user", "go", eid="rec"),
            call(1, "search", args={"q": "a"}, eid="rec"),
            call(2, "send", args={"to": "x"}, eid="rec"),
        ],
        eid="rec",
    )
    new = episode(
        [msg(0, "user", "go", eid="new"), call(1, "search", args={"q": "b"}, eid="new")],
        eid="new",
    )
    (report,) = check_episodes([rec], [new], lambda _t: ReplayOptions())
    assert report.diverged
    assert report.first is not None
    assert (report.first.step, report.first.reason) == (1, "no_match")
    assert report.first.closest[0].differs == ("$.q",)
    assert [u.tool for u in report.unused] == ["search", "send"]
    (same,) = check_episodes([rec], [rec], lambda _t: ReplayOptions(order="strict"))
    assert not same.diverged
    assert (same.calls, same.served) == (2, 2)


# ---------------------------------------------------------------- properties

json_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)
args_st = st.dictionaries(st.sampled_from(["a", "b", "c", "_meta"]), json_values, max_size=4)


def _shuffled(value: Any, rnd: random.Random) -> Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: _shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rnd) for v in value]
    return value


@given(args=args_st, seed=st.integers())
def test_key_order_never_matters(args: dict[str, Any], seed: int) -> None:
    s = session(recording(("t", args)))
    assert isinstance(s.match("t", _shuffled(args, random.Random(seed))), Served)


@given(args=args_st, meta=json_values, other=json_values)
def test_ignored_paths_never_matter(args: dict[str, Any], meta: Any, other: Any) -> None:
    recorded = {**args, "_meta": meta}
    live = {**args, "_meta": other}
    s = session(recording(("t", recorded)), ignore=("$._meta",))
    assert isinstance(s.match("t", live), Served)


calls_st = st.lists(
    st.tuples(st.sampled_from(["x", "y"]), st.fixed_dictionaries({"n": st.integers(0, 2)})),
    max_size=8,
)


@given(rec=calls_st, live=calls_st, order=st.sampled_from(["strict", "per_tool", "any"]))
def test_each_recorded_call_is_served_at_most_once(
    rec: list[tuple[str, dict[str, Any]]], live: list[tuple[str, dict[str, Any]]], order: str
) -> None:
    s = session(recording(*rec), order=order)
    served = []
    for tool, args in live:
        outcome = s.match(tool, args)
        if isinstance(outcome, Served):
            assert (outcome.recorded.tool, outcome.recorded.args) == (tool, args)
            served.append(outcome.recorded.index)
    assert len(served) == len(set(served))
    assert s.served + len(s.divergences) == len(live)
    assert len(s.unused()) == len(rec) - len(served)


@given(rec=calls_st, order=st.sampled_from(["strict", "per_tool", "any"]))
def test_a_recording_replays_itself_without_divergence(
    rec: list[tuple[str, dict[str, Any]]], order: str
) -> None:
    s = session(recording(*rec), order=order)
    assert all(isinstance(s.match(t, a), Served) for t, a in rec)
    assert s.unused() == ()


@given(rec=calls_st, data=st.data())
def test_in_strict_order_a_permutation_diverges_unless_identical(
    rec: list[tuple[str, dict[str, Any]]], data: st.DataObject
) -> None:
    perm = data.draw(st.permutations(rec))
    s = session(recording(*rec), order="strict")
    outcomes = [s.match(t, a) for t, a in perm]
    diverged = any(isinstance(o, Divergence) for o in outcomes)
    assert diverged == (list(perm) != list(rec))


def test_meta_is_never_matched_on() -> None:
    """MCP's ``_meta`` carries volatile trace ids: no option is needed to ignore it."""
    recorded = [call(0, "search", args={"q": "x", "_meta": {"trace": "1"}})]
    s = session(recorded, order="strict")
    assert isinstance(s.match("search", {"q": "x", "_meta": {"trace": "2"}}), Served)
    assert ReplayOptions(ignore=("$._meta",)).paths() == ReplayOptions().paths()


def test_big_integral_numbers_are_one_json_value() -> None:
    assert call_key("t", {"a": 1e20}) == call_key("t", {"a": 100000000000000000000})
    assert call_key("t", {"a": 1e20}) != call_key("t", {"a": 100000000000000000001})
