"""Celery tasks of weight downloads: one step per run, re-scheduled (never a worker held in a
sleep loop), and a sweep that restarts the chain of steps a dead worker broke."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import transaction
from django.dispatch import receiver

from . import services, signals

logger = logging.getLogger(__name__)

STEP_TASK = "hosts.downloads.tasks.advance_download"
SWEEP_TASK = "hosts.downloads.tasks.sweep_downloads"
SWEEP_EVERY_SECONDS = 15


@shared_task(name=STEP_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def advance_download(download_id: int) -> None:
    """One step of a download; it queues the next one itself while the job is active."""
    services.advance(download_id)


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep_downloads() -> None:
    if moved := services.sweep():
        logger.warning("restarted the polling of download(s) %s", moved)


@receiver(signals.step_needed, dispatch_uid="hosts-downloads-queue-step")
def _queue_step(sender: object, download_id: int, countdown: float = 0, **_kwargs: Any) -> None:
    advance_download.apply_async((download_id,), countdown=countdown)  # the broker is down: `services.send`


def ensure_schedule(**_kwargs: Any) -> None:
    """The sweep every 15 s (idempotent; connected to post_migrate by HostsConfig)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    with transaction.atomic():
        every, _ = IntervalSchedule.objects.get_or_create(every=SWEEP_EVERY_SECONDS, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.get_or_create(
            name="hosts: resume polling downloads whose worker died", defaults={"task": SWEEP_TASK, "interval": every}
        )
