"""A stateless (2026-07-28) MCP server on the official Python SDK, over stdio, with a tool
that declares an output schema: ``weather(city)`` returns ``{"city", "celsius"}``."""

from __future__ import annotations

from typing import TypedDict

from mcp.server.mcpserver import MCPServer

app = MCPServer("typed")


class Weather(TypedDict):
    city: str
    celsius: float


@app.tool()
def weather(city: str) -> Weather:
    """The weather in a city."""
    return {"city": city, "celsius": 21.5}


if __name__ == "__main__":
    app.run()
