"""Host and deployment workflows: called by views, the API and Celery tasks alike.

A launch job, step by step (each step is a `JobState` with its time in `job.transitions`):

    connecting      SSH to the host (pinned host key)
    starting        already running? → take it over; fit check; port free?; start detached:
                    cd ~/.gateway-portal/deployments/NAME && { setsid nohup sh -c '"$@"; echo $? >exit_code'
                    launch CMD… >server.log 2>&1 </dev/null & echo $!; }
    waiting_health  poll http://HOST:PORT/health until it answers 200, the process dies, or time runs out
    running         the server's context window is read, then channel + model + route are written in
                    one transaction and a probe is queued

Any failure before the registration leaves the channel tables untouched and stops what was
started. Stop sends TERM to the server's process group, then KILL after a grace period.
"""

from __future__ import annotations

import base64
import datetime
import logging
import re
import secrets
import shlex
import time
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from channels.baseurl import normalize_base_url
from channels.choices import ChannelStatus
from channels.models import Channel, Model, ModelRoute
from portal import audit
from portal.choices import AuditAction

from . import backends, fit, inventory, ssh
from .choices import ACTIVE_JOB_STATES, DeploymentStatus, HostStatus, JobAction, JobState
from .models import GPU, Deployment, Host, LaunchJob

logger = logging.getLogger(__name__)


LOG_TAIL_BYTES = 8192


class JobConflict(Exception):
    """Another job for the same deployment is still active."""


class JobFailed(Exception):
    """A step failed; the message says why and what to do."""

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# --- hosts ------------------------------------------------------------------------------------------
def confirm_host_key(host: Host, fingerprint: str) -> None:
    """Pin the key seen on the last contact. `fingerprint` must match it, so a page left open
    while the key changed cannot confirm a different key than the one the admin read."""
    if not host.seen_host_key_fingerprint:
        raise ValidationError("No host key has been seen yet: refresh the host first.")
    if fingerprint != host.seen_host_key_fingerprint:
        raise ValidationError("The host offered a different key since this page was loaded; check it again.")
    host.host_key_fingerprint = fingerprint
    if host.status in (HostStatus.HOST_KEY_CHANGED, HostStatus.HOST_KEY_UNCONFIRMED):
        host.status, host.status_message = HostStatus.UNKNOWN, "Host key confirmed; refresh to read the GPUs."
    host.save()  # audited as a change of host_key_fingerprint


def refresh_inventory(host: Host) -> str:
    return inventory.refresh(host)


# --- deployments ------------------------------------------------------------------------------------
def generate_upstream_key() -> str:
    return "gpk-" + secrets.token_urlsafe(32)


def clean_deployment(
    *,
    host: Host,
    backend: str,
    model_path: str,
    served_model_name: str,
    gpu_indices: Any,
    port: Any,
    options: dict | None,
    extra_args: Any,
    instance: Deployment | None = None,
) -> dict[str, Any]:
    """Validate a deployment spec; returns cleaned values or raises a ValidationError by field."""
    errors: dict[str, list[str]] = {}
    try:
        impl = backends.get(backend)
    except KeyError as exc:
        raise ValidationError({"backend": [str(exc)]}) from None
    if not isinstance(gpu_indices, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in gpu_indices
    ):
        errors["gpu_indices"] = ["A list of GPU indices, e.g. [0, 1]."]
        gpu_indices = []
    elif len(set(gpu_indices)) != len(gpu_indices):
        errors["gpu_indices"] = ["Each GPU once."]
    else:
        known = set(GPU.objects.filter(host=host).values_list("index", flat=True))
        missing = sorted(set(gpu_indices) - known)
        if missing:
            errors["gpu_indices"] = [
                f"GPU {', '.join(map(str, missing))} not on {host} (known: {sorted(known) or 'none yet; refresh'})."
            ]
    try:
        port = int(port)
        if not 1024 <= port <= 65535:
            raise ValueError
    except (TypeError, ValueError):
        errors["port"] = ["A port between 1024 and 65535."]
    else:
        clash = Deployment.objects.filter(host=host, port=port)
        if instance is not None and instance.pk:
            clash = clash.exclude(pk=instance.pk)
        if clash.exists():
            errors["port"] = [f"Port {port} is already used by deployment {clash.first()} on this host."]
    try:
        options, extra = impl.clean(
            model_path=model_path,
            served_model_name=served_model_name,
            options=options,
            extra_args=extra_args,
            gpu_count=len(gpu_indices),
        )
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(key, []).extend(messages)
        options, extra = {}, []
    if errors:
        raise ValidationError(errors)
    return {
        "backend": backend,
        "model_path": model_path,
        "served_model_name": served_model_name,
        "gpu_indices": gpu_indices,
        "port": port,
        "options": options,
        "extra_args": extra,
    }


