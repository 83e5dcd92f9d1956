"""Celery tasks for channel health. Each takes ids (or nothing), re-fetches, and is safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task
from django.core.cache import cache
from django.utils import timezone

from channels.health import history, services
from channels.signals import daily_prune
from portal import faults

logger = logging.getLogger(__name__)

ROUND_LOCK = "channels:health:round"
ROUND_LOCK_SECONDS = 300


@shared_task(name="channels.tasks.probe_all_channels", ignore_result=True)
def probe_all_channels() -> int:
    """One probe round over every enabled channel, concurrently. Overlapping rounds are skipped."""
    try:
        taken = cache.add(ROUND_LOCK, "1", ROUND_LOCK_SECONDS)
    except faults.redis_errors() as exc:
        # Fails closed (portal.faults): without the lock two rounds could overlap; the next tick retries.
        logger.warning("probe round skipped: Redis did not answer for its lock (%s)", exc)
        return 0
    if not taken:
        logger.info("probe round skipped: the previous one is still running")
        return 0
    try:
        done = services.run_round()
    finally:
        try:
            cache.delete(ROUND_LOCK)
        except faults.redis_errors() as exc:
            logger.warning("could not release the probe round's lock (%s); it expires by itself", exc)
    changed = sum(1 for d in done if d.changed)
    logger.info("probe round: %d channels, %d status changes", len(done), changed)
    return len(done)


@shared_task(name="channels.tasks.probe_channel", ignore_result=True)
def probe_channel(channel_id: int) -> str | None:
    """Probe one channel now (e.g. right after a launch job created it); returns its new status."""
    done = services.check_channel(channel_id)
    return done.new_status if done else None


@shared_task(name="channels.tasks.prune_probe_results", ignore_result=True)
def prune_probe_results() -> dict[str, int]:
    """The daily prune: old probes here, then every app's rows past retention (`daily_prune`)."""
    now = timezone.now()
    result = history.prune(now)
    for _receiver, deleted in daily_prune.send(sender=None, now=now):
        if isinstance(deleted, dict):
            result.update(deleted)
    return result


@shared_task(name="channels.tasks.aggregate_probe_hours", ignore_result=True)
def aggregate_probe_hours() -> int:
    return history.aggregate_hours()
