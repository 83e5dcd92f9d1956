"""Launch jobs: the state machine that launches, stops, restarts or adopts a deployment's server.

A launch job, step by step (each step is a `JobState` with its time in `job.transitions`):

    connecting      SSH to the host (pinned host key)
    starting        already running? → take it over; fit check; port free?; start detached
                    (`remote.commands.start_detached`)
    waiting_health  look at http://HOST:PORT/health until it answers 200, the process dies, or time runs
                    out: one look per task run, the next one re-scheduled HOSTS_HEALTH_POLL seconds later
                    (`run_job`/`poll_job` return that delay; `hosts.tasks` re-schedules), so no worker
                    sleeps while a server loads its weights. A cold start (`hosts.ondemand`), which has
                    requests waiting, runs its job with `watch`: the same task looks at once and then
                    every HOSTS_HEALTH_FIRST_POLL seconds backing off to at most 0.1 s, for up to
                    `watch` seconds, asking SSH whether the process lives only every HOSTS_HEALTH_POLL
    running         the server's context window is read, then channel + model + route are registered
                    through `channels.services` in one transaction and the deployment is RUNNING (what
                    a waiting cold start hears of); then the log, the allocation and the GPU inventory
                    are read, and a probe is queued

Any failure before the registration leaves the channel tables untouched and stops what was
started. Stop sends TERM to the server's process group, then KILL after a grace period.

`request_job` queues a job and `run_job`/`poll_job` are the bodies of the Celery tasks; enqueuing
goes through `hosts.signals`, whose receivers live in `hosts.tasks`. Every state change of a job is
`change_state` (its deployment's: `services.set_status`).
"""

from __future__ import annotations

import datetime
import functools
import logging
import os
import re
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import httpx
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from channels import services as channel_services
from channels.choices import ModelKind
from channels.models import Channel
from portal import audit, faults
from portal.choices import AuditAction
from portal.i18n import Message, as_message

from .. import backends, signals
from ..choices import DeploymentStatus, JobAction, JobState
from ..diagnose import explain_failure
from ..models import Deployment, Host, LaunchJob
from ..remote import commands, inventory, ssh
from . import multinode
from .services import check_fit, fit_refusal, launch_spec, record_allocation, set_status

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)

# A job between two looks at its server's health is held by no process: `worker` is this prefix and
# the process that scheduled the next look, so a look may be taken by any worker, and the sweep still
# sees a job whose scheduling process died (`_dead`).
POLL = "poll:"
# A stop job asked for while its deployment is taken out of routing (`hosts.ondemand.services.take_out`)
# is held by the process doing that until it runs the job itself or hands it to the queue: `worker`
# is this prefix and that process, so no worker takes it before the deployment is out of routing,
# and one whose holder died is found (`_dead`) and settled by `hosts.ondemand.services.settle_take_outs`.
TAKE_OUT = "take-out:"
FINISHED_STATES = (JobState.RUNNING, JobState.STOPPED, JobState.FAILED)


class JobConflict(Exception):
    """Another job for the same deployment is still active; `text` says which, in the reader's language."""

    def __init__(self, text: Message) -> None:
        self.text = text
        super().__init__(text.english)


class JobFailed(Exception):
    """A step failed; the message says why and what to do."""

    def __init__(self, text: Message | str, *, exit_code: int | None = None) -> None:
        self.text = as_message(text)
        super().__init__(self.text.english)
        self.exit_code = exit_code


