"""Weight downloads: request (or join), step, cancel; models on a host's disk.

A job goes queued → checking → [installing →] downloading → verifying → done. Each run of the
Celery task is ONE step (`advance`): it takes a short lease on the job, connects over SSH, looks at
the remote process, writes what it saw (bytes per file, rate, ETA, log tail) and asks for the next
step in `HOSTS_DOWNLOAD_POLL_SECONDS`. No worker waits for a download: the host's own client
(`hf download`, `huggingface-cli download`, `modelscope download`) runs detached there, and a
worker death only breaks the chain of steps, which the sweep (`sweep`) restarts. A remote process
that died without finishing (network cut past the client's own retries, host reboot) is started
again; the client resumes its `.incomplete` files.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import audit, faults, i18n
from portal.choices import AuditAction
from portal.i18n import Message, as_message

from ..backends.base import Secret
from ..choices import IDLE_DEPLOYMENT_STATUSES
from ..models import Host
from ..remote import commands, ssh
from . import listing, remote, signals
from .choices import ACTIVE_DOWNLOAD_STATES, DownloadSource, DownloadState, default_revision
from .models import ModelDownload

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)

LEASE_SECONDS = 120
FINISHED = (DownloadState.DONE, DownloadState.FAILED, DownloadState.CANCELLED)
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,250}$")


class Tool(NamedTuple):
    """What a source's tool is called on the host (and its older name), its PyPI package, and its
    venv under ~/.gateway-portal/tools when the portal installs it."""

    name: str
    alt: str
    package: str
    venv: str


TOOLS = {
    DownloadSource.HUGGINGFACE: Tool("hf", "huggingface-cli", "huggingface_hub", "hf"),
    DownloadSource.MODELSCOPE: Tool("modelscope", "", "modelscope", "modelscope"),
}


# What the tool's log says when the host's filesystem filled up under it (ENOSPC's strerror).
DISK_FULL = "No space left on device"


class DownloadFailed(Exception):
    """A step failed: `text` is stored on the job, `message` is it in the reader's language."""

    def __init__(self, text: Message | str) -> None:
        self.text = as_message(text)
        super().__init__(self.text.english)

    @property
    def message(self) -> str:
        return self.text.render()


