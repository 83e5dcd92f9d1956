from django.db import models
from django.utils.translation import gettext_lazy as _


class UsageStatus(models.TextChoices):
    OK = "ok", _("OK")
    CLIENT_ERROR = "client_error", _("Client error")
    UPSTREAM_ERROR = "upstream_error", _("Upstream error")
    CLIENT_DISCONNECTED = "client_disconnected", _("Client disconnected")
    RATE_LIMITED = "rate_limited", _("Rate limited")
    UNAVAILABLE = "unavailable", _("Gateway unavailable")  # refused because Redis could not be asked
    INTERRUPTED = "interrupted", _("Interrupted")  # cut by the gateway's own shutdown


class ApiSurface(models.TextChoices):
    CHAT = "chat", _("Chat Completions")
    COMPLETIONS = "completions", _("Completions")
    EMBEDDINGS = "embeddings", _("Embeddings")
    MESSAGES = "messages", _("Anthropic Messages")
    RESPONSES = "responses", _("OpenAI Responses")
    PLAYGROUND = "playground", _("Playground")  # any of the above, sent from the portal's playground page


class KeyState(models.TextChoices):
    """Computed from revoked_at, expires_at and the owner's is_active (Key.state)."""

    ACTIVE = "active", _("active")
    EXPIRED = "expired", _("expired")
    REVOKED = "revoked", _("revoked")
    OWNER_INACTIVE = "owner inactive", _("owner inactive")


class BudgetWindow(models.TextChoices):
    """How a budget's spend resets: each UTC day, ISO week (from Monday), calendar month, or never."""

    DAY = "day", _("per day")
    WEEK = "week", _("per week")
    MONTH = "month", _("per month")
    ONCE = "once", _("one-off (never resets)")


class Pricing(models.TextChoices):
    """How a usage record's cost was found."""

    PRICED = "priced", _("route price")
    FALLBACK = "fallback", _("fallback price (the route has no price)")
    NONE = "none", _("no price")