def request_job(
    deployment: Deployment, action: str, *, user: User | None = None, queue: bool = True, hold: str = ""
) -> LaunchJob:
    """Queue a job; refuses (JobConflict) while another job of the deployment is active. With
    `queue=False` no task is sent: the caller runs it (`run_job`) in its own process. With `hold`
    (a prefix such as TAKE_OUT, implying `queue=False`) the job is held by this process until it
    runs it (`run_job`) or hands it on (`hand_over`), so a sweep can tell when that process died."""
    now = timezone.now()
    try:
        with transaction.atomic():
            job = LaunchJob.objects.create(
                deployment=deployment,
                action=action,
                requested_by=user if user is not None and user.pk else None,
                transitions=[{"state": JobState.QUEUED, "at": now.isoformat(), "message": ""}],
                **({"worker": hold + worker_id(), "heartbeat": now} if hold else {}),
            )
    except IntegrityError:
        active = deployment.jobs.active().first()
        if action == JobAction.STOP and active is not None and _take_over(active, user):
            return request_job(deployment, action, user=user)
        if active is None:
            busy = Message(
                gettext_noop("Another job is still running for %(deployment)s; wait for it to finish."),
                deployment=deployment.name,
            )
        else:
            busy = Message(
                gettext_noop("Job #%(id)s (%(action)s) is still running for %(deployment)s; wait for it to finish."),
                id=active.pk,
                action=Message.label(JobAction(active.action).label),
                deployment=deployment.name,
            )
        raise JobConflict(busy) from None
    if user is not None and user.pk:  # an admin's job overrides a pending automatic restart
        Deployment.objects.filter(pk=deployment.pk).update(restarting=False, next_restart_at=None)
        deployment.restarting, deployment.next_restart_at = False, None
    requested = Message(
        gettext_noop("%(action)s requested (job #%(id)s)"), action=Message.label(JobAction(action).label), id=job.pk
    )
    audit.record(AuditAction.ACTION, deployment, message=requested, actor=user)
    if queue and not hold:
        transaction.on_commit(lambda: send(job))
    return job


def hand_over(job: LaunchJob) -> bool:
    """Release a job this process holds (`request_job`'s `hold`) to any worker, before it is sent;
    False when it is no longer this process's (a sweep found it abandoned and took it)."""
    return _pass_hold(job, "")


def abandoned(prefix: str, deployment: Deployment | None = None) -> list[LaunchJob]:
    """The queued jobs (of `deployment`, or of all) held with `prefix` (`request_job`'s `hold`) by a
    process that is gone (`_dead`)."""
    now, here = timezone.now(), socket.gethostname()
    held = LaunchJob.objects.active().filter(state=JobState.QUEUED, worker__startswith=prefix)
    if deployment is not None:
        held = held.filter(deployment=deployment)
    return [job for job in held.select_related("deployment") if _dead(job, now, here)]


def take_hold(job: LaunchJob, prefix: str) -> bool:
    """Hold an `abandoned` job in this process instead of the dead one (one UPDATE: of two sweeps,
    one wins); the holder then runs it, hands it on or fails it, as the dead one would have."""
    return _pass_hold(job, prefix + worker_id())


def _pass_hold(job: LaunchJob, to: str) -> bool:
    """Move a queued job's hold from the holder it was read with to `to` ("" for any worker), in one
    UPDATE; whether it moved (False: someone else moved it first)."""
    moved = LaunchJob.objects.filter(pk=job.pk, state=JobState.QUEUED, worker=job.worker).update(
        worker=to, heartbeat=timezone.now()
    )
    if moved:
        job.worker = to
    return moved == 1


def send_again(job: LaunchJob) -> bool:
    """Send a queued job to the broker once more, saying so on it (`faults.SENT_AGAIN`); False when it
    moved meanwhile (claimed, failed). A second message is harmless: one worker claims it (`_claim`)."""
    if not change_state(job, JobState.QUEUED, Message(faults.SENT_AGAIN), guard=True):
        return False
    send(job)
    return True


def send(job: LaunchJob) -> None:
    """Hand the job to a worker (the broker). One the broker does not take stays queued with
    `faults.NOT_SENT` on it, which `recover_stale_jobs` sends again when Redis answers, instead of waiting
    HOSTS_QUEUED_JOB_SECONDS for a worker that was never told."""
    try:
        signals.job_requested.send(sender=LaunchJob, job_id=job.pk)
    except Exception:
        logger.exception("could not queue launch job %s", job.pk)
        if job.state == JobState.QUEUED and not job.worker:
            change_state(job, JobState.QUEUED, Message(faults.NOT_SENT), guard=True)


