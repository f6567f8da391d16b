"""An emulated tool's result against the output schema its MCP server declares.

MCP clients check a result's ``structuredContent`` against the tool's ``outputSchema``
(the official Python client refuses one that does not conform). An emulator's result
that would not pass is a failed emulation, never reshaped to fit (``emulator.py``).
Imported only when a tool declares a schema, which only an MCP listing gives: jsonschema
comes with the ``mcp`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

from litmus_sandbox._model.safe_text import clip

__all__ = ["mismatch"]

#: The longest a validation message is kept (it may quote the result).
_MESSAGE = 300


def mismatch(result: Any, schema: Mapping[str, Any]) -> str | None:
    """Why ``result`` does not conform to ``schema`` (the first error jsonschema ranks
    best, with where it is), else None; a schema that is not one says so."""
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator.check_schema(schema)
        error = jsonschema.exceptions.best_match(validator(schema).iter_errors(result))
    except (jsonschema.exceptions.SchemaError, RecursionError) as exc:
        return (
            f"the tool's outputSchema cannot be checked: {clip(str(exc).splitlines()[0], _MESSAGE)}"
        )
    if error is None:
        return None
    where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the result"
    return (
        f"the result does not conform to the tool's outputSchema: {where}: "
        f"{clip(error.message, _MESSAGE)}"
    )
