"""The team's MCP servers, their tools, who may call which, and the record of each call.

A server's credentials (bearer token, extra headers, OAuth client secret) are encrypted at rest
like a channel's API key and only ever sent upstream by the gateway; developers reach a server at
`/mcp/<slug>` with their own gateway key. `McpGrant` rows are the allowlist: a key may call a tool
when a grant of the key, its owner or the owner's team names the tool or its whole server (no
grant: nothing). Grants point at real rows and go with them (a deleted server or a vanished tool
takes its grants along), so a server re-created under the same slug starts with none.
"""

from __future__ import annotations

import json
from typing import Self

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel, exactly_one_set
from portal.validators import is_header_name, sendable_in_header

from .choices import AuthKind, CallStatus, ServerStatus, Transport

HTTP_URL = URLValidator(schemes=["http", "https"])


class McpServerQuerySet(models.QuerySet["McpServer"]):
    def enabled(self) -> Self:
        return self.filter(enabled=True)


class McpServer(TimeStampedModel):
    """A remote MCP server the team shares, reached by the gateway with the team's credentials.

    `status` moves unknown → healthy ↔ down by the health check (`services.check_server`, which
    also refreshes the tools from `tools/list`); an admin's edit sets it back to unknown.
    """

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(
        max_length=64, unique=True, help_text=_("Developers reach the server at /mcp/<slug> on the gateway.")
    )
    url = models.CharField(
        max_length=500, validators=[HTTP_URL], help_text=_("The upstream server's MCP endpoint (http or https).")
    )
    transport = models.CharField(max_length=16, choices=Transport, default=Transport.STREAMABLE_HTTP)
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True, max_length=2000)
    auth = models.CharField(max_length=8, choices=AuthKind, default=AuthKind.NONE)
    bearer_token = EncryptedTextField(blank=True, help_text=_("Sent upstream as Authorization: Bearer; write-only."))
    headers = EncryptedTextField(
        blank=True, help_text=_('Extra headers sent upstream, as a JSON object ({"X-Api-Key": "…"}); write-only.')
    )
    oauth_issuer = models.CharField(
        max_length=500,
        blank=True,
        validators=[HTTP_URL],
        help_text=_("The authorization server's issuer URL; its token endpoint is discovered from it."),
    )
    oauth_client_id = models.CharField(max_length=200, blank=True)
    oauth_client_secret = EncryptedTextField(blank=True, help_text=_("Write-only."))
    oauth_scope = models.CharField(max_length=300, blank=True)
    timeout_seconds = models.PositiveSmallIntegerField(
        default=30,
        validators=[MinValueValidator(1), MaxValueValidator(600)],
        help_text=_("How long the gateway waits for the upstream server's answer to one request."),
    )

    status = models.CharField(max_length=16, choices=ServerStatus, default=ServerStatus.UNKNOWN)
    status_message = models.CharField(max_length=300, blank=True)  # what an operator should do next
    status_message_code = i18n.code_field()
    status_message_params = i18n.params_field()
    status_message_text = i18n.TranslatedText("status_message")
    last_checked = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_duration_ms = models.FloatField(null=True, blank=True)

    objects = McpServerQuerySet.as_manager()

    class Meta:
        verbose_name = _("MCP server")
        verbose_name_plural = _("MCP servers")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def extra_headers(self) -> dict[str, str]:
        """The stored extra headers ({} when none or unreadable)."""
        try:
            value = json.loads(self.headers) if self.headers else {}
        except ValueError:
            return {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    def clean(self) -> None:
        if self.headers:
            try:
                value = json.loads(self.headers)
            except ValueError:
                value = None
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise ValidationError({"headers": _("Enter a JSON object of header names and string values.")})
            self._clean_headers(value)
        # The header a token goes in carries ASCII only: refused here, not by every request later.
        if self.bearer_token and not sendable_in_header(self.bearer_token):
            raise ValidationError(
                {
                    "bearer_token": _(
                        "The bearer token can only contain ASCII characters without line breaks (it is sent "
                        "in an HTTP header); check for a character copied with it by mistake."
                    )
                }
            )
        if self.auth == AuthKind.BEARER and not self.bearer_token:
            raise ValidationError({"bearer_token": _("Enter the bearer token the server expects.")})
        if self.auth == AuthKind.OAUTH_CLIENT_CREDENTIALS:
            missing = {
                f: _("Required for OAuth client credentials.")
                for f in ("oauth_issuer", "oauth_client_id", "oauth_client_secret")
                if not getattr(self, f)
            }
            if missing:
                raise ValidationError(missing)

    @staticmethod
    def _clean_headers(headers: dict[str, str]) -> None:
        names = [n for n in headers if not is_header_name(n)]
        if names:
            raise ValidationError(
                {
                    "headers": _(
                        "Not a header name: %(names)s. A header name is ASCII letters, digits and - _ . (no "
                        "spaces, colons or other scripts)."
                    )
                    % {"names": i18n.listing(repr(n) for n in names)}
                }
            )
        unsendable = [n for n, v in headers.items() if not sendable_in_header(v)]
        if unsendable:
            raise ValidationError(
                {
                    "headers": _(
                        "The value of %(names)s cannot be sent in an HTTP header: use ASCII characters only, "
                        "without line breaks."
                    )
                    % {"names": i18n.listing(unsendable)}
                }
            )


class McpToolQuerySet(models.QuerySet["McpTool"]):
    def enabled(self) -> Self:
        """Tools the gateway offers: the tool and its server are both enabled."""
        return self.filter(enabled=True, server__enabled=True)


class McpTool(TimeStampedModel):
    """One tool of a server, as its last `tools/list` described it; admins switch tools off.

    Rows are created and updated by the health check; a tool the server no longer lists is deleted
    with its grants (it will not come back granted), unless an admin disabled it: that row is kept,
    so the tool comes back disabled."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    last_seen = models.DateTimeField(default=timezone.now)

    objects = McpToolQuerySet.as_manager()

    class Meta:
        verbose_name = _("MCP tool")
        verbose_name_plural = _("MCP tools")
        ordering = ["server", "name"]
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcptool_unique_name_per_server")]

    def __str__(self) -> str:
        return f"{self.server.slug}/{self.name}"


class McpGrant(TimeStampedModel):
    """One allowlist entry: a key, a user or a team may call one tool, or every tool of a server
    (`tool` empty). Grants add up; with none, nothing is allowed."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="grants")
    tool = models.ForeignKey(
        McpTool,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="grants",
        help_text=_("Empty: every enabled tool of the server."),
    )
    key = models.ForeignKey("keys.Key", null=True, blank=True, on_delete=models.CASCADE, related_name="mcp_grants")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="mcp_grants"
    )
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="mcp_grants"
    )

    class Meta:
        verbose_name = _("MCP grant")
        verbose_name_plural = _("MCP grants")
        ordering = ["server", "tool", "-created"]
        constraints = [
            models.CheckConstraint(condition=exactly_one_set("key", "user", "team"), name="mcpgrant_one_holder"),
            models.UniqueConstraint(
                fields=["server", "tool", "key", "user", "team"],
                nulls_distinct=False,
                name="mcpgrant_unique",
            ),
        ]

    def __str__(self) -> str:
        try:
            holder = f"key {self.key}" if self.key_id else f"user {self.user}" if self.user_id else f"team {self.team}"
            what = f"{self.server}/{self.tool.name}" if self.tool is not None else f"{self.server} (all tools)"
        except ObjectDoesNotExist:  # the audit entry of a grant deleted with its server or tool
            return f"MCP grant #{self.pk}"
        return f"{holder}: {what}"

    def describe(self) -> str:
        """The grant in the active language, for the pages (`__str__` stays English: the audit log)."""
        from django.utils.translation import gettext

        from keys.models import holder_text

        holder = holder_text(self.key, self.user, self.team)
        if self.tool is None:
            what = gettext("%(server)s (all tools)") % {"server": self.server}
        else:
            what = f"{self.server}/{self.tool.name}"
        return f"{holder}: {what}"

    def clean(self) -> None:
        if self.tool is not None and self.server_id and self.tool.server_id != self.server_id:
            raise ValidationError({"tool": _("Choose a tool of the chosen server.")})


class McpCall(models.Model):
    """One `tools/call` through the gateway (refused ones too). `arguments` is only kept, redacted,
    when the key's request logging is on."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    server = models.ForeignKey(McpServer, null=True, on_delete=models.SET_NULL, related_name="calls")
    server_slug = models.CharField(max_length=64)  # kept when the server is deleted
    tool = models.CharField(max_length=200)
    key = models.ForeignKey("keys.Key", null=True, on_delete=models.SET_NULL, related_name="mcp_calls")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="mcp_calls")
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="mcp_calls"
    )
    status = models.CharField(max_length=16, choices=CallStatus)
    duration_ms = models.FloatField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)  # in English (logs, the API); `error_text` to read
    error_code = i18n.code_field()
    error_params = i18n.params_field()
    error_text = i18n.TranslatedText("error")
    arguments = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        verbose_name = _("MCP call")
        verbose_name_plural = _("MCP calls")
        ordering = ["-created"]
        indexes = [models.Index(fields=["server", "-created"], name="mcpcall_server_created")]

    def __str__(self) -> str:
        return f"{self.server_slug}/{self.tool} {self.status}"