def change_state(
    job: LaunchJob,
    state: str,
    message: Message | str = "",
    *,
    deployment_status: str | None = None,
    guard: bool = False,
    **fields: Any,
) -> bool:
    """The one way a job changes state: appends the transition, sets message, heartbeat and (when it
    ends) `finished`, and with `deployment_status` moves its deployment too (`services.set_status`).

    With `guard` the row moves only if it is still in the state and held by the worker it was read
    with (the sweep and a take-over race the worker holding it); returns whether it moved. Never
    writes `worker`/`attempts` unless given: the sweep may have handed the job on meanwhile."""
    now = timezone.now()
    text = as_message(message)
    values: dict[str, Any] = {
        "transitions": [*job.transitions, {"state": state, "at": now.isoformat(), **text.columns("message", 500)}],
        "state": state,
        **text.columns("message", 1000),
        "heartbeat": now,
        **fields,
    }
    if state in FINISHED_STATES:
        values["finished"] = now
    rows = LaunchJob.objects.filter(pk=job.pk)
    if guard:
        rows = rows.filter(state=job.state, worker=job.worker)
    if not rows.update(updated=now, **values):
        return False
    for key, value in values.items():
        setattr(job, key, value)
    if deployment_status is not None:
        set_status(job.deployment, deployment_status, message)
    return True


def _move(job: LaunchJob, state: str, message: Message | str = "", **fields: Any) -> None:
    change_state(job, state, message, **fields)


def _beat(job: LaunchJob, **fields: Any) -> None:
    fields["heartbeat"] = timezone.now()
    LaunchJob.objects.filter(pk=job.pk).update(**fields)
    for key, value in fields.items():
        setattr(job, key, value)


def _stale(cutoff: datetime.datetime) -> Q:
    return Q(heartbeat__isnull=True) | Q(heartbeat__lt=cutoff)


def worker_id() -> str:
    """Who holds a job: this host and process (a pool process under prefork)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def stale_cutoff(now: datetime.datetime | None = None) -> datetime.datetime:
    """A holder whose heartbeat is older than this is presumed gone (HOSTS_STALE_JOB_SECONDS)."""
    return (now or timezone.now()) - datetime.timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS)


def _claim(job: LaunchJob) -> bool:
    """Take the job unless a live worker already holds it: free (`worker` empty: queued or handed
    back by the sweep), held by this process for a take-out (TAKE_OUT) or silent for
    HOSTS_STALE_JOB_SECONDS. One UPDATE, so two workers that got the same message cannot both win."""
    me = worker_id()
    moved = (
        LaunchJob.objects.active()
        .filter(pk=job.pk)
        .filter(Q(worker="") | Q(worker=TAKE_OUT + me) | _stale(stale_cutoff()))
        .update(heartbeat=timezone.now(), worker=me, attempts=F("attempts") + 1)
    )
    if moved:
        job.worker, job.attempts = me, job.attempts + 1
    return moved == 1


def _claim_poll(job: LaunchJob) -> bool:
    """Take a job that waits for its next look at the server's health (no attempt is counted)."""
    me = worker_id()
    moved = LaunchJob.objects.filter(pk=job.pk, state=JobState.WAITING_HEALTH, worker__startswith=POLL).update(
        heartbeat=timezone.now(), worker=me
    )
    if moved:
        job.worker = me
    return moved == 1


def _release_for_poll(job: LaunchJob) -> None:
    LaunchJob.objects.filter(pk=job.pk, worker=job.worker).update(worker=POLL + job.worker, heartbeat=timezone.now())


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


def run_job(job_id: int, *, watch: float = 0.0, checked: list[Any] | None = None) -> float | None:
    """The body of the Celery task: safe to run twice; a job already finished or held by a live
    worker is left alone, a job handed back after its worker died resumes (see `_launch`). Returns
    the seconds until the next look at the starting server (`poll_job`), or None when it is done.
    With `watch`, a starting server is looked at here for up to that many seconds first; with
    `checked`, the answers to `launch_probes` just taken on the same host are used, not asked again."""
    try:
        job = LaunchJob.objects.select_related("deployment__host").get(pk=job_id)
    except LaunchJob.DoesNotExist:
        return None
    if not job.is_active:
        return None
    if not _claim(job):
        logger.info("launch job %s is held by another worker", job_id)
        return None
    with _Heartbeat(job):
        delay = _run_claimed(job, watch=watch, checked=checked)
    if delay is not None:
        _release_for_poll(job)
    return delay


