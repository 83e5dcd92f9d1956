"""An admin editing a channel's key or URL gets a fresh verdict: credentials_rejected and the
counters reset to unknown (the health task moves it on from there)."""

from __future__ import annotations

from channels.choices import ChannelStatus


def reset_status_on_edit(sender, instance, raw=False, **kwargs) -> None:
    if raw or instance.pk is None:
        return
    old = sender.objects.filter(pk=instance.pk).only("base_url", "api_key", "status", "enabled").first()
    if old is None:
        return
    endpoint_changed = old.base_url != instance.base_url or (old.api_key or "") != (instance.api_key or "")
    if not endpoint_changed or instance.status != old.status:
        return  # nothing the probe cares about, or the caller sets the status itself
    instance.status = ChannelStatus.UNKNOWN
    instance.status_message = "Changed by an admin; waiting for the next check."
    instance.consecutive_failures = 0
    instance.consecutive_successes = 0
