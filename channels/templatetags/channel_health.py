"""`{% load channel_health %}`: health badges and the health dashboard for any page.

    {% health_badge channel %}   status, last TTFT, 24 h error ratio and sparkline of one channel
    {% health_dashboard %}       channels by status, slowest channels, recent status changes

For a list of channels call `channels.health.history.attach_health(channels)` in the view first:
it fills every badge with two queries in all (otherwise each badge queries for itself).
"""

from __future__ import annotations

from django import template
from django.utils.translation import gettext_lazy as _

from channels.health import history

register = template.Library()

COLORS = {
    "healthy": "#1e8a44",
    "degraded": "#b26a00",
    "down": "#c62828",
    "credentials_rejected": "#7b1fa2",
    "unknown": "#6b7280",
}


# A probe's error class (`Outcome.error`, an id kept in the log and the API) as a person reads it.
PROBE_ERRORS = {
    "connect": _("Could not connect"),
    "timeout": _("Timed out"),
    "auth": _("Credentials rejected"),
    "http_4xx": _("Refused (HTTP 4xx)"),
    "http_429": _("Rate limited (HTTP 429)"),
    "http_5xx": _("Server error (HTTP 5xx)"),
    "protocol": _("Not a valid answer"),
    "stalled": _("Stalled after the first byte"),
    "stream_error": _("Error event in the stream"),
}


@register.filter
def probe_error(error: str) -> str:
    return str(PROBE_ERRORS.get(error, error))


@register.filter
def health_color(status: str) -> str:
    return COLORS.get(status, COLORS["unknown"])


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 100:.1f}%" if value < 0.1 else f"{value * 100:.0f}%"


@register.filter
def ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1000:.1f} s" if value >= 10_000 else f"{value:.0f} ms"


LIST_KEYS = ("object_list", "channels", "channel_list", "page_obj")


def _siblings(context, channel) -> list:
    """The other channels on the page, so the first badge fills them all in two queries."""
    for key in LIST_KEYS:
        items = context.get(key)
        if items is None:
            continue
        items = getattr(items, "object_list", items)  # a Page
        try:
            items = list(items)
        except TypeError:
            continue
        if any(getattr(i, "pk", None) == channel.pk and i.__class__ is channel.__class__ for i in items):
            return [i for i in items if i.__class__ is channel.__class__]
    return [channel]


@register.inclusion_tag("channels/_health_badge_body.html", takes_context=True)
def health_badge(context, channel):
    if not hasattr(channel, "health"):
        history.attach_health(_siblings(context, channel))
        if not hasattr(channel, "health"):  # a different instance of a listed channel
            history.attach_health([channel])
    return {"channel": channel, "health": channel.health, "color": health_color(channel.status)}


@register.inclusion_tag("channels/_health_dashboard_body.html")
def health_dashboard(limit: int = 5):
    return history.dashboard(limit)


@register.simple_tag
def health_probes(channel, limit: int = 5) -> list:
    """`{% health_probes channel 5 as probes %}`: the channel's latest evidence rows."""
    return list(channel.probes.all()[: int(limit)])