def poll_job(job_id: int) -> float | None:
    """One look at a starting server's health (the re-scheduled task); the same return as `run_job`."""
    job = LaunchJob.objects.select_related("deployment__host").filter(pk=job_id).first()
    if job is None or job.state != JobState.WAITING_HEALTH or not _claim_poll(job):
        return None
    with _Heartbeat(job):
        delay = _run_claimed(job, poll=True)
    if delay is not None:
        _release_for_poll(job)
    return delay


def run_inline(job_id: int) -> None:
    """Run a job to its end in this process, sleeping between looks (tests, eager Celery)."""
    delay = run_job(job_id)
    while delay is not None:
        time.sleep(delay)
        delay = poll_job(job_id)


def _run_claimed(
    job: LaunchJob, *, poll: bool = False, watch: float = 0.0, checked: list[Any] | None = None
) -> float | None:
    deployment = job.deployment
    delay: float | None = None
    try:
        if not poll:
            _move(job, JobState.CONNECTING, Message(gettext_noop("Connecting to %(host)s"), host=deployment.host))
        with ssh.connect(deployment.host, reuse=True) as remote:
            if poll:
                delay = _await_health(job, deployment, remote)
            else:
                if job.action in (JobAction.STOP, JobAction.RESTART):
                    _stop(job, deployment, remote)
                if job.action in (JobAction.LAUNCH, JobAction.RESTART):
                    delay = _launch(job, deployment, remote, watch, checked if job.action == JobAction.LAUNCH else None)
                elif job.action == JobAction.ADOPT:
                    delay = _adopt(job, deployment, remote)
            if delay is None:
                _refresh_gpus(deployment.host, remote)
    except ssh.SSHError as exc:
        ssh.mark_contact(deployment.host, status=exc.status, message=exc.text)
        if job.state == JobState.CONNECTING and deployment.status == DeploymentStatus.RUNNING:
            _not_reached(job, deployment, exc.text)
        else:
            _fail(job, _lost(job, deployment, exc.text))
        return None
    except JobFailed as exc:
        _fail(job, exc.text, exit_code=exc.exit_code)
        return None
    except Exception as exc:
        logger.exception("launch job %s crashed", job.pk)
        _fail(
            job,
            Message(gettext_noop("Internal error (%(error)s); see the worker log."), error=exc.__class__.__name__),
        )
        return None
    if delay is None and job.state == JobState.RUNNING and deployment.channel_id:
        signals.channel_registered.send(sender=LaunchJob, channel_id=deployment.channel_id)
    return delay


def _not_reached(job: LaunchJob, deployment: Deployment, why: Message) -> None:
    """The job failed before it touched the server (SSH did not connect): a running deployment is
    still running, so it stays supervised, counted and undeletable (as `recover_stale_jobs` leaves
    one that no worker picked up); its message says the job did not happen."""
    change_state(job, JobState.FAILED, why)
    message = Message(
        gettext_noop(
            "%(action)s not done: SSH to %(host)s failed (%(why)s). The server is still running there: "
            "try again once SSH to the host works."
        ),
        action=Message.label(JobAction(job.action).label),
        host=deployment.host.name,
        why=why,
    )
    set_status(deployment, DeploymentStatus.RUNNING, message)
    logger.info("launch job %s failed before reaching host %s: %s", job.pk, deployment.host_id, why.english)


def _lost(job: LaunchJob, deployment: Deployment, why: Message) -> Message:
    """An SSH error's words, and when it came while a server this job started loads: that the
    server may outlive it (it could not be stopped), and that a launch takes it over (pid file)."""
    if job.state != JobState.WAITING_HEALTH or job.pid is None:
        return why
    return Message(
        gettext_noop(
            "Lost contact with %(host)s over SSH while its server was starting; it may still be running there "
            "(launching again takes it over once the host answers): %(why)s"
        ),
        host=deployment.host.name,
        why=why,
    )


def _refresh_gpus(host: Host, remote: ssh.Remote) -> None:
    """The GPUs' memory just changed: update the inventory over the open connection."""
    try:
        inventory.store(host, inventory.collect(remote))
    except (inventory.InventoryError, ssh.SSHError) as exc:
        logger.info("inventory after a job on host %s failed: %s", host.pk, exc)


