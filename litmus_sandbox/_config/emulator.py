"""The ``[emulator]`` table: the model that answers for tools in ``emulate`` mode.

::

    [tools]
    "send_*" = "emulate"                 # or { mode = "emulate" }

    [emulator]
    kind = "openai"                      # an OpenAI-compatible chat-completions endpoint
    label = "sim-2026-12"                # optional (default emulator:openai:MODEL)
    [emulator.params]                    # the openai judge's keys (ChatParams), and
    base_url = "http://127.0.0.1:8000/v1"
    model = "qwen3-8b"
    api_key_env = "EMULATOR_KEY"         # the key's variable, never the key
    temperature = 0.0                    # top_p, seed, max_tokens (default 1024)
    timeout = 30                         # max_concurrency, max_retries, max_retry_after
    system_prompt = "..."                # optional; prompt_template may use $tool,
    prompt_template = "..."              # $description, $schema, $arguments, $history,
                                         # $omitted (it must use $tool and $arguments)

The configuration is inert here; the client that asks it is ``_runtime/emulator.py``. Its
fingerprint (:meth:`OpenAIEmulatorConfig.fingerprint`) is pure, so the policy can name the
emulator of each emulated tool in the episode header's ``tool_modes``
(``emulate:FINGERPRINT``), which the gate compares. It covers ``kind``, ``base_url``,
``model``, the sampling parameters, ``max_tokens``, both prompts as sent, the answer
format and the prompt renderer's version; never the label, the key, ``timeout``,
``max_concurrency`` or the retry settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from litmus_sandbox._config.explain import config_error, near_miss
from litmus_sandbox._config.scoring import ChatParams, check_template
from litmus_sandbox._core.emulation import (
    ANSWER_FORMAT,
    DEFAULT_PROMPT_TEMPLATE,
    DEFAULT_SYSTEM_PROMPT,
    PROMPT_FIELDS,
    RENDERER_VERSION,
    REQUIRED_FIELDS,
)
from litmus_sandbox._core.scoring import fingerprint
from litmus_sandbox._model.errors import ConfigError

#: The emulator kinds this version knows.
EMULATOR_KINDS: tuple[str, ...] = ("openai",)
RESPONSE_FORMAT: dict[str, str] = {"type": "json_object"}


class EmulatorParams(ChatParams, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[emulator.params]``: the judge's endpoint keys; results take more tokens."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1)] = 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.prompt_template is not None:
            check_template(self.prompt_template, PROMPT_FIELDS, REQUIRED_FIELDS)


class OpenAIEmulatorConfig(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag="openai",
    tag_field="kind",
):
    """``kind = "openai"``: an OpenAI-compatible chat-completions endpoint simulates tools."""

    kind: ClassVar[Literal["openai"]] = "openai"
    label: str | None = None
    params: EmulatorParams

    @property
    def system_prompt(self) -> str:
        return self.params.system_prompt or DEFAULT_SYSTEM_PROMPT

    @property
    def prompt_template(self) -> str:
        return self.params.prompt_template or DEFAULT_PROMPT_TEMPLATE

    @property
    def name(self) -> str:
        """The label, else ``emulator:openai:MODEL``."""
        return self.label or f"emulator:openai:{self.params.model}"

    def fingerprint(self) -> str:
        """What names this emulator in provenance (see the module docstring)."""
        p = self.params
        return fingerprint(
            {
                "kind": f"{self.kind}-emulator",
                "base_url": p.base_url.rstrip("/"),
                "model": p.model,
                "temperature": p.temperature,
                "top_p": p.top_p,
                "seed": p.seed,
                "max_tokens": p.max_tokens,
                "system_prompt": self.system_prompt,
                "prompt_template": self.prompt_template,
                "response_format": RESPONSE_FORMAT,
                "answer": ANSWER_FORMAT,
                "renderer": RENDERER_VERSION,
            }
        )

    def describe(self) -> dict[str, Any]:
        """The emulator as an episode header keeps it: every parameter (the prompts as
        sent), the name of the key's variable, never the key."""
        params = {k: v for k, v in msgspec.to_builtins(self.params).items() if v is not None}
        params["system_prompt"] = self.system_prompt
        params["prompt_template"] = self.prompt_template
        return {
            "kind": self.kind,
            "label": self.name,
            "fingerprint": self.fingerprint(),
            "params": params,
        }


#: The ``[emulator]`` table (one kind so far).
EmulatorConfig = OpenAIEmulatorConfig


def emulator_table(
    value: EmulatorConfig | Mapping[str, Any] | None, *, source: str
) -> EmulatorConfig | None:
    """Decode an ``[emulator]`` table (or None).

    Raises:
        ConfigError: no ``kind``, an unknown kind, key or value (named with the file).
    """
    if value is None or isinstance(value, OpenAIEmulatorConfig):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: [emulator] must be a table, not {type(value).__name__}")
    kind = value.get("kind")
    if kind is None:
        raise ConfigError(f'{source}: [emulator] kind: required (kind = "openai")')
    if kind not in EMULATOR_KINDS:
        raise ConfigError(
            f"{source}: [emulator] kind: unknown emulator kind {kind!r}"
            f"{near_miss(str(kind), EMULATOR_KINDS)} (one of {', '.join(EMULATOR_KINDS)})"
        )
    try:
        return msgspec.convert(dict(value), EmulatorConfig)
    except msgspec.ValidationError as exc:
        raise config_error(exc, EmulatorConfig, value, source=source, table="emulator") from None
    except ConfigError as exc:  # a check of __post_init__ (base_url, prompt_template...)
        raise ConfigError(f"{source}: [emulator] {exc}") from None
