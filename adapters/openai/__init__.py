"""OpenAI-style tool loops: import chat and Responses transcripts, record live loops.

Shipped as ``litmus_sandbox.adapters.openai`` (no extra: the ``openai`` package is never
imported; its objects are read through ``model_dump``):

* ``litmus-sandbox import openai-chat|openai-responses TRANSCRIPTS.jsonl -o EPISODES.jsonl``
  (``_transcripts.py``, ``_cli.py``): one episode per line;
* :func:`run_chat_tool_calls` and :func:`run_response_function_calls` (``_live.py``): record
  a model's turn in an open episode and run its calls under the sandbox policy;
  :func:`describe_tools` tells the sandbox's emulator the tools the loop offers.

Both read turns with the same code (``_shapes.py``) and make steps with the same code
(``_steps.py``): calls and results are joined by id, a call without a result makes the
recording truncated, and the same conversation in either API gives the same steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litmus_sandbox import _lazy_exports

if TYPE_CHECKING:
    from litmus_sandbox.adapters.openai._live import describe_tools as describe_tools
    from litmus_sandbox.adapters.openai._live import run_chat_tool_calls as run_chat_tool_calls
    from litmus_sandbox.adapters.openai._live import (
        run_response_function_calls as run_response_function_calls,
    )
    from litmus_sandbox.adapters.openai._steps import RECORDER_NAME as RECORDER_NAME
    from litmus_sandbox.adapters.openai._transcripts import (
        import_transcripts as import_transcripts,
    )

_EXPORTS = {
    "RECORDER_NAME": "litmus_sandbox.adapters.openai._steps",
    "describe_tools": "litmus_sandbox.adapters.openai._live",
    "import_transcripts": "litmus_sandbox.adapters.openai._transcripts",
    "run_chat_tool_calls": "litmus_sandbox.adapters.openai._live",
    "run_response_function_calls": "litmus_sandbox.adapters.openai._live",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = _lazy_exports(__name__, _EXPORTS, __all__)
