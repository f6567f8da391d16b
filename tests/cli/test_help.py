"""What a newcomer reads first: ``--help`` lists the exit codes; the licence the metadata
names is there."""

from __future__ import annotations

import tomllib

import pytest
from factories import ROOT

from litmus_sandbox._cli.main import main


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "exit codes: 0 nothing blocks; 1 a REGRESSION" in text
    for code in (
        "2 bad usage",
        "3 litmus-sandbox itself failed",
        "4 NEEDS_REBASELINE",
        "5 nothing was compared",
        "6 the judge gave no verdict",
    ):
        assert code in text
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    assert "exit codes: 0 nothing blocks" in " ".join(capsys.readouterr().out.split())


def test_the_licence_the_metadata_names_is_shipped() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
