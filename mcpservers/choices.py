from django.db import models
from django.utils.translation import gettext_lazy as _


class Transport(models.TextChoices):
    """How the gateway talks to the upstream server (developers always get Streamable HTTP)."""

    STREAMABLE_HTTP = "streamable-http", _("Streamable HTTP")
    SSE = "sse", _("SSE (older servers)")


class AuthKind(models.TextChoices):
    """How the gateway proves itself to the upstream server; extra headers are sent in every case."""

    NONE = "none", _("None (extra headers only)")
    BEARER = "bearer", _("Bearer token")
    OAUTH_CLIENT_CREDENTIALS = "oauth", _("OAuth client credentials")


class ServerStatus(models.TextChoices):
    """unknown → healthy ↔ down, moved by the health check (`mcpservers.services.check_server`);
    an admin's edit sets it back to unknown."""

    UNKNOWN = "unknown", _("Not checked yet")
    HEALTHY = "healthy", _("Healthy")
    DOWN = "down", _("Down")


class CallStatus(models.TextChoices):
    """The outcome of one tool call through the gateway (`McpCall.status`)."""

    OK = "ok", _("OK")
    TOOL_ERROR = "tool_error", _("Tool reported an error")
    FORBIDDEN = "forbidden", _("Not allowed for this key")
    RATE_LIMITED = "rate_limited", _("Rate limited")
    UPSTREAM_ERROR = "upstream_error", _("Upstream error")
    CANCELLED = "cancelled", _("Cancelled: the client disconnected")
