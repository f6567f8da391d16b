"""Which observed tree holds a path: what the audit hook asks at every write a tool makes."""

from __future__ import annotations

from litmus_sandbox.oracles.fs._attribution import Reach


def test_a_root_watched_whole_covers_everything_under_it_and_nothing_beside_it() -> None:
    reach = Reach([("/r/root", "", frozenset(), None)], ())
    assert reach.covered("/r/root/a.txt")
    assert reach.covered("/r/root/d/e/f.txt")
    assert not reach.covered("/r/rootless/a.txt")  # a sibling sharing the root's name
    assert not reach.covered("/r/other.txt")


def test_paths_left_out_of_the_root_are_covered_only_when_ignored() -> None:
    """A root with exclusions (the episode stream inside it) takes the slower test: an
    excluded path is no snapshot's, unless it is one of the run's own (ignored)."""
    reach = Reach([("/r/root", "", frozenset({"eps"}), None)], ["/r/root/eps/stream.jsonl"])
    assert reach.covered("/r/root/a.txt")
    assert not reach.covered("/r/root/eps/other.jsonl")
    assert reach.covered("/r/root/eps/stream.jsonl")
    assert reach.ignored("/r/root/eps/stream.jsonl")


def test_an_ignored_folder_covers_what_is_under_it_and_not_its_namesakes() -> None:
    reach = Reach([("/r/root", "", frozenset(), None)], ["/var/log/harness/"])
    assert reach.ignored("/var/log/harness")
    assert reach.ignored("/var/log/harness/run.log")
    assert not reach.ignored("/var/log/harness2/run.log")
    assert reach.covered("/var/log/harness/run.log")
    assert not reach.covered("/var/log/harness2/run.log")


def test_a_tripwire_watched_to_a_depth_covers_only_that_deep() -> None:
    reach = Reach([("/r/root", "", frozenset(), None), ("/home/u", "/home/u/", frozenset(), 1)], ())
    assert reach.covered("/home/u/.bashrc")
    assert not reach.covered("/home/u/deep/er.txt")
    assert reach.locate("/home/u/.bashrc") == (1, ".bashrc")
    assert reach.locate("/r/root/x") == (0, "x")


def test_no_trees_cover_nothing() -> None:
    reach = Reach([], ())
    assert not reach.covered("/anything")
    assert reach.root == ""
