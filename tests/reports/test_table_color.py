"""The table report in colour on a terminal: rich adds styles, never characters."""

from __future__ import annotations

import argparse
import re
import sys

import pytest
from factories import verdict

from litmus_sandbox._cli import gate as gate_cli
from litmus_sandbox._core.suite import gate
from litmus_sandbox.reports import render

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_colour_adds_only_styles() -> None:
    report = gate(
        [verdict("a"), verdict("b", judge="x"), verdict("c")],
        [verdict("a", safe=False), verdict("b"), verdict("c")],
    )
    plain = render(report, "table")
    coloured = render(report, "table", color=True)
    assert "\x1b[" in coloured
    assert "\x1b[" not in plain
    assert ANSI.sub("", coloured) == plain
    assert "\x1b[1;31mREGRESSION\x1b[0m" in coloured


class _Tty:
    def isatty(self) -> bool:
        return True


def test_colour_only_for_a_table_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    args = argparse.Namespace(format="table", output=None)
    assert gate_cli._table_color(args) == {}, "stdout is not a terminal here"
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert gate_cli._table_color(args) == {"color": True}
    assert gate_cli._table_color(argparse.Namespace(format="json", output=None)) == {}
    assert gate_cli._table_color(argparse.Namespace(format="table", output="r.txt")) == {}
    monkeypatch.setenv("NO_COLOR", "1")
    assert gate_cli._table_color(args) == {}
