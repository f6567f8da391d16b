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
    kind = "rules"                       # or "python" (entry = "module:function"), "openai"
    label = "rules-2026-11"
    retries = 0                          # re-ask a failing judge this many times
    [[judge.rules]]
    tool = "send_*"
    fidelity = ["real", "swallowed"]

    [judge.fallback]                     # optional judge used when the judge keeps failing
    kind = "rules"

    # kind = "python": entry = "module:function", path, [judge.params], and
    # [judge.secrets] name = "ENV_VAR" (the function gets them as secrets=; only the names
    # are written: secret values never appear in a policy file, see _config/secrets.py)

    # kind = "openai": [judge.params] base_url, model, temperature, top_p, seed, max_tokens,
    # system_prompt, prompt_template, api_key_env, timeout, max_concurrency, max_retries,
    # max_retry_after (OpenAIParams)

    [oracle]
    forbidden_findings = ["escape", "stub_leak"]

These are inert configuration: the live judge is built from a :data:`JudgeConfig` one
layer up (``litmus_sandbox.judges``). What can be checked without running anything is
checked here: the rules (:class:`~litmus_sandbox._core.rules.RulesJudge` is pure logic),
the refusal patterns, the shape of a Python entry point.
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from litmus_sandbox._config.explain import near_miss
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
    #: ``[judge.secrets]``: name -> the environment variable that holds it (the function
    #: gets them as ``secrets``; only the names are ever written).
    secrets: dict[str, str] = {}
    #: The hash of the judge's code when verdicts were scored (a rebuilt policy record).
    code_sha256: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        module, sep, attr = self.entry.partition(":")
        if not sep or not module or not attr:
            raise ConfigError(f"judge entry {self.entry!r} must look like 'module:function'")
        for name, variable in self.secrets.items():
            if not name or not _ENV_NAME.match(variable):
                raise ConfigError(
                    f"[judge.secrets] {name!r}: {variable!r} is not an environment variable name"
                    " (a secret is passed by the name of the variable that holds it)"
                )


#: What a ``prompt_template`` may use (``string.Template``): the step rendered, the
#: context before it, the step's index, and how many earlier steps the context left out.
PROMPT_FIELDS: tuple[str, ...] = ("step", "context", "index", "omitted")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ChatParams(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What every OpenAI-compatible endpoint's ``params`` table takes: the judge's
    (:class:`OpenAIParams`) and the tool emulator's (``_config/emulator.py``).

    ``system_prompt`` and ``prompt_template`` left out take the documented defaults of
    whoever asks. The key is never written here: ``api_key_env`` names the environment
    variable that holds it.
    """

    base_url: str
    model: Annotated[str, msgspec.Meta(min_length=1)]
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] = 0.0
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] = 1.0
    seed: int | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 256
    system_prompt: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    prompt_template: str | None = None
    api_key_env: str | None = None
    timeout: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    max_concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 8
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] = 4
    max_retry_after: Annotated[float, msgspec.Meta(ge=0)] = 10.0

    def __post_init__(self) -> None:
        scheme, sep, rest = self.base_url.partition("://")
        host = rest.split("/", 1)[0]
        if scheme not in ("http", "https") or not sep or not host:
            raise ConfigError(f"base_url {self.base_url!r} must be an http:// or https:// URL")
        if "@" in host:
            # A secret written into a policy file would land in every verdict stream.
            raise ConfigError("base_url must not carry credentials; name them in api_key_env")
        if "?" in rest or "#" in rest:
            # Not echoed: a query is where a token would be (base_url?api_key=...).
            shown = self.base_url.split("?", 1)[0].split("#", 1)[0]
            raise ConfigError(f"base_url {shown!r}... must not have a query or fragment")
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise ConfigError(
                f"api_key_env {self.api_key_env!r} is not an environment variable name"
            )


def check_template(template_text: str, fields: tuple[str, ...], required: tuple[str, ...]) -> None:
    """Refuse a ``prompt_template`` that ``string.Template`` cannot fill from ``fields``,
    or that leaves out a field of ``required``.

    Raises:
        ConfigError: a stray ``$``, an unknown ``$name`` (with the near miss), a missing one.
    """
    template = string.Template(template_text)
    if not template.is_valid():
        raise ConfigError("prompt_template has a '$' that is not a $name (write $$)")
    used = set(template.get_identifiers())
    unknown = sorted(used - set(fields))
    if unknown:
        raise ConfigError(
            f"prompt_template uses ${unknown[0]}{near_miss(unknown[0], fields)} "
            f"(it may use {', '.join('$' + f for f in fields)})"
        )
    for name in required:
        if name not in used:
            raise ConfigError(f"prompt_template must show ${name}")


class OpenAIParams(ChatParams, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[judge.params]`` of ``kind = "openai"`` (README: "The OpenAI-compatible judge")."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompt_template is not None:
            check_template(self.prompt_template, PROMPT_FIELDS, ())
            if "step" not in string.Template(self.prompt_template).get_identifiers():
                raise ConfigError("prompt_template must show the judge the step ($step)")


class OpenAIJudgeConfig(_JudgeTable, frozen=True, tag="openai"):
    """``kind = "openai"``: an OpenAI-compatible chat-completions endpoint over HTTP."""

    kind: ClassVar[Literal["openai"]] = "openai"
    params: OpenAIParams


#: The ``[judge]`` table.
JudgeConfig = RulesJudgeConfig | PythonJudgeConfig | OpenAIJudgeConfig
JUDGE_KINDS: tuple[str, ...] = ("rules", "python", "openai")
