"""Who may call what: the one place the MCP allowlist is read (the gateway, the installer, the pages).

Contract (kept stable for `clientconfigs` and the gateway; see /work/mcp-contract.md):

- `allowed_servers(key)`: the enabled servers on which `key` may call at least one enabled tool,
  ordered by name. The installer writes one client entry per server, for `server_url(server, public_url(...))`.
- `allowed_tools(key, server)`: the enabled tools of `server` that `key` may call.

A tool is allowed when a grant (`McpGrant`) of the key, of its owner or of the owner's team names
the tool or its whole server; grants add up, and with none nothing is allowed. A revoked or
expired key, or one whose owner is inactive, is allowed nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from .models import McpGrant, McpServer, McpTool

if TYPE_CHECKING:
    from keys.models import Key

PATH_PREFIX = "/mcp/"


def server_path(server: McpServer) -> str:
    """The gateway path developers use for `server` (`/mcp/<slug>`), under the portal's public URL."""
    return f"{PATH_PREFIX}{server.slug}"


def server_url(server: McpServer, root: str) -> str:
    """The URL a client is given for `server`: `root` is `portal.public.public_url(...)` (no /v1)."""
    return f"{root.rstrip('/')}{server_path(server)}"


def grants_of(key: Key) -> QuerySet[McpGrant]:
    holders = Q(key=key) | Q(user_id=key.owner_id)
    team_id = key.owner.team_id
    if team_id is not None:
        holders |= Q(team_id=team_id)
    return McpGrant.objects.filter(holders)


def allowed_tools(key: Key, server: McpServer | None = None) -> QuerySet[McpTool]:
    """Enabled tools `key` may call (on `server` only, when given)."""
    if not key.is_active:
        return McpTool.objects.none()
    grants = grants_of(key)
    whole = grants.filter(tool__isnull=True).values("server_id")
    single = grants.filter(tool__isnull=False).values("tool_id")
    tools = McpTool.objects.enabled().filter(Q(server_id__in=whole) | Q(pk__in=single))
    if server is not None:
        tools = tools.filter(server=server)
    return tools


def allowed_servers(key: Key) -> list[McpServer]:
    """Enabled servers on which `key` may call at least one tool, by name."""
    server_ids = allowed_tools(key).values("server_id")
    return list(McpServer.objects.enabled().filter(pk__in=server_ids).order_by("name"))
