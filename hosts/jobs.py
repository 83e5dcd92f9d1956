"""Launch jobs: the state machine that launches, stops, restarts or adopts a deployment's server.

A launch job, step by step (each step is a `JobState` with its time in `job.transitions`):

    connecting      SSH to the host (pinned host key)
    starting        already running? → take it over; fit check; port free?; start detached
                    (`remote.commands.start_detached`)
    waiting_health  poll http://HOST:PORT/health until it answers 200, the process dies, or time runs out
    running         the server's context window is read, then channel + model + route are registered
                    through `channels.services` in one transaction and a probe is queued

Any failure before the registration leaves the channel tables untouched and stops what was
started. Stop sends TERM to the server's process group, then KILL after a grace period.

`request_job` queues a job and `run_job` is the body of the Celery task; enqueuing goes through
`hosts.signals`, whose receivers live in `hosts.tasks`.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import socket
import threading
import time
from typing import Any

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from channels import services as channel_services
from channels.models import Channel
from portal import audit
from portal.choices import AuditAction

from . import backends, signals
from .choices import DeploymentStatus, JobAction, JobState
from .deployments import multinode
from .deployments.services import check_fit, check_model_files, fit_refusal, launch_spec, record_allocation
from .diagnose import explain_failure
from .models import Deployment, Host, LaunchJob
from .remote import commands, inventory, ssh
from .showback import services as showback

logger = logging.getLogger(__name__)


class JobConflict(Exception):
    """Another job for the same deployment is still active."""


class JobFailed(Exception):
    """A step failed; the message says why and what to do."""

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def request_job(deployment: Deployment, action: str, *, user=None) -> LaunchJob:
    """Queue a job; refuses (JobConflict) while another job of the deployment is active."""
    try:
        with transaction.atomic():
            job = LaunchJob.objects.create(
                deployment=deployment,
                action=action,
                requested_by=user if user is not None and user.pk else None,
                transitions=[{"state": JobState.QUEUED, "at": timezone.now().isoformat(), "message": ""}],
            )
    except IntegrityError:
        active = deployment.jobs.active().first()
        if action == JobAction.STOP and active is not None and _take_over(active, user):
            return request_job(deployment, action, user=user)
        what = f"Job #{active.pk} ({active.get_action_display()})" if active else "Another job"
        raise JobConflict(f"{what} is still running for {deployment}; wait for it to finish.") from None
    audit.record(
        AuditAction.ACTION, deployment, message=f"{JobAction(action).label} requested (job #{job.pk})", actor=user
    )
    transaction.on_commit(lambda: signals.job_requested.send(sender=LaunchJob, job_id=job.pk))
    return job


def _move(job: LaunchJob, state: str, message: str = "", **fields: Any) -> None:
    now = timezone.now()
    job.transitions = [*job.transitions, {"state": state, "at": now.isoformat(), "message": message[:500]}]
    job.state, job.message, job.heartbeat = state, message[:1000], now
    for key, value in fields.items():
        setattr(job, key, value)
    if state in (JobState.RUNNING, JobState.STOPPED, JobState.FAILED):
        job.finished = now
    # Never `worker`/`attempts`: the sweep may have handed the job on meanwhile.
    job.save(update_fields=["transitions", "state", "message", "heartbeat", "finished", "updated", *fields])


def _beat(job: LaunchJob, **fields: Any) -> None:
    fields["heartbeat"] = timezone.now()
    LaunchJob.objects.filter(pk=job.pk).update(**fields)
    for key, value in fields.items():
        setattr(job, key, value)


def _set_deployment(deployment: Deployment, status: str, message: str = "", **fields: Any) -> None:
    fields.update(status=status, status_message=message[:500])
    Deployment.objects.filter(pk=deployment.pk).update(**fields)
    for key, value in fields.items():
        setattr(deployment, key, value)
    showback.record_status(deployment)  # opens or closes the run whose GPU-hours are shown back


def _stale(cutoff: datetime.datetime) -> Q:
    return Q(heartbeat__isnull=True) | Q(heartbeat__lt=cutoff)


def worker_id() -> str:
    """Who holds a job: this host and process (a pool process under prefork)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _stale_cutoff(now: datetime.datetime | None = None) -> datetime.datetime:
    return (now or timezone.now()) - datetime.timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS)