class DownloadConflict(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def endpoint_for(job: ModelDownload) -> str:
    if job.endpoint:
        return job.endpoint.rstrip("/")
    if job.source == DownloadSource.MODELSCOPE:
        return str(settings.HOSTS_MODELSCOPE_ENDPOINT).rstrip("/")
    return str(settings.HOSTS_HF_ENDPOINT).rstrip("/")


# --- requests --------------------------------------------------------------------------------------
def request_download(
    *,
    host: Host,
    repo_id: str,
    revision: str = "main",
    pattern: str = "",
    source: str = DownloadSource.HUGGINGFACE,
    endpoint: str = "",
    token: str = "",
    install_tool: bool = False,
    user: User | None = None,
) -> tuple[ModelDownload, bool]:
    """Queue a download, or join the active one for the same (host, source, repo, revision,
    pattern): returns (job, created). The database's unique constraint on active jobs decides, so
    two requests at the same moment still make one job."""
    if not host.host_key_fingerprint:
        raise ValidationError(
            {"host": [_("Confirm the host key of %(host)s before downloading to it.") % {"host": host}]}
        )
    fields = {
        "host": host,
        "source": source,
        "repo_id": repo_id.strip(),
        "revision": default_revision(source, revision),
        "pattern": " ".join(pattern.split()),
    }
    job = ModelDownload(
        **fields,
        endpoint=endpoint.strip(),
        token=token.strip(),
        install_tool=install_tool,
        requested_by=user if user is not None and user.pk else None,
    )
    job.full_clean(validate_constraints=False)
    for _attempt in range(3):
        try:
            with transaction.atomic():
                job.transitions = [{"state": DownloadState.QUEUED, "at": timezone.now().isoformat(), "message": ""}]
                job.save(force_insert=True)
        except IntegrityError:
            running = ModelDownload.objects.active().filter(**fields).first()
            if running is not None:
                return running, False
            job.pk = None  # it finished between our insert and our read: try again
            continue
        break
    else:  # pragma: no cover - three finishes in a row
        raise DownloadConflict(_("The download could not be queued; try again."))
    audit.record(
        AuditAction.ACTION,
        job,
        message=Message(gettext_noop("Download requested (download #%(id)s)"), id=job.pk),
        actor=user,
    )
    _queue_step(job, 0)
    return job, True


def cancel(job: ModelDownload, *, user: User | None = None) -> ModelDownload:
    """Stop the remote process (when the host answers) and mark the job cancelled."""
    if not job.is_active:
        raise DownloadConflict(_("Download #%(id)s has already finished.") % {"id": job.pk})
    text = Message(gettext_noop("Cancelled%(by)s."), by=f" ({user})" if user else "")
    if job.pid:
        try:
            with ssh.connect(job.host) as conn:
                remote.stop(conn, job.pid)
        except ssh.SSHError as exc:
            text += Message(
                gettext_noop("The host did not answer (%(error)s): the download may still run there."), error=exc.text
            )
    _move(job, DownloadState.CANCELLED, text, token="", pid=None)
    audit.record(
        AuditAction.ACTION,
        job,
        message=Message(gettext_noop("Download cancelled (download #%(id)s)"), id=job.pk),
        actor=user,
    )
    return job


def forget_token(job: ModelDownload, *, user: User | None = None) -> None:
    """Clear the access token a finished download keeps (encrypted) for copying the same files
    onto another host; a copy of a private repository then fails asking for one."""
    if job.is_active:
        raise DownloadConflict(_("Download #%(id)s is still running: cancel it first.") % {"id": job.pk})
    ModelDownload.objects.filter(pk=job.pk).update(token="", updated=timezone.now())
    job.token = ""
    audit.record(
        AuditAction.ACTION,
        job,
        message=Message(gettext_noop("Access token forgotten (download #%(id)s)"), id=job.pk),
        actor=user,
    )


# --- the step ---------------------------------------------------------------------------------------
def _move(job: ModelDownload, state: str, message: Message | str = "", **fields: Any) -> bool:
    """Change the job's state unless it has finished meanwhile (a cancel): one conditional UPDATE."""
    now = timezone.now()
    text = as_message(message)
    fields.update(
        state=state,
        **text.columns("message", 1000),
        transitions=[*job.transitions, {"state": state, "at": now.isoformat(), **text.columns("message", 500)}],
        updated=now,
    )
    if state in FINISHED:
        fields.update(finished=now, lease_until=None, eta_seconds=None)
        if state != DownloadState.DONE:  # a finished download keeps it for copies (`Weights.fetch`)
            fields.update(token="")
    moved = ModelDownload.objects.filter(pk=job.pk, state__in=ACTIVE_DOWNLOAD_STATES).update(**fields)
    if moved:
        for key, value in fields.items():
            setattr(job, key, value)
    return bool(moved)


def _update(job: ModelDownload, **fields: Any) -> None:
    fields["updated"] = timezone.now()
    ModelDownload.objects.filter(pk=job.pk, state__in=ACTIVE_DOWNLOAD_STATES).update(**fields)
    for key, value in fields.items():
        setattr(job, key, value)


def _lease(job_id: int) -> bool:
    now = timezone.now()
    return bool(
        ModelDownload.objects.active()
        .filter(pk=job_id)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_until=now + datetime.timedelta(seconds=LEASE_SECONDS))
    )


def _queue_step(job: ModelDownload, countdown: float) -> None:
    transaction.on_commit(lambda: send(job, countdown))


def send(job: ModelDownload, countdown: float = 0) -> None:
    """Queue the job's next step. A job never stepped that the broker did not take stays queued with
    `faults.NOT_SENT` on it, and `sweep` sends it again when Redis answers; a later step lost the
    same way is a broken chain, which the sweep restarts too."""
    try:
        signals.step_needed.send(sender=ModelDownload, download_id=job.pk, countdown=countdown)
    except Exception:
        logger.exception("could not queue a step of download %s", job.pk)
        if job.state == DownloadState.QUEUED and job.polled is None:
            _move(job, DownloadState.QUEUED, Message(faults.NOT_SENT))


