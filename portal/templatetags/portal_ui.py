"""Template helpers for the portal's HTML pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

register = template.Library()

# Status words → badge colour class in portal.css.
_TONES = {
    "healthy": "ok",
    "online": "ok",
    "active": "ok",
    "ok": "ok",
    "degraded": "warn",
    "expired": "muted",
    "unknown": "muted",
    "owner inactive": "muted",
    "inactive": "muted",
    "down": "bad",
    "unreachable": "bad",
    "credentials_rejected": "bad",
    "auth_failed": "bad",
    "host_key_changed": "bad",
    "no_driver": "warn",
    "revoked": "bad",
}


@register.simple_tag
def badge(value, label=None):
    """A coloured status pill: `{% badge channel.status channel.get_status_display %}`."""
    text = label if label is not None else value
    tone = _TONES.get(str(value).lower(), "muted")
    return format_html('<span class="badge badge-{}">{}</span>', tone, text)


@register.filter
def limit(value):
    """A limit for display: blank means unlimited."""
    if value in (None, ""):
        return "unlimited"
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value
