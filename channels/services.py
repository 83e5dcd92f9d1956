"""Channel and model workflows shared by the web UI, the REST API and launch jobs."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from .baseurl import BaseURLError, normalize_base_url


def clean_base_url(raw: str) -> tuple[str, list[str]]:
    """Canonical base URL plus human notes on what changed; ValidationError for unusable input."""
    try:
        return normalize_base_url(raw)
    except BaseURLError as exc:
        raise ValidationError({"base_url": [str(exc)]}) from None


def reset_status_after_edit(channel, *, previous_base_url: str, previous_api_key: str) -> bool:
    """An admin edit of the base URL or API key voids the last verdict (including
    `credentials_rejected`): the channel goes back to `unknown` until the next check. Call before
    saving; returns whether the status was reset."""
    from django.utils import timezone

    from .choices import ChannelStatus

    if channel.base_url == previous_base_url and (channel.api_key or "") == (previous_api_key or ""):
        return False
    if channel.status != ChannelStatus.UNKNOWN:
        channel.status = ChannelStatus.UNKNOWN
        channel.status_message = "Connection settings changed; waiting for the next check."
        channel.status_changed = timezone.now()
    return True
