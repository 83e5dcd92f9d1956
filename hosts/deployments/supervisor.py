"""Supervised deployments: a beat task looks at every running deployment and restarts what crashed.

Each round (`supervise`, every SUPERVISE_EVERY_SECONDS from beat):

    running      over SSH (the remote layer, argument lists): is the server's process alive? If not,
                 it crashed: its exit code and last log lines are kept on the event, the channel goes
                 out of routing (down, disabled), and the deployment moves to
    crashed      with the next restart due after a backoff (HOSTS_RESTART_BACKOFF_SECONDS doubled
                 per restart this hour, at most HOSTS_RESTART_BACKOFF_MAX_SECONDS); or, when it was
                 restarted `max_restarts_per_hour` times within the hour already, to
    crash_loop   where nothing retries until an admin launches it. With `auto_restart` off a crash
                 stays `crashed`.
    starting     a due restart is a launch job queued by the supervisor (`restarting`); its end is an
                 event like any other: running (the channel registered and probed again: back in
                 routing) or failed, which the next round counts as one more crash.

A multi-node deployment is also checked node by node (`multinode.check_nodes`): when the Ray
process of any node (head or worker) is gone, the deployment crashed, named after that node; the
server on the head is stopped with the rest of the cluster, so the restart starts all of it afresh.

A server whose process is alive but whose health endpoint does not answer for
HOSTS_SUPERVISE_UNHEALTHY_CHECKS rounds in a row is hung: it is killed and handled as a crash.
A host that cannot be reached is not a crash of its server (the channel's health checks take it out
of routing); the host's status says why. Every move goes through `services.set_status` (event,
audit entry, alert targets). Deployments with an active job are left to the job.
"""

from __future__ import annotations

import datetime as dt
import logging

import httpx
from django.conf import settings
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from channels import services as channel_services
from portal.i18n import Message, as_message, stored

from .. import backends
from ..choices import DeploymentStatus, JobAction
from ..diagnose import explain_failure, without_log_lines
from ..models import Deployment, DeploymentEvent, LaunchJob
from ..remote import commands, ssh
from . import jobs, multinode
from .services import set_status

logger = logging.getLogger(__name__)

SUPERVISE_EVERY_SECONDS = 20


def supervise(now: dt.datetime | None = None) -> dict[str, int]:
    """One round over every deployment; returns how many were seen crashed and restarted."""
    now = now or timezone.now()
    busy = LaunchJob.objects.active().values("deployment")
    counts = {"checked": 0, "crashed": 0, "restarted": 0}
    for deployment in Deployment.objects.filter(status=DeploymentStatus.RUNNING).exclude(pk__in=busy):
        counts["checked"] += 1
        try:
            counts["crashed"] += _check(deployment, now)
        except Exception:  # one broken deployment must not starve the others
            logger.exception("supervising deployment %s failed", deployment.pk)
    # An automatic restart that failed (the server died at once): one more crash.
    for deployment in Deployment.objects.filter(status=DeploymentStatus.FAILED, restarting=True).exclude(pk__in=busy):
        job = deployment.jobs.order_by("-created", "-id").first()
        counts["crashed"] += _crashed(
            deployment,
            now,
            reason=stored(deployment, "status_message"),
            exit_code=job.exit_code if job else None,
            log=job.log_tail if job else "",
        )
    due = Deployment.objects.filter(
        status=DeploymentStatus.CRASHED, auto_restart=True, next_restart_at__lte=now
    ).exclude(pk__in=busy)
    for deployment in due:
        counts["restarted"] += _restart(deployment, now)
    return counts


def _check(deployment: Deployment, now: dt.datetime) -> int:
    folder = commands.deployment_dir(deployment.remote_dir)
    try:
        with ssh.connect(deployment.host) as remote:
            if dead := multinode.check_nodes(deployment, remote):
                if deployment.pid and commands.is_alive(remote, deployment.pid):
                    commands.kill(remote, deployment.pid, grace=5)  # it cannot serve without that node
                multinode.stop_cluster(deployment, remote)
                return _crashed(deployment, now, reason=dead.reason, exit_code=None, log=dead.log)
            if not (deployment.pid and commands.is_alive(remote, deployment.pid)):
                exit_code = commands.read_exit_code(remote, folder)
                log = commands.log_tail(remote, folder, deployment.upstream_api_key)
                if deployment.pid:  # only its launcher may have died: the server under it must go too
                    commands.kill(remote, deployment.pid, grace=5)  # (or a restart finds its port taken)
                return _crashed(
                    deployment, now, reason=explain_failure(log, exit_code, deployment), exit_code=exit_code, log=log
                )
            if _healthy(deployment):
                Deployment.objects.filter(pk=deployment.pk).update(unhealthy_checks=0, last_supervised=now)
                return 0
            Deployment.objects.filter(pk=deployment.pk).update(
                unhealthy_checks=F("unhealthy_checks") + 1, last_supervised=now
            )
            deployment.refresh_from_db(fields=["unhealthy_checks"])
            if deployment.unhealthy_checks < settings.HOSTS_SUPERVISE_UNHEALTHY_CHECKS:
                return 0
            log = commands.log_tail(remote, folder, deployment.upstream_api_key)
            commands.kill(remote, deployment.pid, grace=5)
            reason = Message(
                gettext_noop(
                    "The process was alive but its health endpoint did not answer %(checks)s checks in a row; "
                    "it was stopped as hung."
                ),
                checks=deployment.unhealthy_checks,
            )
            return _crashed(deployment, now, reason=reason, exit_code=None, log=log)
    except ssh.SSHError as exc:
        ssh.mark_contact(deployment.host, status=exc.status, message=exc.text)
        return 0