def save_deployment(
    *, host: Host, name: str, fit_override: bool = False, user=None, instance=None, **spec
) -> Deployment:
    """Create or update a deployment from a spec validated by `clean_deployment`."""
    cleaned = clean_deployment(host=host, instance=instance, **spec)
    deployment = instance or Deployment(host=host, created_by=user, upstream_api_key=generate_upstream_key())
    deployment.name = name
    deployment.host = host
    deployment.fit_override = fit_override
    for key, value in cleaned.items():
        setattr(deployment, key, value)
    deployment.full_clean(exclude=["upstream_api_key"])
    deployment.save()
    return deployment


LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def launch_spec(deployment: Deployment) -> backends.LaunchSpec:
    """The backend's input. A host registered by a loopback address only needs a loopback server."""
    return backends.LaunchSpec(
        bind_host="127.0.0.1" if deployment.host.address in LOOPBACK else "0.0.0.0",
        model_path=deployment.model_path,
        served_model_name=deployment.served_model_name,
        gpu_indices=list(deployment.gpu_indices),
        port=deployment.port,
        options=dict(deployment.options),
        extra_args=list(deployment.extra_args),
        api_key=deployment.upstream_api_key,
    )


def command_preview(deployment: Deployment) -> str:
    """The exact command the job will run, with the API key masked."""
    impl = backends.get(deployment.backend)
    spec = launch_spec(deployment)
    return backends.preview(impl.argv(spec), spec.env, spec.api_key)


# --- fit check ---------------------------------------------------------------------------------------
def read_architecture(remote: ssh.Remote, backend: str, model_path: str) -> fit.Architecture | None:
    """The model's architecture from the host's files (GGUF header or config.json), if readable."""
    if backend == "llamacpp":
        q = shlex.quote(model_path)
        result = remote.run(f"stat -c %s {q} && head -c 2097152 {q} | base64 -w0", timeout=60)
        if not result.ok:
            return None
        size_line, _, encoded = result.stdout.partition("\n")
        try:
            meta = fit.parse_gguf_metadata(base64.b64decode(encoded.strip()))
            return fit.from_gguf_metadata(meta, file_size=int(size_line.strip()))
        except (ValueError, TypeError):
            return None
    if model_path.startswith("/"):
        folder = shlex.quote(model_path)
    else:  # a Hugging Face id: look in the default cache
        org, name = model_path.split("/", 1)
        folder = '"$HOME"/.cache/huggingface/hub/' + shlex.quote(f"models--{org}--{name}") + "/snapshots/*"
    script = (
        f'for d in {folder}; do [ -f "$d/config.json" ] || continue; cat "$d/config.json"; echo; '
        'echo "---portal-sizes---"; stat -L -c %s "$d"/*.safetensors 2>/dev/null; break; done'
    )
    result = remote.run(script, timeout=30)
    config, sep, sizes = result.stdout.partition("---portal-sizes---")
    if not sep:
        return None
    total = sum(int(s) for s in sizes.split() if s.isdigit())
    try:
        return fit.from_config_json(config, weights_bytes=total or None)
    except ValueError:
        return None


def fit_request(deployment: Deployment, arch: fit.Architecture) -> fit.FitRequest:
    impl = backends.get(deployment.backend)
    params = impl.fit_params(deployment.options)
    gpus = [
        fit.GPUMemory(index=g.index, total_mib=g.memory_total_mib or 0, free_mib=g.memory_free_mib or 0)
        for g in GPU.objects.filter(host=deployment.host, index__in=deployment.gpu_indices)
    ]
    if deployment.backend == "llamacpp" and not arch.quant:
        arch.quant = fit.quant_from_name(deployment.model_path)
    return fit.FitRequest(arch=arch, backend=deployment.backend, gpus=gpus, **params)


