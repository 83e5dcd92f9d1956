"""`{% load channel_health %}`: health badges and the health dashboard for any page.

    {% health_badge channel %}   status, last TTFT, 24 h error ratio and sparkline of one channel
    {% health_dashboard %}       channels by status, slowest channels, recent status changes

For a list of channels call `channels.health.history.attach_health(channels)` in the view first:
it fills every badge with two queries in all (otherwise each badge queries for itself).
"""

from __future__ import annotations

from django import template

from channels.health import history

register = template.Library()

COLORS = {
    "healthy": "#1e8a44",
    "degraded": "#b26a00",
    "down": "#c62828",
    "credentials_rejected": "#7b1fa2",
    "unknown": "#6b7280",
}


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


@register.inclusion_tag("channels/_health_badge.html")
def health_badge(channel):
    if not hasattr(channel, "health"):
        history.attach_health([channel])
    return {"channel": channel, "health": channel.health, "color": health_color(channel.status)}


@register.inclusion_tag("channels/_health_dashboard.html")
def health_dashboard(limit: int = 5):
    return history.dashboard(limit)
