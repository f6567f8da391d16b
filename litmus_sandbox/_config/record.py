"""The ``[record]`` table: what the recorder keeps out of a tool call's arguments.

::

    [record]
    redact = true                        # the default; false records arguments as they are
    redact_keys = ["pin", "session_id"]  # argument keys whose values are secrets (added
                                         # to api_key, password, token, secret ...)
    redact_patterns = ['otp=(\\d{6})']   # regular expressions of secrets in text (added
                                         # to the shapes); the first group, else the match
    keep_defaults = true                 # false: only the keys and patterns above

Redaction is on unless a policy turns it off explicitly (``redact = false``); a table
that leaves nothing to redact while it is on is refused, as is a pattern that does not
compile or matches the empty string. What is redacted, and how, is
:mod:`litmus_sandbox._core.redaction`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from litmus_sandbox._config.explain import config_error
from litmus_sandbox._core.redaction import Redaction
from litmus_sandbox._model.errors import ConfigError


class RecordConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[record]`` table as written."""

    redact: bool = True
    redact_keys: tuple[str, ...] = ()
    redact_patterns: tuple[str, ...] = ()
    keep_defaults: bool = True


def redaction_of(config: RecordConfig, *, source: str = "policy") -> Redaction:
    """The :class:`Redaction` a ``[record]`` table configures.

    Raises:
        ConfigError: a key or pattern that is not valid, or nothing left to redact, named
            ``source: [record] key: ...``.
    """
    try:
        return Redaction(
            enabled=config.redact,
            keys=config.redact_keys,
            patterns=config.redact_patterns,
            keep_defaults=config.keep_defaults,
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}: [record] {exc}") from None


def record_table(value: RecordConfig | Mapping[str, Any] | None, *, source: str) -> RecordConfig:
    """A ``[record]`` table given in code (a mapping, or the Struct), checked.

    Raises:
        ConfigError: an unknown key or a value of the wrong type.
    """
    if value is None:
        return RecordConfig()
    if isinstance(value, RecordConfig):
        return value
    try:
        return msgspec.convert(dict(value), RecordConfig)
    except msgspec.ValidationError as exc:
        raise config_error(exc, RecordConfig, value, source=source, table="record") from None