def check_fit(deployment: Deployment, remote: ssh.Remote | None = None) -> dict[str, Any]:
    """Estimate and store it on the deployment. Without `remote` only presets are used."""
    arch = read_architecture(remote, deployment.backend, deployment.model_path) if remote else None
    arch = arch or fit.preset_for(deployment.model_path)
    if arch is None:
        result = {
            "verdict": "unknown",
            "notes": ["Unknown model: no config.json/GGUF readable on the host and no preset matches its name."],
        }
    else:
        result = fit.estimate(fit_request(deployment, arch)).as_dict()
    result["checked"] = timezone.now().isoformat()
    Deployment.objects.filter(pk=deployment.pk).update(last_fit=result)
    deployment.last_fit = result
    return result


# --- jobs ---------------------------------------------------------------------------------------------
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
        active = deployment.jobs.filter(state__in=ACTIVE_JOB_STATES).first()
        what = f"Job #{active.pk} ({active.get_action_display()})" if active else "Another job"
        raise JobConflict(f"{what} is still running for {deployment}; wait for it to finish.") from None
    audit.record(
        AuditAction.ACTION, deployment, message=f"{JobAction(action).label} requested (job #{job.pk})", actor=user
    )

    def enqueue() -> None:
        from .tasks import run_job

        try:
            run_job.delay(job.pk)
        except Exception:  # the broker is down: the stale-job sweep will fail it with a message
            logger.exception("could not queue launch job %s", job.pk)

    transaction.on_commit(enqueue)
    return job


def _move(job: LaunchJob, state: str, message: str = "", **fields: Any) -> None:
    now = timezone.now()
    job.transitions = [*job.transitions, {"state": state, "at": now.isoformat(), "message": message[:500]}]
    job.state, job.message, job.heartbeat = state, message[:1000], now
    for key, value in fields.items():
        setattr(job, key, value)
    if state in (JobState.RUNNING, JobState.STOPPED, JobState.FAILED):
        job.finished = now
    job.save()


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


def _stale(cutoff: datetime.datetime) -> Q:
    return Q(heartbeat__isnull=True) | Q(heartbeat__lt=cutoff)


def _claim(job: LaunchJob) -> bool:
    """Take the job unless a live worker already holds it (heartbeat younger than HOSTS_STALE_JOB_SECONDS)."""
    cutoff = timezone.now() - datetime.timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS)
    moved = (
        LaunchJob.objects.filter(pk=job.pk, state__in=ACTIVE_JOB_STATES)
        .filter(_stale(cutoff) | Q(state=JobState.QUEUED))
        .update(heartbeat=timezone.now())
    )
    return moved == 1


def run_job(job_id: int) -> None:
    """The body of the Celery task: safe to run twice; a job already finished is left alone."""
    try:
        job = LaunchJob.objects.select_related("deployment__host").get(pk=job_id)
    except LaunchJob.DoesNotExist:
        return
    if not job.is_active:
        return
    if not _claim(job):
        logger.info("launch job %s is held by another worker", job_id)
        return
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
        logger.exception("launch job %s crashed", job_id)
        _fail(job, deployment, f"Internal error ({exc.__class__.__name__}); see the worker log.")
        return
    if job.state == JobState.RUNNING and deployment.channel_id:
        trigger_probe(deployment.channel_id)


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


# --- remote steps ----------------------------------------------------------------------------------
def _dir(deployment: Deployment) -> str:
    return '"$HOME"/' + shlex.quote(deployment.remote_dir)


def _alive_test(pid: int) -> str:
    """Shell test: the process exists and is not a zombie (kill -0 succeeds on zombies until reaped)."""
    p = str(int(pid))
    return f"kill -0 {p} 2>/dev/null && [ \"$(sed 's/.*) //' /proc/{p}/stat 2>/dev/null | cut -c1)\" != Z ]"


def _alive(remote: ssh.Remote, pid: int | None) -> bool:
    return bool(pid) and remote.run(_alive_test(pid)).ok


def _pidfile_pid(remote: ssh.Remote, deployment: Deployment) -> int | None:
    result = remote.run(f"cat {_dir(deployment)}/server.pid 2>/dev/null")
    text = result.stdout.strip()
    return int(text) if text.isdigit() else None


