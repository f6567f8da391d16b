"""The scorer's tables as written: ``[refusal]``, ``[judge]`` (tagged by ``kind``), ``[oracle]``.

::

    [scoring]                            # ScoringPolicy (litmus_sandbox._core.scoring)
    truncate_on_refusal = false          # cut after the first refusal (at scoring time)
    truncate_on_empty_tool_result = false

    [refusal]                            # optional; the built-in heuristic by default
    name = "litmus-heuristic"
    version = "1"
    patterns = ["I can't help"]          # optional; replaces the built-in (case-insensitive)

    [judge]
    kind = "rules"                       # or "python" with entry = "module:function"
    label = "rules-2026-11"
    retries = 0                          # re-ask a failing judge this many times
    [[judge.rules]]
    tool = "send_*"
    fidelity = ["real", "swallowed"]

    [judge.fallback]                     # optional judge used when the judge keeps failing
    kind = "rules"

    [oracle]
    forbidden_findings = ["escape", "stub_leak"]

These are inert configuration: the live judge is built from a :data:`JudgeConfig` one
layer up (``litmus_sandbox.judges``). What can be checked without running anything is
checked here: the rules (:class:`~litmus_sandbox._core.rules.RulesJudge` is pure logic),
the refusal patterns, the shape of a Python entry point.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from litmus_sandbox._core.rules import RuleConfig, RulesJudge
from litmus_sandbox._model.errors import ConfigError
from litmus_sandbox._model.records import FindingCode


class RefusalConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[refusal]`` table: which refusal detector cuts ``truncate_on_refusal``."""

    name: str = "litmus-heuristic"
    version: str = "1"
    patterns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.patterns is None:
            return
        for i, pattern in enumerate(self.patterns):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"patterns[{i}] {pattern!r} is not a valid regular expression: {exc}"
                ) from None


class OracleConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[oracle]`` table: findings that contradict a judge calling their step safe."""

    forbidden_findings: tuple[FindingCode, ...] = ()


class _JudgeTable(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="kind"
):
    label: str | None = None
    retries: Annotated[int, msgspec.Meta(ge=0)] = 0
    fallback: JudgeConfig | None = None

    def __post_init__(self) -> None:
        if self.fallback is not None and self.fallback.fallback is not None:
            raise ConfigError("the fallback judge cannot have a fallback of its own")


class RulesJudgeConfig(_JudgeTable, frozen=True, tag="rules"):
    """``kind = "rules"``: declarative rules, ``[[judge.rules]]``."""

    kind: ClassVar[Literal["rules"]] = "rules"
    rules: tuple[RuleConfig, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        RulesJudge(self.rules)  # pure: compiles the rules, so a bad one is caught on reading


class PythonJudgeConfig(_JudgeTable, frozen=True, tag="python"):
    """``kind = "python"``: a function ``entry = "module:function"``, found on the path,
    beside the policy file, or in ``path`` (relative to the policy file)."""

    kind: ClassVar[Literal["python"]] = "python"
    entry: str
    path: str | None = None
    params: dict[str, Any] = {}
    #: The hash of the judge's code when verdicts were scored (a rebuilt policy record).
    code_sha256: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        module, sep, attr = self.entry.partition(":")
        if not sep or not module or not attr:
            raise ConfigError(f"judge entry {self.entry!r} must look like 'module:function'")


#: The ``[judge]`` table.
JudgeConfig = RulesJudgeConfig | PythonJudgeConfig
JUDGE_KINDS: tuple[str, ...] = ("rules", "python")
