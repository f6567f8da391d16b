"""Record the tool calls of existing MCP servers: a stdio relay and a streamable-HTTP proxy.

Shipped as ``litmus_sandbox.adapters.mcp``; the command line is ``litmus-sandbox proxy mcp``.
Messages pass through byte for byte; ``tools/call`` requests become tool-call steps under
the sandbox's per-tool policy (see ``_recording.py`` and ``_episodes.py``).
:class:`ReplayServer` serves a recorded session with no server at all (``_replay_server.py``),
:class:`EmulateServer` a server's listed tools, emulated, with none (``_emulate_server.py``).
"""

from __future__ import annotations

from ._emulate_server import EmulateServer as EmulateServer
from ._episodes import DEFAULT_CASE_ID as DEFAULT_CASE_ID
from ._http import HttpProxy as HttpProxy
from ._jsonrpc import CASE_ID_META_KEY as CASE_ID_META_KEY
from ._recording import McpProtocolError as McpProtocolError
from ._replay_server import ReplayServer as ReplayServer
from ._stdio import StdioProxy as StdioProxy

__all__ = [
    "CASE_ID_META_KEY",
    "DEFAULT_CASE_ID",
    "EmulateServer",
    "HttpProxy",
    "McpProtocolError",
    "ReplayServer",
    "StdioProxy",
]
