"""A stateless MCP server over streamable HTTP on the official Python SDK
(``stateless_http=True``: no ``Mcp-Session-Id``, each request stands alone):
``python mcp_stateless_http_server.py PORT``; ``echo(text)`` returns its text."""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import MCPServer

app = MCPServer("stateless")


@app.tool()
def echo(text: str) -> str:
    """Say ``text`` back."""
    return text


if __name__ == "__main__":
    port = int(sys.argv[1])
    anyio.run(
        lambda: app.run_streamable_http_async(
            host="127.0.0.1", port=port, stateless_http=True, json_response=True
        )
    )
