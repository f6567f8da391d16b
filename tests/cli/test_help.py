"""What a newcomer reads first: ``--help`` lists the exit codes; the licence the metadata
names is there."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from factories import ROOT

from litmus_sandbox._cli.main import main
from litmus_sandbox._model.about import package_version


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


def test_python_dash_m_runs_the_command_line(tmp_path: Path) -> None:
    """``python -m litmus_sandbox`` is the ``litmus-sandbox`` script, exit codes included."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "litmus_sandbox",
            "gate",
            "--baseline",
            "missing.jsonl",
            "--candidate",
            "c.jsonl",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "missing.jsonl" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_licence_the_metadata_names_is_shipped() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == {"text": "Apache-2.0"}
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_readme_is_a_one_page_guide_pointing_only_at_what_exists() -> None:
    """About a page, the two set-up commands first, ``pip install``; every docs path it
    names exists, and it links to no file (the wheel ships none of them)."""
    import re

    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150
    fence = lines.index("```sh")
    assert lines[fence + 1].startswith("python3 dev.py demo")
    assert lines[fence + 2].startswith("python3 dev.py test")
    assert "pip install ./litmus-sandbox" in readme  # from a clone: not on the package index
    assert "--candidate-episodes demo/candidate.episodes.jsonl --html report.html" in readme
    assert re.search(r"\]\((?!https?://)[^)]+\)", readme) is None, "no relative links"
    for path in re.findall(r"`(docs/[^`]+\.md)`", readme):
        assert (ROOT / path).is_file(), path
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page} is not in mkdocs.yml's nav"


def test_help_names_the_commands_without_loading_them() -> None:
    """``--help`` and ``--version`` build a parser that only names the commands: it says
    what the full parser says, and loads no report, judge, store or I/O library."""
    from litmus_sandbox._cli.main import build_parser

    assert build_parser(full=False).format_help() == build_parser(full=True).format_help()
    probe = (
        "import sys\n"
        "from litmus_sandbox._cli.main import main\n"
        "for argv in (['--help'], ['--version']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    loaded = set(done.stderr.split())
    ours = {m for m in loaded if m.startswith("litmus_sandbox.")}
    assert ours <= {
        "litmus_sandbox._cli",
        "litmus_sandbox._cli.main",
        "litmus_sandbox._cli.parser",
        "litmus_sandbox._model",
        "litmus_sandbox._model.about",
        "litmus_sandbox._model.errors",
    }, ours
    assert not loaded & {"msgspec", "anyio", "httpx", "sqlite3", "watchdog"}
    assert "usage: litmus-sandbox" in done.stdout
    assert done.stdout.rstrip().endswith(f"litmus-sandbox {package_version()}")