def advance(job_id: int) -> bool:
    """Run one step of the job (the body of the Celery task; safe to run twice: a job another
    worker is stepping is left alone). Returns True while the job needs more steps, and then
    queues the next one."""
    if not _lease(job_id):
        return False
    job = ModelDownload.objects.select_related("host").filter(pk=job_id).first()
    if job is None:  # its host was deleted meanwhile
        return False
    try:
        _step(job)
    except DownloadFailed as exc:
        _move(job, DownloadState.FAILED, exc.text)
    except Exception as exc:
        logger.exception("download %s crashed", job.pk)
        _move(
            job,
            DownloadState.FAILED,
            Message(gettext_noop("Internal error (%(error)s); see the worker log."), error=type(exc).__name__),
        )
    finally:
        ModelDownload.objects.filter(pk=job_id).update(lease_until=None, polled=timezone.now())
    job.refresh_from_db()
    if job.is_active:
        _queue_step(job, settings.HOSTS_DOWNLOAD_POLL_SECONDS)
        return True
    return False


def _step(job: ModelDownload) -> None:
    try:
        with ssh.connect(job.host) as conn:
            if job.state in (DownloadState.QUEUED, DownloadState.CHECKING):
                _check(job, conn)
            elif job.state == DownloadState.INSTALLING:
                _installing(job, conn)
            elif job.state == DownloadState.DOWNLOADING:
                _downloading(job, conn)
            elif job.state == DownloadState.VERIFYING:
                _verifying(job, conn)
    except ssh.SSHError as exc:
        ssh.mark_contact(job.host, status=exc.status, message=exc.text)
        if job.state in (DownloadState.QUEUED, DownloadState.CHECKING):
            raise DownloadFailed(exc.text) from None
        # The download runs on the host by itself: keep polling until the host answers again.
        again = Message(gettext_noop("The host does not answer (%(error)s); trying again."), error=exc.text)
        _update(job, **again.columns("message", 1000))


def _check(job: ModelDownload, conn: ssh.Remote) -> None:
    endpoint = endpoint_for(job)
    _move(
        job,
        DownloadState.CHECKING,
        Message(
            gettext_noop("Listing the files of %(repo)s at %(revision)s from %(endpoint)s."),
            repo=job.repo_id,
            revision=job.revision,
            endpoint=endpoint,
        ),
    )
    try:
        commit, files = listing.list_files(
            source=job.source,
            endpoint=endpoint,
            repo_id=job.repo_id,
            revision=job.revision,
            pattern=job.pattern,
            token=job.token,
        )
    except listing.ListingError as exc:
        raise DownloadFailed(exc.message) from None
    if not files:
        raise DownloadFailed(
            Message(
                gettext_noop("No file of %(repo)s at %(revision)s matches %(pattern)s."),
                repo=job.repo_id,
                revision=job.revision,
                pattern=job.pattern or "*",
            )
        )
    home = remote.home(conn)
    if not home.startswith("/"):
        raise DownloadFailed(
            Message(gettext_noop("The SSH user's home folder on %(host)s could not be read."), host=job.host)
        )
    local_path = f"{home}/{settings.HOSTS_DOWNLOAD_DIR}/{job.folder_name}"
    if not conn.run(["mkdir", "-p", "--", local_path]).ok:
        raise DownloadFailed(
            Message(gettext_noop("The folder %(path)s cannot be created on the host."), path=local_path)
        )
    rows = [f.as_dict() for f in files]
    total = sum(f.size for f in files)
    done = _progress(rows, remote.file_sizes(conn, local_path), job.source)
    free = remote.disk_free(conn, local_path)
    reserve = settings.HOSTS_DOWNLOAD_DISK_RESERVE_MIB * 1024 * 1024
    needed = total - done
    _update(job, commit=commit, files=rows, total_bytes=total, done_bytes=done, local_path=local_path)
    if free is None:
        raise DownloadFailed(
            Message(gettext_noop("The free disk space of %(path)s could not be read (df)."), path=local_path)
        )
    if needed + reserve > free:
        raise DownloadFailed(
            Message(
                gettext_noop(
                    "Not enough disk space on %(host)s: %(needed)s still to download, %(free)s free in %(path)s, "
                    "and %(reserve)s is kept free. Delete models on its disk or choose fewer files with a pattern. "
                    "Nothing was downloaded."
                ),
                host=job.host,
                needed=Message.filesize(needed),
                free=Message.filesize(free),
                path=local_path,
                reserve=Message.filesize(reserve),
            )
        )
    tool = TOOLS[DownloadSource(job.source)]
    found = remote.find_tool(conn, tool.venv, tool.name, tool.alt)
    if found:
        _update(job, tool=found)
        _start_download(job, conn)
        return
    if not job.install_tool:
        raise DownloadFailed(
            Message(
                gettext_noop(
                    "%(tool)s is not installed on %(host)s. Install %(package)s there, or request the download again "
                    "with “install the tool” ticked to let the portal install it into ~/%(venv)s."
                ),
                tool=" / ".join(n for n in (tool.name, tool.alt) if n),
                host=job.host,
                package=tool.package,
                venv=f"{remote.TOOLS_DIR}/{tool.venv}",
            )
        )
    argv = ["sh", "-c", remote.INSTALL_TOOL, "install", f"{remote.TOOLS_DIR}/{tool.venv}", tool.package]
    pid, said = remote.start(conn, job.remote_dir, "install", argv, {})
    if pid is None:
        raise DownloadFailed(Message(gettext_noop("The tool could not be installed: %(said)s"), said=said[:300]))
    _move(
        job,
        DownloadState.INSTALLING,
        Message(
            gettext_noop("Installing %(package)s into ~/%(venv)s on the host."),
            package=tool.package,
            venv=f"{remote.TOOLS_DIR}/{tool.venv}",
        ),
        pid=pid,
    )


