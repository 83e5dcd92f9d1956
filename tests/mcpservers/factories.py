"""Test helpers for MCP servers, importable by any test (`from tests.mcpservers.factories import ...`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcpservers.models import McpGrant, McpServer, McpTool


def make_server(
    *,
    slug: str = "tracker",
    url: str = "http://127.0.0.1:9/mcp",
    tools: Iterable[str] = ("echo",),
    name: str | None = None,
    **fields: Any,
) -> McpServer:
    """A server with the given tools already known (as if its health check had listed them), so
    grants can name them without the upstream running."""
    server = McpServer.objects.create(name=name or slug.title(), slug=slug, url=url, **fields)
    for tool in tools:
        McpTool.objects.create(
            server=server,
            name=tool,
            description=f"The {tool} tool",
            input_schema={"type": "object", "properties": {}},
        )
    return server


def grant(server: McpServer, *, tool: str | None = None, key=None, user=None, team=None) -> McpGrant:
    """Allow one key, user or team to call `tool` on `server` (every tool when `tool` is None)."""
    row = server.tools.get(name=tool) if tool is not None else None
    return McpGrant.objects.create(server=server, tool=row, key=key, user=user, team=team)
