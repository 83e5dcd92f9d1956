from django.db import models
from django.utils.translation import gettext_lazy as _


class UsageStatus(models.TextChoices):
    OK = "ok", "OK"
    CLIENT_ERROR = "client_error", "Client error"
    UPSTREAM_ERROR = "upstream_error", "Upstream error"
    CLIENT_DISCONNECTED = "client_disconnected", "Client disconnected"
    RATE_LIMITED = "rate_limited", "Rate limited"
    UNAVAILABLE = "unavailable", "Gateway unavailable"  # refused because Redis could not be asked
    INTERRUPTED = "interrupted", "Interrupted"  # cut by the gateway's own shutdown


class ApiSurface(models.TextChoices):
    CHAT = "chat", "Chat Completions"
    COMPLETIONS = "completions", "Completions"
    EMBEDDINGS = "embeddings", "Embeddings"
    MESSAGES = "messages", "Anthropic Messages"
    RESPONSES = "responses", "OpenAI Responses"
    PLAYGROUND = "playground", _("Playground")  # any of the above, sent from the portal's playground page


class KeyState(models.TextChoices):
    """Computed from revoked_at, expires_at and the owner's is_active (Key.state)."""

    ACTIVE = "active", "active"
    EXPIRED = "expired", "expired"
    REVOKED = "revoked", "revoked"
    OWNER_INACTIVE = "owner inactive", "owner inactive"


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