def _fail(job: LaunchJob, message: Message, *, exit_code: int | None = None) -> None:
    change_state(job, JobState.FAILED, message, deployment_status=DeploymentStatus.FAILED, exit_code=exit_code)
    logger.info("launch job %s failed: %s", job.pk, message.english)


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
        raise JobFailed(Message(gettext_noop("Could not start the server: %(said)s"), said=said[:300]))
    return pid


def _waiting_since(job: LaunchJob) -> datetime.datetime:
    for step in reversed(job.transitions):
        if step["state"] == JobState.WAITING_HEALTH:
            return datetime.datetime.fromisoformat(step["at"])
    return timezone.now()


def _wait_for_health(
    job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int, message: Message, watch: float = 0.0
) -> float | None:
    _move(job, JobState.WAITING_HEALTH, message, pid=pid)
    return _await_health(job, deployment, remote, watch)


def _await_health(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, watch: float = 0.0) -> float | None:
    """Look at the starting server: None once it is registered and running, else the seconds
    until the next (re-scheduled) look. One look, or with `watch` looks from HOSTS_HEALTH_FIRST_POLL
    apart backing off to WATCH_LOOK_EVERY (HOSTS_HEALTH_POLL if shorter), for up to `watch`
    seconds; SSH is asked whether the process lives at the first look and then at most every
    HOSTS_HEALTH_POLL, and /health again right after it. Whatever goes wrong, a server the job
    started is not left behind."""
    pid = job.pid
    assert pid is not None
    poll = float(settings.HOSTS_HEALTH_POLL)
    until = time.monotonic() + watch
    most = min(poll, WATCH_LOOK_EVERY)
    interval = min(float(settings.HOSTS_HEALTH_FIRST_POLL), most)
    checked = float("-inf")
    try:
        while True:
            ctx = _probe(deployment)
            if ctx is not _NOT_YET:
                break
            pause = interval
            if time.monotonic() - checked >= poll:
                _check_process(job, deployment, remote, pid)
                checked = time.monotonic()
                pause = 0.0  # look again at once: the server may have come up during the SSH round trip
            if time.monotonic() + pause > until:
                return poll
            time.sleep(pause)
            interval = min(interval * 1.5, most)
    except Exception:
        if job.action != JobAction.ADOPT:  # do not leave a server nobody knows about
            if commands.group_alive(remote, pid):
                commands.kill(remote, pid, grace=5)
            multinode.stop_cluster(deployment, remote)
            Deployment.objects.filter(pk=deployment.pk).update(pid=None)
        raise
    _finish_healthy(job, deployment, remote, pid, ctx)
    return None


_NOT_YET = object()
# While a cold start's requests wait (`watch`), /health is looked at at least this often, however
# long HOSTS_HEALTH_POLL is: a look is one HTTP GET, and each tenth of a second a healthy server
# goes unseen is a tenth every waiting request pays. SSH stays at HOSTS_HEALTH_POLL.
WATCH_LOOK_EVERY = 0.1


@functools.cache
def _health_client() -> httpx.Client:
    """One client per process for the looks at starting servers (thread-safe; making one costs a
    TLS context, a quarter of a second on a loaded box, on a cold start's critical path)."""
    return httpx.Client(timeout=5.0, follow_redirects=False)


def _probe(deployment: Deployment) -> Any:
    """/health once, over HTTP from here (the gateway reaches the server the same way): the context
    window the server reports when it answers 200, else `_NOT_YET`."""
    client = _health_client()
    impl = backends.get(deployment.backend)
    root = deployment.base_url.removesuffix("/v1")
    try:
        if client.get(root + impl.health_path).status_code != 200:
            return _NOT_YET
    except httpx.HTTPError:
        return _NOT_YET
    try:
        return impl.context_window(client, root, deployment.upstream_api_key, deployment.served_model_name)
    except (httpx.HTTPError, ValueError) as exc:
        raise JobFailed(
            Message(gettext_noop("The server is up but did not say its context window (%(error)s)."), error=exc)
        ) from None