def _port_in_use(remote: ssh.Remote, port: int) -> bool:
    """LISTEN sockets from /proc (no ss/netstat needed); state 0A is LISTEN."""
    hexport = f"{int(port):04X}"
    script = (
        'awk \'NR>1 && $4=="0A" {split($2,a,":"); print a[length(a)]}\' /proc/net/tcp /proc/net/tcp6 2>/dev/null'
        f" | grep -qx {hexport}"
    )
    return remote.run(script).ok


def _log_tail(remote: ssh.Remote, deployment: Deployment) -> str:
    result = remote.run(f"tail -c {LOG_TAIL_BYTES} {_dir(deployment)}/server.log 2>/dev/null")
    return mask_secret(result.stdout, deployment.upstream_api_key)


def mask_secret(text: str, secret: str) -> str:
    return text.replace(secret, backends.base.MASK) if secret else text


_REASONS = [
    (re.compile(r"address already in use|couldn't bind|Errno 98|bind\(\) failed", re.I), "port"),
    (
        re.compile(
            r"out of memory|OutOfMemoryError|cudaMalloc failed|failed to allocate|No available memory for the cache"
            r"|insufficient memory|CUDA error: out of memory",
            re.I,
        ),
        "oom",
    ),
    (re.compile(r"command not found|No such file or directory.*(vllm|llama-server)", re.I), "binary"),
    (
        re.compile(
            r"failed to load model|error loading model|not a valid model|Repository Not Found|No such file", re.I
        ),
        "model",
    ),
]


def explain_failure(log: str, exit_code: int | None, deployment: Deployment) -> str:
    """Why a server died, in words, from its exit code and log (llama.cpp and vLLM phrasings)."""
    impl = backends.get(deployment.backend)
    kinds = [kind for pattern, kind in _REASONS if pattern.search(log)]
    code = f" (exit code {exit_code})" if exit_code is not None else ""
    if exit_code == 127 or "binary" in kinds:
        why = f"{impl.binary} was not found on the host's PATH{code}: install it for {deployment.host.username}."
    elif "port" in kinds:
        why = f"Port {deployment.port} is in use on {deployment.host}{code}: choose another port or stop what holds it."
    elif "oom" in kinds:
        why = f"Out of memory{code}: lower the context, the GPU layers or gpu-memory-utilization, or choose more GPUs."
    elif "model" in kinds:
        why = f"The model could not be loaded{code}: check the path {deployment.model_path}."
    else:
        why = f"The server exited{code}."
    last = [line for line in log.strip().splitlines() if line.strip()][-5:]
    return why + (" Last log lines:\n" + "\n".join(last) if last else "")


