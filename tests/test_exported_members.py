"""The package's ``__all__`` lists exactly its public names (httpx's habit)."""

from __future__ import annotations

import litmus_sandbox


def test_all_matches_public_names() -> None:
    public = {n for n in dir(litmus_sandbox) if not n.startswith("_")}
    modules = {"reports", "oracles", "adapters"}  # public submodules, not re-exported names
    assert set(litmus_sandbox.__all__) == public - modules - {"annotations"}


def test_every_exported_name_resolves() -> None:
    for name in litmus_sandbox.__all__:
        assert getattr(litmus_sandbox, name) is not None, name


def test_reports_all_matches_public_names() -> None:
    from litmus_sandbox import reports

    public = {n for n in dir(reports) if not n.startswith("_")} - {"annotations"}
    assert set(reports.__all__) == public
