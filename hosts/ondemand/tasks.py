"""Celery tasks of models on demand: the placement (re-scheduled while it waits for room, never a
worker sleeping) and the idle sweep (beat). A pinned deployment's first placement attempt runs
in the process that opened its cold start instead (the gateway), in a thread
(`HOSTS_ONDEMAND_PINNED_IN_PROCESS`)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from django import db
from django.db import transaction
from django.dispatch import receiver

from ..signals import on_demand_status_changed
from ..tasks import look_again
from . import activity, services, signals

logger = logging.getLogger(__name__)

PLACE_TASK = "hosts.ondemand.tasks.place"
SWEEP_TASK = "hosts.ondemand.tasks.sweep_idle"
SWEEP_EVERY_SECONDS = 30


@shared_task(name=PLACE_TASK, ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def place(cold_start_id: int) -> None:
    placement(cold_start_id)


def placement(cold_start_id: int) -> None:
    """One placement attempt (the task's body, or a thread of the process that opened a pinned
    deployment's cold start: `_queue_place`); it queues the next one itself while it waits for
    room. Once a host is chosen the launch job runs here too (`services.launch`), and a server
    still loading after its watch is looked at by re-scheduled tasks like any launch."""
    delay = services.place(cold_start_id)
    if delay is not None:
        _queue_place(None, cold_start_id, countdown=delay)
        return
    if launched := services.launch(cold_start_id):
        look_again(*launched)


def _place_here(cold_start_id: int) -> None:
    try:
        placement(cold_start_id)
    except Exception:  # safe to run twice: a worker takes it from where it stopped
        logger.exception("the placement of cold start %s failed here; queued for a worker", cold_start_id)
        _queue_place(None, cold_start_id)
    finally:
        db.connection.close()


@shared_task(name=SWEEP_TASK, ignore_result=True)
def sweep_idle() -> None:
    if stopped := services.sweep_idle():
        logger.info("stopped idle on-demand deployment(s): %s", ", ".join(stopped))


@worker_ready.connect(dispatch_uid="hosts-ondemand-settle-at-worker-start")
def _settle_at_worker_start(**_kwargs: Any) -> None:
    """A worker that starts (again, after one was killed mid take-out) settles at once the
    take-outs left by dead processes of this host (`services.settle_take_outs`)."""
    try:
        services.settle_take_outs()
    except Exception:  # the worker must start even if the database is not there yet
        logger.exception("settling abandoned take-outs at worker start failed")


@receiver(signals.placement_needed, dispatch_uid="hosts-ondemand-queue-placement")
def _queue_place(sender: object, cold_start_id: int, countdown: float = 0, here: bool = False, **_kwargs: Any) -> None:
    """Queue the placement for a worker, or with `here` run it at once in a thread of this
    process (a pinned deployment's first attempt, `services.demand`): no broker hop, no worker
    to wake, on the cold start's critical path."""
    if here:
        threading.Thread(
            target=_place_here, args=(cold_start_id,), name=f"placement-{cold_start_id}", daemon=True
        ).start()
        return
    try:
        if countdown:
            place.apply_async((cold_start_id,), countdown=countdown)
        else:
            place.delay(cold_start_id)
    except Exception:  # the broker is down: the idle sweep sends it again once Redis answers
        logger.exception("could not queue the placement of cold start %s", cold_start_id)
        services.not_sent(cold_start_id)


@receiver(on_demand_status_changed, dispatch_uid="hosts-ondemand-announce")
def _announce(sender: object, deployment_id: int, **_kwargs: Any) -> None:
    activity.announce(deployment_id)


def ensure_schedule(**_kwargs: Any) -> None:
    """The idle sweep every 30 s (idempotent; connected to post_migrate by HostsConfig)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    with transaction.atomic():
        every, _ = IntervalSchedule.objects.get_or_create(every=SWEEP_EVERY_SECONDS, period=IntervalSchedule.SECONDS)
        PeriodicTask.objects.get_or_create(
            name="hosts: stop on-demand deployments idle past their TTL",
            defaults={"task": SWEEP_TASK, "interval": every},
        )
