"""MCP server workflows: the health check that refreshes a server's tools, and call records."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal.i18n import Message, cleared, set_message

from .choices import ServerStatus
from .models import McpCall, McpServer, McpTool

logger = logging.getLogger(__name__)


def check_server(server_id: int) -> McpServer | None:
    """Call the server's `tools/list` with its credentials and record the outcome: new tools are
    added (enabled), known ones updated, vanished ones deleted with their grants (those an admin
    disabled are kept, so they come back disabled). Safe to run twice."""
    # The `mcp` SDK is ~40 MiB of memory: only a process that checks a server loads it.
    from .upstream import Upstream, UpstreamFailure, list_tools

    server = McpServer.objects.filter(pk=server_id).first()
    if server is None:
        return None
    started = time.perf_counter()
    try:
        tools = asyncio.run(list_tools(Upstream.of(server)))
    except UpstreamFailure as exc:
        McpServer.objects.filter(pk=server.pk).update(
            status=ServerStatus.DOWN,
            # what failed, then what to do: both in the reader's language (last_error keeps the English)
            **(
                exc.text
                + Message(
                    gettext_noop(
                        "Check the URL, the transport and the credentials; the gateway refuses calls meanwhile."
                    )
                )
            ).columns("status_message", 300),
            last_error=str(exc)[:500],
            last_checked=timezone.now(),
            last_duration_ms=(time.perf_counter() - started) * 1000,
        )
        server.refresh_from_db()
        return server
    now = timezone.now()
    with transaction.atomic():
        seen = set()
        for tool in tools:
            seen.add(tool.name)
            McpTool.objects.update_or_create(
                server=server,
                name=tool.name,
                defaults={
                    "description": tool.description or "",
                    "input_schema": tool.input_schema,
                    "last_seen": now,
                },
            )
        # A tool an admin switched off is kept while the server does not list it: listed again (a
        # redeploy, a server that lists tools late), it must come back off, not open to every
        # whole-server grant. It is offered nowhere meanwhile (McpTool.objects.enabled()).
        server.tools.exclude(name__in=seen).filter(enabled=True).delete()
        McpServer.objects.filter(pk=server.pk).update(
            status=ServerStatus.HEALTHY,
            **cleared("status_message"),
            last_error="",
            last_checked=now,
            last_duration_ms=(time.perf_counter() - started) * 1000,
        )
    server.refresh_from_db()
    return server


def record_call(**fields: Any) -> McpCall:
    """Append one call record (the gateway calls this on its database thread)."""
    return McpCall.objects.create(**{name: _storable(value) for name, value in fields.items()})


def _storable(value: Any) -> Any:
    """`value` without NUL characters, which PostgreSQL refuses in text and jsonb: a client can put
    one in a tool's name or arguments, and its call must still be on the record."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


SECRET_FIELDS = ("bearer_token", "headers", "oauth_client_secret")
# What an admin edits, in the order the form and the API show it.
EDITABLE_FIELDS = (
    "name",
    "slug",
    "url",
    "transport",
    "enabled",
    "description",
    "auth",
    "bearer_token",
    "headers",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
    "timeout_seconds",
)
CONNECTION_FIELDS = ("url", "transport", "auth", "oauth_issuer", "oauth_client_id", "oauth_scope", *SECRET_FIELDS)


def save_server(server: McpServer, *, secrets: dict[str, str | None], commit: bool = True) -> McpServer:
    """Save `server` (validated), writing the secrets given: a value replaces the stored one, ""
    clears it, None (or absent) keeps it. A change of address or credentials voids the last check."""
    previous = McpServer.objects.filter(pk=server.pk).first() if server.pk else None
    for name in SECRET_FIELDS:
        value = secrets.get(name)
        if value is not None:
            setattr(server, name, value)
        elif previous is not None:
            setattr(server, name, getattr(previous, name))
    server.full_clean()
    if previous is not None and any(getattr(previous, f) != getattr(server, f) for f in CONNECTION_FIELDS):
        server.status, server.last_error = ServerStatus.UNKNOWN, ""
        set_message(server, "status_message", "")
    if commit:
        server.save()
    return server


def set_tool_enabled(tool: McpTool, enabled: bool) -> McpTool:
    McpTool.objects.filter(pk=tool.pk).update(enabled=enabled)
    tool.enabled = enabled
    return tool
