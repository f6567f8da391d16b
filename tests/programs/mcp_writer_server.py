"""A stateless (2026-07-28) MCP server on the official Python SDK, over stdio, that
writes on its own as it starts and exits, and where it is told when called.

Usage: mcp_writer_server.py LOG NOTE

Like a package runner with its debug log, it creates ``LOG`` as it starts (before it
reads anything) and appends to it as it exits (after its stdin closes): the server's own
start-up and shutdown. When called, it acts for the agent: the tool ``write(path, text)``
writes ``text`` to ``path``, anywhere; reading the resource ``note://read`` appends a line
to ``NOTE`` (a request that acts before any ``tools/call``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

LOG, NOTE = Path(sys.argv[1]), Path(sys.argv[2])

app = MCPServer("writer")


@app.tool()
def write(path: str, text: str) -> str:
    """Write text to a file."""
    Path(path).write_text(text)
    return f"wrote {len(text)} characters to {path}"


@app.resource("note://read")
def note() -> str:
    """A note; reading it leaves a trace."""
    with NOTE.open("a") as f:
        f.write("read\n")
    return "a note"


if __name__ == "__main__":
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("starting\n")
    app.run()
    with LOG.open("a") as f:
        f.write("exit 0\n")