def _claim(job: LaunchJob) -> bool:
    """Take the job unless a live worker already holds it: free (`worker` empty: queued or handed
    back by the sweep) or silent for HOSTS_STALE_JOB_SECONDS. One UPDATE, so two workers that got
    the same message cannot both win."""
    me = worker_id()
    moved = (
        LaunchJob.objects.active()
        .filter(pk=job.pk)
        .filter(Q(worker="") | _stale(_stale_cutoff()))
        .update(heartbeat=timezone.now(), worker=me, attempts=F("attempts") + 1)
    )
    if moved:
        job.worker, job.attempts = me, job.attempts + 1
    return moved == 1


class _Heartbeat:
    """Touches the job's heartbeat every HOSTS_JOB_HEARTBEAT_SECONDS from a thread, whatever the
    job is doing (an SSH call, a long wait for /health), so a short stale window is safe."""

    def __init__(self, job: LaunchJob) -> None:
        self.job_id, self.worker = job.pk, job.worker
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"job-{job.pk}-heartbeat", daemon=True)

    def _run(self) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(float(settings.HOSTS_JOB_HEARTBEAT_SECONDS)):
                try:
                    LaunchJob.objects.filter(pk=self.job_id, worker=self.worker).update(heartbeat=timezone.now())
                except Exception:  # a locked SQLite file or a blip: the next beat tries again
                    logger.warning("heartbeat of launch job %s failed", self.job_id, exc_info=True)
        finally:
            connection.close()

    def __enter__(self) -> _Heartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def run_job(job_id: int) -> None:
    """The body of the Celery task: safe to run twice; a job already finished or held by a live
    worker is left alone, a job handed back after its worker died resumes (see `_launch`)."""
    try:
        job = LaunchJob.objects.select_related("deployment__host").get(pk=job_id)
    except LaunchJob.DoesNotExist:
        return
    if not job.is_active:
        return
    if not _claim(job):
        logger.info("launch job %s is held by another worker", job_id)
        return
    with _Heartbeat(job):
        _run_claimed(job)


def _run_claimed(job: LaunchJob) -> None:
    deployment = job.deployment
    try:
        _move(job, JobState.CONNECTING, f"Connecting to {deployment.host}")
        with ssh.connect(deployment.host) as remote:
            if job.action in (JobAction.STOP, JobAction.RESTART):
                _stop(job, deployment, remote)
            if job.action in (JobAction.LAUNCH, JobAction.RESTART):
                _launch(job, deployment, remote)
            elif job.action == JobAction.ADOPT:
                _adopt(job, deployment, remote)
            _refresh_gpus(deployment.host, remote)
    except ssh.SSHError as exc:
        ssh.mark_contact(deployment.host, status=exc.status, message=exc.message)
        _fail(job, deployment, exc.message)
        return
    except JobFailed as exc:
        _fail(job, deployment, exc.message, exit_code=exc.exit_code)
        return
    except Exception as exc:
        logger.exception("launch job %s crashed", job.pk)
        _fail(job, deployment, f"Internal error ({exc.__class__.__name__}); see the worker log.")
        return
    if job.state == JobState.RUNNING and deployment.channel_id:
        signals.channel_registered.send(sender=LaunchJob, channel_id=deployment.channel_id)


def _refresh_gpus(host: Host, remote: ssh.Remote) -> None:
    """The GPUs' memory just changed: update the inventory over the open connection."""
    try:
        inventory.store(host, inventory.collect(remote))
    except (inventory.InventoryError, ssh.SSHError) as exc:
        logger.info("inventory after a job on host %s failed: %s", host.pk, exc)


def _fail(job: LaunchJob, deployment: Deployment, message: str, *, exit_code: int | None = None) -> None:
    _move(job, JobState.FAILED, message, exit_code=exit_code)
    _set_deployment(deployment, DeploymentStatus.FAILED, message)
    logger.info("launch job %s failed: %s", job.pk, message)


# --- steps ------------------------------------------------------------------------------------------
def _dir(deployment: Deployment) -> str:
    return commands.deployment_dir(deployment.remote_dir)


