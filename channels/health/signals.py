"""An admin editing a channel's key or URL gets a fresh verdict: credentials_rejected and the
counters reset to unknown (the health task moves it on from there)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.utils import timezone

from channels.choices import ChannelStatus
from channels.services import SETTINGS_CHANGED
from portal.i18n import set_message

if TYPE_CHECKING:
    from channels.models import Channel


def reset_status_on_edit(sender: type[Channel], instance: Channel, raw: bool = False, **kwargs: Any) -> None:
    if raw or instance.pk is None:
        return
    old = sender.objects.filter(pk=instance.pk).only("base_url", "api_key", "status", "enabled").first()
    if old is None:
        return
    endpoint_changed = old.base_url != instance.base_url or (old.api_key or "") != (instance.api_key or "")
    if not endpoint_changed:
        return  # nothing the probe cares about
    instance.consecutive_failures = 0  # the old evidence was about another endpoint or key
    instance.consecutive_successes = 0
    if instance.status == old.status and old.status != ChannelStatus.UNKNOWN:
        # (channels.services.reset_status_after_edit does the same for the API; this covers every path)
        instance.status = ChannelStatus.UNKNOWN
        set_message(instance, "status_message", SETTINGS_CHANGED)
        instance.status_changed = timezone.now()