def _start(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> int:
    impl = backends.get(deployment.backend)
    spec = launch_spec(deployment)
    argv = impl.argv(spec)
    env = [f"{k}={v}" for k, v in spec.env.items()]
    # `sh -c '"$@"; echo $? >exit_code' launch CMD…` keeps the exit code; braces detach cleanly.
    inner = shlex.join(["env", *env, "sh", "-c", '"$@"; echo $? >exit_code', "launch", *argv])
    d = _dir(deployment)
    script = (
        f"mkdir -p {d} && cd {d} && rm -f exit_code && {{ [ -f server.log ] && mv -f server.log server.log.1; true; }}"
        f" && {{ setsid nohup {inner} >server.log 2>&1 </dev/null & echo $! >server.pid; cat server.pid; }}"
    )
    job.command = backends.preview(argv, spec.env, spec.api_key)
    result = remote.run(script, timeout=30)
    pid_text = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if not result.ok or not pid_text.isdigit():
        raise JobFailed(f"Could not start the server: {(result.stderr or result.stdout).strip()[:300]}")
    return int(pid_text)


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
            if not _alive(remote, pid):
                code_text = remote.run(f"cat {_dir(deployment)}/exit_code 2>/dev/null").stdout.strip()
                exit_code = int(code_text) if code_text.lstrip("-").isdigit() else None
                log = _log_tail(remote, deployment)
                _beat(job, log_tail=log)
                raise JobFailed(explain_failure(log, exit_code, deployment), exit_code=exit_code)
            if time.monotonic() > deadline:
                log = _log_tail(remote, deployment)
                _beat(job, log_tail=log)
                _kill(remote, pid)
                raise JobFailed(
                    f"No healthy answer from {root}/health within {timeout:g} s; the server was stopped. "
                    "Is the port reachable from the portal (firewall)? " + explain_failure(log, None, deployment)
                )
            if time.monotonic() - last_tail > 2:
                _beat(job, log_tail=_log_tail(remote, deployment))
                last_tail = time.monotonic()
            time.sleep(settings.HOSTS_HEALTH_POLL)  # nothing to await: the remote server only answers when asked


def _kill(remote: ssh.Remote, pid: int, grace: float | None = None) -> bool:
    grace = settings.HOSTS_STOP_GRACE if grace is None else grace
    """TERM the process group, KILL it after `grace` seconds. True when it is gone."""
    p = str(int(pid))
    steps = max(int(grace / 0.2), 1)
    alive = _alive_test(int(pid))
    script = (
        f"kill -TERM -- -{p} 2>/dev/null || kill -TERM {p} 2>/dev/null; "
        f"i=0; while [ $i -lt {steps} ]; do {alive} || exit 0; sleep 0.2; i=$((i+1)); done; "
        f"kill -KILL -- -{p} 2>/dev/null || kill -KILL {p} 2>/dev/null; "
        f"i=0; while [ $i -lt 25 ]; do {alive} || exit 0; sleep 0.2; i=$((i+1)); done; exit 1"
    )
    return remote.run(script, timeout=grace + 30).ok


def _register(deployment: Deployment, context_window: int | None) -> Channel:
    """Channel + model + route for a healthy server, all or nothing."""
    impl = backends.get(deployment.backend)
    base_url, _warnings = normalize_base_url(deployment.base_url)
    now = timezone.now()
    with transaction.atomic():
        channel = deployment.channel or Channel.objects.filter(host=deployment.host, base_url=base_url).first()
        if channel is None:
            channel = Channel(name=_free_channel_name(f"{deployment.name}@{deployment.host.name}"[:96]))
        channel.kind = impl.channel_kind
        channel.base_url = base_url
        channel.api_key = deployment.upstream_api_key
        channel.host = deployment.host
        channel.enabled = True
        channel.status = ChannelStatus.UNKNOWN
        channel.status_message = f"Started by deployment {deployment.name}; waiting for the first health probe."
        channel.status_changed = now
        channel.save()
        model, _ = Model.objects.get_or_create(name=deployment.served_model_name)
        ModelRoute.objects.filter(channel=channel).exclude(model=model).delete()
        ModelRoute.objects.update_or_create(
            model=model,
            channel=channel,
            defaults={
                "upstream_model": deployment.served_model_name,
                "context_window": context_window,
                "discovered_context_window": context_window,
                "discovered_at": now,
                "enabled": True,
            },
        )
        Deployment.objects.filter(pk=deployment.pk).update(channel=channel, context_window=context_window)
        deployment.channel, deployment.context_window = channel, context_window
    return channel


def _free_channel_name(base: str) -> str:
    """`base`, or `base-2`, `base-3`… when an unrelated channel already has the name."""
    name, n = base, 1
    while Channel.objects.filter(name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def trigger_probe(channel_id: int) -> None:
    """Ask the health engineer's task to probe the new channel (3/6), if it exists yet."""
    try:
        from channels.tasks import probe_channel
    except ImportError:
        logger.warning(
            "channels.tasks.probe_channel is not importable yet; channel %s waits for a health round", channel_id
        )
        return
    try:
        probe_channel.delay(channel_id)
    except Exception:
        logger.exception("could not queue a probe of channel %s", channel_id)


def _launch(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    _move(job, JobState.STARTING, "Checking the host")
    _set_deployment(deployment, DeploymentStatus.STARTING, f"Job #{job.pk} is starting it.")
    running = _pidfile_pid(remote, deployment)
    if running and _alive(remote, running):
        # Launching twice must not start a second server: take over the one that runs.
        _move(
            job,
            JobState.WAITING_HEALTH,
            f"Already running as PID {running}; not starting a second server.",
            pid=running,
        )
        _finish_healthy(job, deployment, remote, running)
        return
    estimate = check_fit(deployment, remote)
    if estimate.get("verdict") == "does_not_fit" and not deployment.fit_override:
        raise JobFailed(
            f"Does not fit: needs about {estimate.get('total_gib')} GiB, {estimate.get('available_gib')} GiB available"
            + (f"; the largest context that fits is {estimate['max_context']}" if estimate.get("max_context") else "")
            + ". Lower the context or choose more GPUs, or tick \u201claunch even if it does not fit\u201d."
        )
    if _port_in_use(remote, deployment.port):
        raise JobFailed(
            f"Port {deployment.port} is already in use on {deployment.host}: choose another port or stop what holds it."
        )
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
        if _alive(remote, pid):
            _kill(remote, pid, grace=5)
        Deployment.objects.filter(pk=deployment.pk).update(pid=None)
        raise


def _finish_healthy(job: LaunchJob, deployment: Deployment, remote: ssh.Remote, pid: int) -> None:
    ctx = _wait_healthy(job, deployment, remote, pid)
    channel = _register(deployment, ctx)
    message = (
        f"Serving {deployment.served_model_name} on {deployment.base_url} (context {ctx or 'unknown'}); "
        f"channel {channel.name}."
    )
    _set_deployment(deployment, DeploymentStatus.RUNNING, message, pid=pid)
    _move(job, JobState.RUNNING, message, pid=pid)


def _stop(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    _move(job, JobState.STOPPING, "Stopping the server")
    _set_deployment(deployment, DeploymentStatus.STOPPING, f"Job #{job.pk} is stopping it.")
    pids = {p for p in (deployment.pid, _pidfile_pid(remote, deployment)) if p}
    for pid in pids:
        if _alive(remote, pid) and not _kill(remote, pid):
            raise JobFailed(f"PID {pid} survived TERM and KILL on {deployment.host}; check the host.")
    remote.run(f"rm -f {_dir(deployment)}/server.pid")
    channel = Channel.objects.filter(pk=deployment.channel_id).first() if deployment.channel_id else None
    if channel is not None:
        # save(), not update(): the gateway drops its cached routes on the post_save signal.
        channel.enabled = False
        channel.status_message = f"Deployment {deployment.name} was stopped; launch it to re-enable."
        channel.save(update_fields=["enabled", "status_message", "updated"])
    _set_deployment(deployment, DeploymentStatus.STOPPED, "Stopped.", pid=None)
    if job.action == JobAction.STOP:
        _move(job, JobState.STOPPED, "Stopped; the channel is disabled.", log_tail=_log_tail(remote, deployment))


_API_KEY_ARG = re.compile(r"--api-key(?:=|\s+)(\S+)")


def _adopt(job: LaunchJob, deployment: Deployment, remote: ssh.Remote) -> None:
    """Take over a server already running on the deployment's port (started by us or by hand)."""
    _move(job, JobState.STARTING, "Looking for a running server")
    pid = _pidfile_pid(remote, deployment)
    if not (pid and _alive(remote, pid)):
        impl = backends.get(deployment.backend)
        pid = None
        listing = remote.run(["ps", "-eo", "pid=,args="]).stdout
        for line in listing.splitlines():
            pid_text, _, args = line.strip().partition(" ")
            ours = impl.binary in args or deployment.model_path in args
            if ours and re.search(rf"--port(?:=|\s+){deployment.port}(?!\d)", args):
                pid = int(pid_text)
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
    remote.run(f"mkdir -p {_dir(deployment)} && echo {int(pid)} >{_dir(deployment)}/server.pid")
    _move(job, JobState.WAITING_HEALTH, f"Found PID {pid}; checking its health", pid=pid)
    _finish_healthy(job, deployment, remote, pid)


def recover_stale_jobs(now=None) -> int:
    """Fail active jobs whose worker stopped beating (died mid-job), so none stays `starting`."""
    now = now or timezone.now()
    cutoff = now - datetime.timedelta(seconds=settings.HOSTS_STALE_JOB_SECONDS)
    count = 0
    for job in (
        LaunchJob.objects.select_related("deployment").filter(state__in=ACTIVE_JOB_STATES).filter(_stale(cutoff))
    ):
        if job.state == JobState.QUEUED and (job.heartbeat is None and job.created > cutoff):
            continue
        message = (
            f"The worker stopped during this job (it was {job.get_state_display().lower()}). The server may still be "
            "running on the host: use Adopt to take it over, or Launch again."
        )
        moved = LaunchJob.objects.filter(pk=job.pk, state=job.state).update(
            state=JobState.FAILED,
            message=message,
            finished=now,
            transitions=[*job.transitions, {"state": JobState.FAILED, "at": now.isoformat(), "message": message}],
        )
        if moved:
            count += 1
            _set_deployment(job.deployment, DeploymentStatus.FAILED, message)
    return count