def _healthy(deployment: Deployment) -> bool:
    impl = backends.get(deployment.backend)
    try:
        return httpx.get(deployment.base_url.removesuffix("/v1") + impl.health_path, timeout=5.0).status_code == 200
    except httpx.HTTPError:
        return False


def restarts_within_hour(deployment: Deployment, now: dt.datetime) -> int:
    return DeploymentEvent.objects.filter(
        deployment=deployment,
        automatic=True,
        status=DeploymentStatus.STARTING,
        created__gte=now - dt.timedelta(hours=1),
    ).count()


def backoff_seconds(restarts: int) -> float:
    base = float(settings.HOSTS_RESTART_BACKOFF_SECONDS)
    return min(base * 2.0**restarts, float(settings.HOSTS_RESTART_BACKOFF_MAX_SECONDS))


def _crashed(
    deployment: Deployment, now: dt.datetime, *, reason: Message | str, exit_code: int | None, log: str
) -> int:
    why = without_log_lines(as_message(reason))  # the lines themselves are kept on the event
    restarts = restarts_within_hour(deployment, now)
    limit = deployment.max_restarts_per_hour
    next_restart_at = None
    if not deployment.auto_restart:
        status = DeploymentStatus.CRASHED
        message = Message(gettext_noop("Crashed: %(reason)s Automatic restart is off: launch it again."), reason=why)
    elif restarts >= limit:
        status = DeploymentStatus.CRASH_LOOP
        message = Message(
            gettext_noop(
                "Crash loop: it crashed again after %(restarts)s automatic restarts within an hour. %(reason)s "
                "Automatic restarts have stopped: fix the cause, then launch it again."
            ),
            restarts=restarts,
            reason=why,
        )
    else:
        status = DeploymentStatus.CRASHED
        delay = backoff_seconds(restarts)
        next_restart_at = now + dt.timedelta(seconds=delay)
        message = Message(
            gettext_noop(
                "Crashed: %(reason)s Restarting in %(seconds)s s (automatic restart %(number)s of %(limit)s this hour)."
            ),
            reason=why,
            seconds=f"{delay:g}",
            number=restarts + 1,
            limit=limit,
        )
    moved = set_status(
        deployment,
        status,
        message,
        expect=deployment.status,
        automatic=True,
        alert=True,
        exit_code=exit_code,
        log_tail=log,
        pid=None,
        restarting=False,
        unhealthy_checks=0,
        next_restart_at=next_restart_at,
    )
    if not moved:
        return 0
    logger.warning("deployment %s: %s", deployment.pk, message.english)
    if deployment.channel_id:
        channel_services.take_served_channel_down(
            deployment.channel_id,
            status_message=Message(
                gettext_noop("Deployment %(name)s crashed; out of routing until it runs again."), name=deployment.name
            ),
        )
    return 1


def _restart(deployment: Deployment, now: dt.datetime) -> int:
    number = restarts_within_hour(deployment, now) + 1
    message = Message(
        gettext_noop("Automatic restart %(number)s of %(limit)s this hour."),
        number=number,
        limit=deployment.max_restarts_per_hour,
    )
    if not set_status(
        deployment,
        DeploymentStatus.STARTING,
        message,
        expect=DeploymentStatus.CRASHED,
        automatic=True,
        restarting=True,
        next_restart_at=None,
    ):
        return 0
    try:
        jobs.request_job(deployment, JobAction.LAUNCH)
    except jobs.JobConflict as exc:  # an admin's job got there first: it decides
        logger.info("automatic restart of deployment %s not queued: %s", deployment.pk, exc)
        return 0
    return 1
