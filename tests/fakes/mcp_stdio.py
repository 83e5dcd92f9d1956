"""A developer's own local MCP server (stdio, the official SDK): what a real client must still load
beside the team's entries. Run as `python -m tests.fakes.mcp_stdio`; its one tool is `my_note`."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("my-own")


@server.tool()
def my_note(text: str) -> str:
    """Keep a note (the developer's own tool)."""
    return text


if __name__ == "__main__":
    server.run("stdio")