def _log_tail(remote: ssh.Remote, deployment: Deployment) -> str:
    return commands.log_tail(remote, _dir(deployment), deployment.upstream_api_key)


def _start(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> int:
    impl = backends.get(deployment.backend)
    spec = launch_spec(deployment)
    argv = impl.argv(spec)
    job.command = backends.preview(argv, spec.env, spec.api_key)
    pid, said = commands.start_detached(remote, _dir(deployment), argv, spec.env, impl.secret(spec))
    if pid is None:
        raise JobFailed(f"Could not start the server: {said[:300]}")
    return pid


def _wait_healthy(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int) -> int | None:
    """Poll /health until 200; returns the context window the server reports."""
    impl = backends.get(deployment.backend)
    root = deployment.base_url.removesuffix("/v1")
    timeout = settings.HOSTS_HEALTH_TIMEOUT
    deadline = time.monotonic() + timeout
    last_tail = 0.0
    with httpx.Client(timeout=5.0) as client:
        while True:
            try:
                healthy = client.get(root + impl.health_path).status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy:
                try:
                    ctx = impl.context_window(client, root, deployment.upstream_api_key, deployment.served_model_name)
                except (httpx.HTTPError, ValueError) as exc:
                    raise JobFailed(f"The server is up but did not say its context window ({exc}).") from None
                _beat(job, log_tail=_log_tail(remote, deployment))
                return ctx
            if not commands.is_alive(remote, pid):
                exit_code = commands.read_exit_code(remote, _dir(deployment))
                log = _log_tail(remote, deployment)
                _beat(job, log_tail=log)
                raise JobFailed(explain_failure(log, exit_code, deployment), exit_code=exit_code)
            if time.monotonic() > deadline:
                log = _log_tail(remote, deployment)
                _beat(job, log_tail=log)
                commands.kill(remote, pid)
                raise JobFailed(
                    f"No healthy answer from {root}/health within {timeout:g} s; the server was stopped. "
                    "Is the port reachable from the portal (firewall)? " + explain_failure(log, None, deployment)
                )
            if time.monotonic() - last_tail > 2:
                _beat(job, log_tail=_log_tail(remote, deployment))
                last_tail = time.monotonic()
            time.sleep(settings.HOSTS_HEALTH_POLL)  # nothing to await: the remote server only answers when asked


def _register(deployment: Deployment, context_window: int | None) -> Channel:
    """Channel + model + route for a healthy server, and the deployment pointing at it: all or nothing."""
    impl = backends.get(deployment.backend)
    with transaction.atomic():
        channel = channel_services.register_served_model(
            channel=deployment.channel or _unowned_channel_at(deployment.base_url),
            name=f"{deployment.name}@{deployment.host.name}"[:96],
            kind=impl.channel_kind,
            base_url=deployment.base_url,
            api_key=deployment.upstream_api_key,
            model_name=deployment.served_model_name,
            upstream_model=deployment.served_model_name,
            context_window=context_window,
            status_message=f"Started by deployment {deployment.name}; waiting for the first health probe.",
        )
        Deployment.objects.filter(pk=deployment.pk).update(channel=channel, context_window=context_window)
        deployment.channel, deployment.context_window = channel, context_window
    return channel


def _unowned_channel_at(base_url: str) -> Channel | None:
    """A channel already pointing at this server that no deployment owns (its deployment was
    deleted, or an admin added it by hand): the launch takes it over instead of adding a second."""
    canonical, _notes = channel_services.clean_base_url(base_url)
    return Channel.objects.filter(base_url=canonical, deployments__isnull=True).first()


def _launch(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    _move(job, JobState.STARTING, "Checking the host")
    _set_deployment(deployment, DeploymentStatus.STARTING, f"Job #{job.pk} is starting it.")
    running = commands.read_pidfile(remote, _dir(deployment))
    if running and commands.is_alive(remote, running):
        # Launching twice must not start a second server: take over the one that runs.
        _move(
            job,
            JobState.WAITING_HEALTH,
            f"Already running as PID {running}; not starting a second server.",
            pid=running,
        )
        _finish_healthy(job, deployment, remote, running)
        return
    if missing := check_model_files(deployment, remote):
        raise JobFailed(f"{missing} Nothing was started.")
    estimate = check_fit(deployment, remote)
    if (refusal := fit_refusal(estimate)) and not deployment.fit_override:
        raise JobFailed(refusal)
    if commands.port_in_use(remote, deployment.port):
        raise JobFailed(
            f"Port {deployment.port} is already in use on {deployment.host}: choose another port or stop what holds it."
        )
    try:
        multinode.start_cluster(deployment, remote)  # a Ray cluster when the deployment spans hosts
    except multinode.ClusterError as exc:
        raise JobFailed(exc.message) from None
    pid = _start(job, deployment, remote)
    _set_deployment(deployment, DeploymentStatus.STARTING, f"Started as PID {pid}; waiting for health.", pid=pid)
    _move(
        job,
        JobState.WAITING_HEALTH,
        f"Started as PID {pid}; waiting for {deployment.base_url.removesuffix('/v1')}/health",
        pid=pid,
        command=job.command,
    )
    try:
        _finish_healthy(job, deployment, remote, pid)
    except Exception:  # whatever went wrong, do not leave a server nobody knows about
        if commands.is_alive(remote, pid):
            commands.kill(remote, pid, grace=5)
        multinode.stop_cluster(deployment, remote)
        Deployment.objects.filter(pk=deployment.pk).update(pid=None)
        raise


def _finish_healthy(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int) -> None:
    ctx = _wait_healthy(job, deployment, remote, pid)
    channel = _register(deployment, ctx)
    record_allocation(deployment, remote)  # estimate vs what the server reported; never fails the job
    message = (
        f"Serving {deployment.served_model_name} on {deployment.base_url} (context {ctx or 'unknown'}); "
        f"channel {channel.name}."
    )
    _set_deployment(deployment, DeploymentStatus.RUNNING, message, pid=pid)
    _move(job, JobState.RUNNING, message, pid=pid)


def _stop(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    _move(job, JobState.STOPPING, "Stopping the server")
    _set_deployment(deployment, DeploymentStatus.STOPPING, f"Job #{job.pk} is stopping it.")
    pids = {p for p in (deployment.pid, commands.read_pidfile(remote, _dir(deployment))) if p}
    for pid in pids:
        if commands.is_alive(remote, pid) and not commands.kill(remote, pid):
            raise JobFailed(f"PID {pid} survived TERM and KILL on {deployment.host}; check the host.")
    commands.remove_pidfile(remote, _dir(deployment))
    if problems := multinode.stop_cluster(deployment, remote):
        raise JobFailed("Ray could not be stopped on every node: " + "; ".join(problems))
    if deployment.channel_id:
        channel_services.disable_served_channel(
            deployment.channel_id,
            status_message=f"Deployment {deployment.name} was stopped; launch it to re-enable.",
        )
    _set_deployment(deployment, DeploymentStatus.STOPPED, "Stopped.", pid=None)
    if job.action == JobAction.STOP:
        _move(job, JobState.STOPPED, "Stopped; the channel is disabled.", log_tail=_log_tail(remote, deployment))


_API_KEY_ARG = re.compile(r"--api-key(?:=|\s+)(\S+)")


def _adopt(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    """Take over a server already running on the deployment's port (started by us or by hand)."""
    _move(job, JobState.STARTING, "Looking for a running server")
    pid = commands.read_pidfile(remote, _dir(deployment))
    if not (pid and commands.is_alive(remote, pid)):
        impl = backends.get(deployment.backend)
        pid = None
        for candidate, args in commands.process_list(remote):
            ours = impl.binary in args or deployment.model_path in args
            if ours and re.search(rf"--port(?:=|\s+){deployment.port}(?!\d)", args):
                pid = candidate
                key = _API_KEY_ARG.search(args)
                if key and key.group(1) != deployment.upstream_api_key:
                    # Someone started it by hand with their own key: use that one.
                    deployment.upstream_api_key = key.group(1)
                    deployment.save(update_fields=["upstream_api_key"])
                break
    if not pid:
        raise JobFailed(
            f"No {deployment.get_backend_display()} server found on port {deployment.port} of {deployment.host}."
        )
    commands.write_pidfile(remote, _dir(deployment), pid)
    _move(job, JobState.WAITING_HEALTH, f"Found PID {pid}; checking its health", pid=pid)
    _finish_healthy(job, deployment, remote, pid)


def _orphaned(job: LaunchJob, here: str) -> bool:
    """Held by a process of this host that no longer exists (a worker that was killed)."""
    host, _, pid = job.worker.rpartition(":")
    if host != here or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie is gone for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][:1] == "Z"
    except (OSError, IndexError):
        return False


def _dead(job: LaunchJob, now: datetime.datetime, here: str) -> bool:
    """The job's worker is gone: it stopped beating, or it is a dead process of this host."""
    if not job.worker:
        return False  # queued or handed back: waiting for a worker, not held by one
    return job.heartbeat is None or job.heartbeat < _stale_cutoff(now) or _orphaned(job, here)


def _take_over(job: LaunchJob, user=None) -> bool:
    """Stop asked while a job whose worker died is still marked active: fail that job so the stop
    can run. Returns False when the job's worker is alive (the caller refuses as usual)."""
    now = timezone.now()
    if not _dead(job, now, socket.gethostname()):
        return False
    message = f"Taken over by Stop{f' ({user})' if user else ''}: the worker running this job had stopped."
    moved = LaunchJob.objects.filter(pk=job.pk, state=job.state, worker=job.worker).update(
        state=JobState.FAILED,
        message=message,
        finished=now,
        worker="",
        transitions=[*job.transitions, {"state": JobState.FAILED, "at": now.isoformat(), "message": message}],
    )
    return moved == 1


def recover_stale_jobs(now=None) -> int:
    """Hand every job whose worker died back to the queue (it resumes: `_launch` finds the server it
    had started through its pid file), or fail it after HOSTS_JOB_MAX_ATTEMPTS claims; fail a job
    that no worker picked up within HOSTS_QUEUED_JOB_SECONDS. Runs when a worker starts and every
    few seconds from beat, so a job whose worker was killed moves on within a minute. Returns how
    many jobs it moved."""
    now = now or timezone.now()
    here = socket.gethostname()
    unclaimed_cutoff = now - datetime.timedelta(seconds=settings.HOSTS_QUEUED_JOB_SECONDS)
    count = 0
    for job in LaunchJob.objects.active().select_related("deployment"):
        if _dead(job, now, here):
            if job.attempts < settings.HOSTS_JOB_MAX_ATTEMPTS:
                count += _redeliver(job, now)
                continue
            message = (
                f"The worker stopped during this job {job.attempts} times (it was "
                f"{job.get_state_display().lower()}). The server may still be running on the host: use Adopt "
                "to take it over, or Launch again."
            )
        elif not job.worker and (job.heartbeat or job.created) < unclaimed_cutoff:
            message = (
                f"No worker picked this job up within {settings.HOSTS_QUEUED_JOB_SECONDS:g} s: is a Celery worker "
                "running (`portal up` starts one)? Request it again once one is."
            )
        else:
            continue
        moved = LaunchJob.objects.filter(pk=job.pk, state=job.state, worker=job.worker).update(
            state=JobState.FAILED,
            message=message,
            finished=now,
            worker="",
            transitions=[*job.transitions, {"state": JobState.FAILED, "at": now.isoformat(), "message": message}],
        )
        if moved:
            count += 1
            _set_deployment(job.deployment, DeploymentStatus.FAILED, message)
    return count


def _redeliver(job: LaunchJob, now: datetime.datetime) -> int:
    message = f"The worker running this job stopped ({job.worker}); handed to another worker."
    moved = LaunchJob.objects.filter(pk=job.pk, state=job.state, worker=job.worker).update(
        worker="",
        heartbeat=now,
        message=message,
        transitions=[*job.transitions, {"state": job.state, "at": now.isoformat(), "message": message}],
    )
    if moved:
        logger.warning("launch job %s: %s", job.pk, message)
        signals.job_requested.send(sender=LaunchJob, job_id=job.pk)
    return int(moved)
