"""Celery tasks of models on demand: the placement (re-scheduled while it waits for room, never a
worker sleeping) and the idle sweep (beat)."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import transaction
from django.dispatch import receiver

from . import services, signals

logger = logging.getLogger(__name__)

PLACE_TASK = "hosts.ondemand.tasks.place"
SWEEP_TASK = "hosts.ondemand.tasks.sweep_idle"
SWEEP_EVERY_SECONDS = 30


@shared_task(name=PLACE_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def place(cold_start_id: int) -> None:
    """One placement attempt; it queues the next one itself while it waits for room."""
    delay = services.place(cold_start_id)
    if delay is not None:
        _queue_place(None, cold_start_id, countdown=delay)


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep_idle() -> None:
    if stopped := services.sweep_idle():
        logger.info("stopped idle on-demand deployment(s): %s", ", ".join(stopped))


@receiver(signals.placement_needed, dispatch_uid="hosts-ondemand-queue-placement")
def _queue_place(sender: object, cold_start_id: int, countdown: float = 0, **_kwargs: Any) -> None:
    try:
        if countdown:
            place.apply_async((cold_start_id,), countdown=countdown)
        else:
            place.delay(cold_start_id)
    except Exception:  # the broker is down: the waiting requests give up at their budget
        logger.exception("could not queue the placement of cold start %s", cold_start_id)


def ensure_schedule(**_kwargs: Any) -> None:
    """The idle sweep every 30 s (idempotent; connected to post_migrate by HostsConfig)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    with transaction.atomic():
        every, _ = IntervalSchedule.objects.get_or_create(every=SWEEP_EVERY_SECONDS, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.get_or_create(
            name="hosts: stop on-demand deployments idle past their TTL",
            defaults={"task": SWEEP_TASK, "interval": every},
        )
