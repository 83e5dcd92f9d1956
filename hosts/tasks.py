"""Celery tasks for hosts: they take ids, re-fetch, call a service, and are safe to run twice.

The receivers of `hosts.signals` live here too (connected by HostsConfig.ready()): they queue a
requested launch job and the probe of a channel a job registered, so `hosts.deployments.jobs` never imports
this module.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, transaction
from django.dispatch import receiver

from channels.tasks import probe_channel

from . import gpu_history, services, signals
from .deployments import alerts, jobs, supervisor
from .models import Host

logger = logging.getLogger(__name__)

INVENTORY_TASK = "hosts.tasks.refresh_inventory"
RECOVER_TASK = "hosts.tasks.recover_stale_jobs"
POLL_TASK = "hosts.tasks.poll_job"
SUPERVISE_TASK = "hosts.tasks.supervise_deployments"
SAMPLE_TASK = "hosts.tasks.sample_gpus"
INVENTORY_EVERY_MINUTES = 5
RECOVER_EVERY_SECONDS = 15


@shared_task(name=INVENTORY_TASK, ignore_result=True)
def refresh_inventory(host_id: int | None = None) -> None:
    """One host ("Refresh now"), or every host whose key is confirmed (the periodic run)."""
    hosts = Host.objects.filter(pk=host_id) if host_id else Host.objects.key_confirmed()
    for host in hosts:
        try:
            services.refresh_inventory(host)
        except Exception:  # one broken host must not starve the others
            logger.exception("inventory of host %s failed", host.pk)


@shared_task(name="hosts.tasks.run_job", bind=True, ignore_result=True, acks_late=True, reject_on_worker_lost=True)
def run_job(self: Task[Any, Any], job_id: int) -> None:
    """Run a launch/stop/restart/adopt job. Redelivered after a worker dies, it resumes: the job
    finds a server it already started through its pid file instead of starting a second one.
    While the server starts, each look at its health is `poll_job`, re-scheduled with a countdown
    (no worker sleeps); run eagerly (tests, no broker) the job runs to its end inline."""
    if self.request.is_eager:
        jobs.run_inline(job_id)
        return
    look_again(job_id, jobs.run_job(job_id))


@shared_task(name=POLL_TASK, ignore_result=True)
def poll_job(job_id: int) -> None:
    """One look at a starting server's health; safe to run twice (only a job waiting for it moves).
    A look the database did not answer is taken again a little later: raising would end the looks,
    and the sweep would hand the job on as if its worker had died, spending one of its attempts."""
    try:
        delay = jobs.poll_job(job_id)
    except DatabaseError:
        logger.warning("launch job %s: the database did not answer; looking again", job_id, exc_info=True)
        delay = float(settings.HOSTS_JOB_HEARTBEAT_SECONDS)
    look_again(job_id, delay)


def look_again(job_id: int, delay: float | None) -> None:
    """Schedule the next look at a starting server's health, `delay` seconds from now (None: done)."""
    if delay is None:
        return
    try:
        poll_job.apply_async((job_id,), countdown=delay)
    except Exception:  # the broker is down: the stale-job sweep hands the job on once its heartbeat is old
        logger.exception("could not schedule the next health look of launch job %s", job_id)


@shared_task(name=RECOVER_TASK, ignore_result=True)
def recover_stale_jobs() -> None:
    moved = jobs.recover_stale_jobs()
    if moved:
        logger.warning("sent again, handed on or failed %s launch job(s) (lost by the broker or their worker)", moved)


@shared_task(name=SAMPLE_TASK, ignore_result=True)
def sample_gpus() -> None:
    """Beat, every minute: one nvidia-smi --query-gpu call per host into the hourly GPU history,
    and the history past its 30 days deleted."""
    for host in Host.objects.key_confirmed():
        try:
            gpu_history.sample(host)
        except Exception:  # one broken host must not starve the others
            logger.exception("GPU sample of host %s failed", host.pk)
    gpu_history.prune()


@shared_task(name=SUPERVISE_TASK, ignore_result=True)
def supervise_deployments() -> None:
    """Beat, every SUPERVISE_EVERY_SECONDS: crashed servers are noticed, restarted, or put in crash loop."""
    counts = supervisor.supervise()
    if counts["crashed"] or counts["restarted"]:
        logger.warning("supervisor: %s", counts)


@shared_task(name="hosts.tasks.alert_deployment_event", ignore_result=True)
def alert_deployment_event(event_id: int) -> None:
    alerts.deliver(event_id)


@receiver(signals.deployment_event, dispatch_uid="hosts-alert-deployment-event")
def _queue_alert(sender: object, event_id: int, **_kwargs: Any) -> None:
    try:
        alert_deployment_event.delay(event_id)
    except Exception:
        logger.exception("could not queue the alert of deployment event %s", event_id)


@worker_ready.connect(dispatch_uid="hosts-sweep-at-worker-start")
def _sweep_at_worker_start(**_kwargs: Any) -> None:
    """A worker that starts (again, after one was killed) hands on at once the jobs held by dead
    processes of this host, instead of waiting for their heartbeat to go stale."""
    try:
        recover_stale_jobs()
    except Exception:  # the worker must start even if the database is not there yet
        logger.exception("the launch-job sweep at worker start failed")


@receiver(signals.job_requested, dispatch_uid="hosts-queue-job")
def _queue_job(sender: object, job_id: int, **_kwargs: Any) -> None:
    run_job.delay(job_id)  # the broker is down: `jobs.send` marks the job, the sweep sends it again


@receiver(signals.channel_registered, dispatch_uid="hosts-probe-channel")
def _probe_channel(sender: object, channel_id: int, **_kwargs: Any) -> None:
    try:
        probe_channel.delay(channel_id)
    except Exception:
        logger.exception("could not queue a probe of channel %s", channel_id)


def ensure_schedule(**_kwargs: Any) -> None:
    """Register the default periodic tasks once (idempotent; an admin's later edits are kept)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    with transaction.atomic():
        every5, _ = IntervalSchedule.objects.get_or_create(
            every=INVENTORY_EVERY_MINUTES, period=IntervalSchedule.MINUTES
        )
        every15s, _ = IntervalSchedule.objects.get_or_create(
            every=RECOVER_EVERY_SECONDS, period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.get_or_create(
            name="hosts: refresh GPU inventory", defaults={"task": INVENTORY_TASK, "interval": every5}
        )
        # Replaced by the 15-second sweep below (it fails jobs no more: it hands them on).
        PeriodicTask.objects.filter(name="hosts: fail launch jobs whose worker died", task=RECOVER_TASK).delete()
        PeriodicTask.objects.get_or_create(
            name="hosts: hand on launch jobs whose worker died", defaults={"task": RECOVER_TASK, "interval": every15s}
        )
        every20s, _ = IntervalSchedule.objects.get_or_create(
            every=supervisor.SUPERVISE_EVERY_SECONDS, period=IntervalSchedule.SECONDS
        )
        PeriodicTask.objects.get_or_create(
            name="hosts: supervise running deployments", defaults={"task": SUPERVISE_TASK, "interval": every20s}
        )
        every1, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.MINUTES)
        PeriodicTask.objects.get_or_create(
            name="hosts: sample GPU history", defaults={"task": SAMPLE_TASK, "interval": every1}
        )