def _installing(job: ModelDownload, conn: ssh.Remote) -> None:
    seen = remote.probe(conn, job.remote_dir, "install", job.pid)
    _update(job, log_tail=seen.log)
    if seen.alive:
        return
    tool = TOOLS[DownloadSource(job.source)]
    found = remote.find_tool(conn, tool.venv, tool.name, tool.alt)
    if seen.exit_code != 0 or not found:
        raise DownloadFailed(
            Message(
                gettext_noop("Installing %(package)s on the host failed (exit code %(code)s); see the log below."),
                package=tool.package,
                code=seen.exit_code,
            )
        )
    _update(job, tool=found)
    _start_download(job, conn)


def tool_argv(job: ModelDownload) -> tuple[list[str], dict[str, str], Secret | None]:
    """The host tool's command (an argument list), its environment and the token's 0600 file."""
    if job.source == DownloadSource.MODELSCOPE:
        argv = [job.tool, "download", "--model", job.repo_id, "--revision", job.revision, "--local_dir", "."]
        if job.pattern:
            argv += ["--include", *listing.patterns(job.pattern)]
        env = {"MODELSCOPE_DOMAIN": endpoint_for(job).split("://", 1)[-1]}
        secret = Secret(file="token", text=job.token + "\n", env="MODELSCOPE_API_TOKEN") if job.token else None
        return argv, env, secret
    argv = [job.tool, "download", job.repo_id, "--revision", job.commit or job.revision, "--local-dir", "."]
    for glob in listing.patterns(job.pattern):
        argv += ["--include", glob]
    env = {
        "HF_ENDPOINT": endpoint_for(job),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    secret = Secret(file="token", text=job.token + "\n", env="HF_TOKEN") if job.token else None
    return argv, env, secret


def _start_download(job: ModelDownload, conn: ssh.Remote, *, again: Message | None = None) -> None:
    if not again:
        # A step whose worker died after starting the tool runs again: re-attach to that process.
        running = commands.read_pidfile(conn, remote.job_dir(job.remote_dir), "download")
        if running and commands.is_alive(conn, running):
            _move(
                job,
                DownloadState.DOWNLOADING,
                Message(gettext_noop("Re-attached to the download running as PID %(pid)s."), pid=running),
                pid=running,
            )
            return
    argv, env, secret = tool_argv(job)
    wrapped = ["sh", "-c", remote.RUN_IN_FOLDER, "download", job.local_path, *argv]
    pid, said = remote.start(conn, job.remote_dir, "download", wrapped, env, secret)
    if pid is None:
        raise DownloadFailed(Message(gettext_noop("The download could not be started: %(said)s"), said=said[:300]))
    message = again or Message(
        gettext_noop("Downloading %(size)s into %(path)s (PID %(pid)s)."),
        size=Message.filesize(job.total_bytes),
        path=job.local_path,
        pid=pid,
    )
    if not _move(job, DownloadState.DOWNLOADING, message, pid=pid, rate_bps=None, eta_seconds=None):
        remote.stop(conn, pid)  # cancelled meanwhile: do not leave it running


def _progress(rows: list[dict[str, Any]], sizes: dict[str, int], source: str) -> int:
    """Fill each file's `done` from what is on disk; returns the bytes done in all.

    A finished file has its own name; huggingface_hub writes a partial one as
    `.cache/huggingface/download/<dir>/<hash>.<etag>.incomplete` (etag: the LFS sha256, else the
    git blob id; 2.x adds `.<uuid>` before `.incomplete`), ModelScope under `._____temp/<name>`."""
    partial: dict[str, int] = {}
    for name, size in sizes.items():
        parts = name.rsplit("/", 1)[-1].split(".")
        if name.endswith(".incomplete") and len(parts) >= 3:
            partial[parts[1]] = max(partial.get(parts[1], 0), size)
    total = 0
    for row in rows:
        if row["name"] in sizes:
            done = sizes[row["name"]]
        elif source == DownloadSource.MODELSCOPE:
            done = sizes.get(f"._____temp/{row['name']}", 0)
        else:
            done = partial.get(row.get("etag", ""), 0)
        row["done"] = min(done, row["size"])
        total += row["done"]
    return total


def _record_progress(job: ModelDownload, conn: ssh.Remote, log: str) -> None:
    rows = [dict(r) for r in job.files]
    done = _progress(rows, remote.file_sizes(conn, job.local_path), job.source)
    now = timezone.now()
    rate, eta = job.rate_bps, job.eta_seconds
    if job.polled and job.state == DownloadState.DOWNLOADING:
        elapsed = (now - job.polled).total_seconds()
        if elapsed > 0 and done >= job.done_bytes:
            current = (done - job.done_bytes) / elapsed
            rate = int(current if rate is None else 0.5 * rate + 0.5 * current)
    remaining = max(job.total_bytes - done, 0)
    eta = int(remaining / rate) if rate else None
    _update(job, files=rows, done_bytes=done, rate_bps=rate, eta_seconds=eta, log_tail=log, polled=now)


def _downloading(job: ModelDownload, conn: ssh.Remote) -> None:
    seen = remote.probe(conn, job.remote_dir, "download", job.pid, job.token)
    _record_progress(job, conn, seen.log)
    if seen.alive:
        last = job.transitions[-1] if job.transitions else {}
        own = {"message": last.get("message", ""), "message_code": "", "message_params": {}}
        own.update((k, v) for k, v in last.items() if k in own)
        if any(getattr(job, k) != v for k, v in own.items()):  # the host answers again: the state's own message
            _update(job, **own)
        return
    if seen.exit_code == 0:
        _start_verify(job, conn)
        return
    if DISK_FULL in seen.log:  # another start would die at once too: say so instead of restarting
        raise DownloadFailed(
            Message(
                gettext_noop(
                    "The disk of %(host)s is full (No space left on device) in %(path)s: free space there, e.g. "
                    "delete models on its disk, then request the download again to resume from what is on disk."
                ),
                host=job.host.name,
                path=job.local_path,
            )
        )
    if job.restarts >= settings.HOSTS_DOWNLOAD_MAX_RESTARTS:
        raise DownloadFailed(
            Message(
                gettext_noop(
                    "The download stopped %(count)s times (last exit code %(code)s); see the log below. "
                    "Request it again to resume from what is on disk."
                ),
                count=job.restarts + 1,
                code=seen.exit_code,
            )
        )
    why = (
        Message(gettext_noop("exit code %(code)s"), code=seen.exit_code)
        if seen.exit_code is not None
        else Message(gettext_noop("the process is gone (host rebooted?)"))
    )
    _update(job, restarts=job.restarts + 1)
    _start_download(
        job,
        conn,
        again=Message(
            gettext_noop(
                "The download stopped (%(why)s); started again, resuming the partial files (restart %(count)s)."
            ),
            why=why,
            count=job.restarts,
        ),
    )


def _start_verify(job: ModelDownload, conn: ssh.Remote) -> None:
    missing = [r["name"] for r in job.files if r["done"] != r["size"]]
    if missing:
        raise DownloadFailed(
            Message(
                gettext_noop("The download ended but these files are missing or of the wrong size: %(files)s."),
                files=i18n.listing(missing[:10]),
            )
        )
    hashed = [r["name"] for r in job.files if r.get("sha256")]
    if not hashed:
        _move(
            job,
            DownloadState.DONE,
            Message(
                gettext_noop("Downloaded %(size)s; no checksums to verify."), size=Message.filesize(job.total_bytes)
            ),
            pid=None,
        )
        return
    argv = ["sh", "-c", remote.SHA256, "verify", job.local_path, *hashed]
    pid, said = remote.start(conn, job.remote_dir, "verify", argv, {})
    if pid is None:
        raise DownloadFailed(Message(gettext_noop("The checksums could not be computed: %(said)s"), said=said[:300]))
    _move(
        job,
        DownloadState.VERIFYING,
        Message(gettext_noop("Computing the sha256 of %(count)s file(s) on the host."), count=len(hashed)),
        pid=pid,
        rate_bps=None,
        eta_seconds=None,
    )


def _verifying(job: ModelDownload, conn: ssh.Remote) -> None:
    seen = remote.probe(conn, job.remote_dir, "verify", job.pid)
    if seen.alive:
        return
    sums: dict[str, str] = {}
    for line in remote.read_log(conn, job.remote_dir, "verify").splitlines():
        digest, _sep, name = line.partition("  ")
        if len(digest) == 64:
            sums[name] = digest
    bad = [r["name"] for r in job.files if r.get("sha256") and sums.get(r["name"]) != r["sha256"]]
    if bad:
        conn.run(["sh", "-c", 'cd "$1" || exit 1; shift; rm -f -- "$@"', "rm", job.local_path, *bad])
        raise DownloadFailed(
            Message(
                gettext_noop(
                    "Checksum mismatch for %(files)s: the file(s) were deleted from the host. "
                    "Request the download again to fetch them anew."
                ),
                files=i18n.listing(bad[:10]),
            )
        )
    remote.remove_job_dir(conn, job.remote_dir)
    _move(
        job,
        DownloadState.DONE,
        Message(
            gettext_noop("Downloaded %(size)s into %(path)s; the sha256 of %(count)s file(s) matches."),
            size=Message.filesize(job.total_bytes),
            path=job.local_path,
            count=len(sums),
        ),
        pid=None,
    )


def sweep(now: datetime.datetime | None = None) -> list[int]:
    """Active jobs whose chain of steps broke (the worker died, the broker lost the message):
    nobody stepped them for three poll intervals and none holds them; and at once those the broker
    did not take when they were asked for (`send`). Returns their ids, each with its next step queued."""
    now = now or timezone.now()
    quiet = now - datetime.timedelta(seconds=max(3 * settings.HOSTS_DOWNLOAD_POLL_SECONDS, 15))
    stuck = (
        ModelDownload.objects.active()
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .filter(Q(polled__lt=quiet) | Q(polled__isnull=True, created__lt=quiet))
    )
    unsent = ModelDownload.objects.filter(state=DownloadState.QUEUED, message_code=faults.NOT_SENT)
    ids = []
    for job in (stuck | unsent).order_by("pk"):
        if job.message_code == faults.NOT_SENT:
            _move(job, DownloadState.QUEUED, Message(faults.SENT_AGAIN))
        send(job)
        ids.append(job.pk)
    return ids


# --- what is on a host's disk ---------------------------------------------------------------------
def models_on_disk(host: Host) -> list[dict[str, Any]]:
    """The folders in the host's download folder with their sizes (over SSH), marked when an
    active download writes into them."""
    with ssh.connect(host) as conn:
        rows = remote.list_models(conn, settings.HOSTS_DOWNLOAD_DIR)
    busy = {j.folder_name for j in host.downloads.active()}
    for row in rows:
        row["busy"] = row["name"] in busy
    return rows


def delete_model(host: Host, name: str, *, user: User | None = None) -> None:
    """Delete one folder of the host's download folder (never while a download writes into it or
    a deployment serves from it)."""
    if not MODEL_NAME.match(name):
        raise ValidationError(_("%(name)s is not a model folder.") % {"name": name})
    if any(j.folder_name == name for j in host.downloads.active()):
        raise DownloadConflict(_("A download is writing into %(name)s: cancel it first.") % {"name": name})
    with ssh.connect(host) as conn:
        names = {row["name"] for row in remote.list_models(conn, settings.HOSTS_DOWNLOAD_DIR)}
        if name not in names:
            raise ValidationError(_("%(name)s is not on %(host)s's disk.") % {"name": name, "host": host})
        folder = f"{remote.home(conn)}/{settings.HOSTS_DOWNLOAD_DIR}/{name}"
        if serving := _serving_from(host, folder):
            raise DownloadConflict(
                _("Deployment %(deployments)s serves from %(name)s: stop it first.")
                % {"deployments": i18n.listing(serving), "name": name}
            )
        if not remote.delete_model(conn, settings.HOSTS_DOWNLOAD_DIR, name):
            raise DownloadFailed(_("%(name)s could not be deleted on %(host)s.") % {"name": name, "host": host})
    deleted = Message(gettext_noop("Model folder %(name)s deleted from the host's disk"), name=name)
    audit.record(AuditAction.DELETE, host, message=deleted, actor=user)


def _serving_from(host: Host, folder: str) -> list[str]:
    """The deployments on `host` not stopped whose model is in `folder`: a server has its weights
    open (llama.cpp maps the file) and its next (automatic) restart would find them gone."""
    busy = host.deployments.exclude(status__in=IDLE_DEPLOYMENT_STATUSES)
    return [d.name for d in busy if d.model_path == folder or d.model_path.startswith(folder + "/")]


class Weights(NamedTuple):
    """Where a model came from: a finished download and the file's name inside its folder (a
    llama.cpp GGUF), or "" for the download's whole folder (a vLLM/SGLang model folder)."""

    download: ModelDownload
    relative: str

    def path_in(self, job: ModelDownload) -> str:
        """The model's path in `job`'s folder (the same download on another host)."""
        return f"{job.local_path}/{self.relative}" if self.relative else job.local_path

    def on(self, host: Host) -> ModelDownload | None:
        """The same files (source, repository, commit) downloaded onto `host`, if they were."""
        src = self.download
        jobs: list[ModelDownload] = list(
            ModelDownload.objects.done().filter(host=host, source=src.source, repo_id=src.repo_id)
        )
        for job in jobs:
            # a file: any download of that commit that holds it; a folder: the same files asked for
            holds = self.relative in job.file_names if self.relative else job.pattern == src.pattern
            if (job.commit or job.revision) == (src.commit or src.revision) and holds:
                return job
        return None

    def fetch(self, host: Host) -> ModelDownload:
        """Download the same files onto `host` (or join the download already under way there),
        with the access token the first download kept (a private or gated repository)."""
        src = self.download
        job, _created = request_download(
            host=host,
            repo_id=src.repo_id,
            revision=src.commit or src.revision,
            pattern=src.pattern,
            source=src.source,
            endpoint=src.endpoint,
            token=src.token,
            install_tool=src.install_tool,
        )
        return job


def weights_of(model_path: str) -> Weights | None:
    """The finished download (onto any host) that put the file or folder `model_path` there, if
    one did: a model on demand is downloaded from the same source onto a host that lacks it."""
    path = model_path.rstrip("/")
    for job in ModelDownload.objects.done().exclude(local_path="").order_by("-finished"):
        folder = job.local_path.rstrip("/")
        if path == folder:
            return Weights(job, "")
        if path.startswith(folder + "/") and path[len(folder) + 1 :] in job.file_names:
            return Weights(job, path[len(folder) + 1 :])
    return None


def downloaded_on(host: Host) -> list[dict[str, Any]]:
    """What the launch form offers as "already on this host": each finished download's GGUF
    files (llama.cpp) or its folder (vLLM, SGLang: the fit reads its config.json)."""
    offers: list[dict[str, Any]] = []
    seen: set[str] = set()
    for job in host.downloads.done().order_by("-finished"):
        choices = [(f"{job.local_path}/{g}", "llamacpp") for g in job.gguf_files] or [(job.local_path, "vllm")]
        for path, backend in choices:
            if path not in seen:
                seen.add(path)
                offers.append({"path": path, "backend": backend, "download": job})
    return offers


def offered_initial(params: Mapping[str, str]) -> dict[str, Any]:
    """The launch form's initial model path and backend when it is opened from an offer."""
    path, backend = params.get("model_path", ""), params.get("backend", "")
    initial: dict[str, Any] = {}
    if path.startswith("/") and len(path) <= 500:
        initial["model_path"] = path
        if backend in ("llamacpp", "vllm", "sglang"):
            initial["backend"] = backend
    return initial