def _check_process(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int) -> None:
    """The server's process and log over SSH, in one session: raises JobFailed when it died or
    HOSTS_HEALTH_TIMEOUT passed."""
    alive, log = commands.alive_and_log_tail(remote, pid, _dir(deployment), deployment.upstream_api_key)
    _beat(job, log_tail=log)
    if not alive:
        exit_code = commands.read_exit_code(remote, _dir(deployment))
        raise JobFailed(explain_failure(log, exit_code, deployment), exit_code=exit_code)
    timeout = settings.HOSTS_HEALTH_TIMEOUT
    if (timezone.now() - _waiting_since(job)).total_seconds() > timeout:
        commands.kill(remote, pid)
        raise JobFailed(
            Message(
                gettext_noop(
                    "No healthy answer from %(url)s/health within %(seconds)s s; the server was stopped. Is the port "
                    "reachable from the portal (firewall)?"
                ),
                url=deployment.base_url.removesuffix("/v1"),
                seconds=f"{timeout:g}",
            )
            + explain_failure(log, None, deployment)
        )


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
            model_kind=ModelKind.EMBEDDING if impl.serves_embeddings(deployment.extra_args) else ModelKind.CHAT,
            status_message=Message(
                gettext_noop("Started by deployment %(name)s; waiting for the first health probe."),
                name=deployment.name,
            ),
        )
        Deployment.objects.filter(pk=deployment.pk).update(channel=channel, context_window=context_window)
        deployment.channel, deployment.context_window = channel, context_window
    assert deployment.channel is not None  # registered above, or earlier
    return deployment.channel


def _unowned_channel_at(base_url: str) -> Channel | None:
    """A channel already pointing at this server that no deployment owns (its deployment was
    deleted, or an admin added it by hand): the launch takes it over instead of adding a second."""
    canonical, _notes = channel_services.clean_base_url(base_url)
    return Channel.objects.filter(base_url=canonical, deployments__isnull=True).first()


def launch_probes(deployment: Deployment, model_path: str = "") -> list[commands.Probe[Any]]:
    """Everything a launch checks on the host before the start, asked in one SSH session: its pid
    file, the model (a problem, "" when fine), the model's architecture, the RAM available and
    whether the port is in use (the model looked for at `model_path`, by default its own). A cold
    start's placement asks them with its survey
    (`hosts.ondemand.services.survey`) and hands the answers to the launch (`checked`)."""
    model_path = model_path or deployment.model_path
    return [
        commands.pidfile_probe(_dir(deployment)),
        commands.model_probe(deployment.backend, model_path),
        commands.architecture_probe(deployment.backend, model_path),
        commands.memory_probe(),
        commands.port_probe(deployment.port),
    ]


def _launch(
    job: LaunchJob, deployment: Deployment, remote: ssh.Remote, watch: float = 0.0, checked: list[Any] | None = None
) -> float | None:
    with transaction.atomic():  # the rows of one step in one commit (a cold start waits on each)
        _move(job, JobState.STARTING, Message(gettext_noop("Checking the host")))
        set_status(
            deployment, DeploymentStatus.STARTING, Message(gettext_noop("Job #%(job)s is starting it."), job=job.pk)
        )
    running, missing, arch, ram, port_taken = checked or commands.ask(remote, *launch_probes(deployment))
    if running and commands.is_alive(remote, running):
        # Launching twice must not start a second server: take over the one that runs.
        return _wait_for_health(
            job,
            deployment,
            remote,
            running,
            Message(gettext_noop("Already running as PID %(pid)s; not starting a second server."), pid=running),
            watch,
        )
    if missing:
        raise JobFailed(Message(gettext_noop("%(missing)s Nothing was started."), missing=missing))
    estimate = check_fit(deployment, arch=arch, ram_mib=ram if deployment.backend == "llamacpp" else None)
    if (refusal := fit_refusal(estimate)) and not deployment.fit_override:
        raise JobFailed(refusal)
    if port_taken:
        raise JobFailed(
            Message(
                gettext_noop("Port %(port)s is already in use on %(host)s: choose another port or stop what holds it."),
                port=deployment.port,
                host=deployment.host,
            )
        )
    try:
        multinode.start_cluster(deployment, remote)  # a Ray cluster when the deployment spans hosts
    except multinode.ClusterError as exc:
        if exc.log:
            _beat(job, log_tail=commands.mask_secret(exc.log, deployment.upstream_api_key))
        raise JobFailed(exc.text) from None
    pid = _start(job, deployment, remote)
    with transaction.atomic():
        set_status(
            deployment,
            DeploymentStatus.STARTING,
            Message(gettext_noop("Started as PID %(pid)s; waiting for health."), pid=pid),
            pid=pid,
        )
        LaunchJob.objects.filter(pk=job.pk).update(command=job.command)
        _move(
            job,
            JobState.WAITING_HEALTH,
            Message(
                gettext_noop("Started as PID %(pid)s; waiting for %(url)s/health"),
                pid=pid,
                url=deployment.base_url.removesuffix("/v1"),
            ),
            pid=pid,
        )
    return _await_health(job, deployment, remote, watch)


def _finish_healthy(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int, ctx: int | None) -> None:
    """Register and say RUNNING first (a cold start's waiting requests go on from there), then read
    what is only shown: the log's end and the allocation the server reported."""
    with transaction.atomic():  # one commit; the waiting cold start hears of it after it
        channel = _register(deployment, ctx)
        message = Message(
            gettext_noop("Serving %(model)s on %(url)s (context %(context)s); channel %(channel)s."),
            model=deployment.served_model_name,
            url=deployment.base_url,
            context=ctx or Message(gettext_noop("unknown")),
            channel=channel.name,
        )
        set_status(deployment, DeploymentStatus.RUNNING, message, pid=pid)
        _move(job, JobState.RUNNING, message, pid=pid)
    _beat(job, log_tail=_log_tail(remote, deployment))
    record_allocation(deployment, remote)  # estimate vs what the server reported; never fails the job


def _stop(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    _move(job, JobState.STOPPING, Message(gettext_noop("Stopping the server")))
    set_status(deployment, DeploymentStatus.STOPPING, Message(gettext_noop("Job #%(job)s is stopping it."), job=job.pk))
    pids = {p for p in (deployment.pid, commands.read_pidfile(remote, _dir(deployment))) if p}
    for pid in pids:
        if commands.group_alive(remote, pid) and not commands.kill(remote, pid):
            raise JobFailed(
                Message(
                    gettext_noop("PID %(pid)s survived TERM and KILL on %(host)s; check the host."),
                    pid=pid,
                    host=deployment.host,
                )
            )
    commands.remove_pidfile(remote, _dir(deployment))
    if problems := multinode.stop_cluster(deployment, remote):
        raise JobFailed(
            Message(gettext_noop("Ray could not be stopped on every node: %(problems)s"), problems="; ".join(problems))
        )
    if deployment.channel_id:
        channel_services.disable_served_channel(
            deployment.channel_id,
            status_message=Message(
                gettext_noop("Deployment %(name)s was stopped; launch it to re-enable."), name=deployment.name
            ),
        )
    # The log is read first: the deployment and its STOP job end in one commit, so no reader sees a
    # stopped deployment whose job still says "stopping" for an SSH round trip.
    tail = _log_tail(remote, deployment) if job.action == JobAction.STOP else None
    with transaction.atomic():
        set_status(deployment, DeploymentStatus.STOPPED, Message(gettext_noop("Stopped.")), pid=None)
        if job.action == JobAction.STOP:
            _move(job, JobState.STOPPED, Message(gettext_noop("Stopped; the channel is disabled.")), log_tail=tail)


_API_KEY_ARG = re.compile(r"--api-key(?:=|\s+)(\S+)")


def _adopt(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> float | None:
    """Take over a server already running on the deployment's port (started by us or by hand)."""
    _move(job, JobState.STARTING, Message(gettext_noop("Looking for a running server")))
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
            Message(
                gettext_noop("No %(backend)s server found on port %(port)s of %(host)s."),
                backend=deployment.get_backend_display(),
                port=deployment.port,
                host=deployment.host,
            )
        )
    commands.write_pidfile(remote, _dir(deployment), pid)
    return _wait_for_health(
        job, deployment, remote, pid, Message(gettext_noop("Found PID %(pid)s; checking its health"), pid=pid)
    )


def _orphaned(job: LaunchJob, here: str) -> bool:
    """Held by a process of this host that no longer exists (a worker that was killed)."""
    host, _, pid = job.worker.removeprefix(POLL).removeprefix(TAKE_OUT).rpartition(":")
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
    except FileNotFoundError:  # the zombie kill found was reaped since: gone too
        return True
    except (OSError, IndexError):
        return False


def _dead(job: LaunchJob, now: datetime.datetime, here: str) -> bool:
    """The job's worker is gone: it stopped beating, or it is a dead process of this host."""
    if not job.worker:
        return False  # queued or handed back: waiting for a worker, not held by one
    return job.heartbeat is None or job.heartbeat < stale_cutoff(now) or _orphaned(job, here)


def _take_over(job: LaunchJob, user: User | None = None) -> bool:
    """Stop asked while a job whose worker died is still marked active: fail that job so the stop
    can run. Returns False when the job's worker is alive (the caller refuses as usual)."""
    now = timezone.now()
    if not _dead(job, now, socket.gethostname()):
        return False
    if user:
        message = Message(
            gettext_noop("Taken over by Stop (%(user)s): the worker running this job had stopped."), user=user
        )
    else:
        message = Message(gettext_noop("Taken over by Stop: the worker running this job had stopped."))
    return change_state(job, JobState.FAILED, message, guard=True, worker="")


def recover_stale_jobs(now: datetime.datetime | None = None) -> int:
    """Hand every job whose worker died back to the queue (it resumes: `_launch` finds the server it
    had started through its pid file), or fail it after HOSTS_JOB_MAX_ATTEMPTS claims; fail a job
    that no worker picked up within HOSTS_QUEUED_JOB_SECONDS. Runs when a worker starts and every
    few seconds from beat, so a job whose worker was killed moves on within a minute. Returns how
    many jobs it moved."""
    now = now or timezone.now()
    here = socket.gethostname()
    unclaimed_cutoff = now - datetime.timedelta(seconds=settings.HOSTS_QUEUED_JOB_SECONDS)
    count = 0
    for job in LaunchJob.objects.active().select_related("deployment").exclude(worker__startswith=TAKE_OUT):
        # (a take-out's job is `hosts.ondemand.services.settle_take_outs`': only it knows the steps left)
        settle: str | None = DeploymentStatus.FAILED
        if _dead(job, now, here):
            if job.attempts < settings.HOSTS_JOB_MAX_ATTEMPTS:
                count += _redeliver(job)
                continue
            message = Message(
                gettext_noop(
                    "The worker stopped during this job %(attempts)s times (it was %(state)s). The server may still "
                    "be running on the host: use Adopt to take it over, or Launch again."
                ),
                attempts=job.attempts,
                state=job.get_state_display().lower(),
            )
        elif (
            not job.worker
            and job.state == JobState.QUEUED
            and job.message_code == faults.NOT_SENT
            and (job.heartbeat or job.created) >= unclaimed_cutoff
        ):
            count += send_again(job)
            continue
        elif not job.worker and (job.heartbeat or job.created) < unclaimed_cutoff:
            message = Message(
                gettext_noop(
                    "No worker picked this job up within %(seconds)s s: is a Celery worker running (`portal up` "
                    "starts one)? Request it again once one is."
                ),
                seconds=f"{settings.HOSTS_QUEUED_JOB_SECONDS:g}",
            )
            if not job.attempts and job.deployment.status not in (DeploymentStatus.STARTING, DeploymentStatus.STOPPING):
                settle = None  # no worker touched its server: a running deployment is still running
        else:
            continue
        if change_state(job, JobState.FAILED, message, deployment_status=settle, guard=True, worker=""):
            count += 1
    return count


def _redeliver(job: LaunchJob) -> int:
    message = Message(
        gettext_noop("The worker running this job stopped (%(worker)s); handed to another worker."), worker=job.worker
    )
    moved = change_state(job, job.state, message, guard=True, worker="")
    if moved:
        logger.warning("launch job %s: %s", job.pk, message.english)
        send(job)
    return int(moved)
