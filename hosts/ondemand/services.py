"""Models on demand: the gateway's demand, the placement, making room, the idle sweep, the history.

**Placement** (`place`): the hosts the deployment may run on (only its own when `pin_host`),
each asked for its GPUs' memory by a fresh `nvidia-smi` (stored as the inventory), judged by the
fit estimate (`hosts.fit`) against each GPU's free memory, taken as the smaller of what
`nvidia-smi` says and the GPU's total minus what the portal's own starting/running deployments
there were estimated to need (a server still loading has not allocated yet). A host is dropped,
with its reason, when it cannot be reached, lacks the weights (a llama.cpp file, a vLLM/SGLang
folder) and no finished download tells where to get them, has the deployment's port taken, or has no
room even after making some. Among the hosts left: fewest evictions first, then a host that has
the weights, then the least loaded (share of its GPU memory already claimed), then by name. When
no host is left, the placement waits for room only if some host merely lacks it (`_nowhere`);
otherwise waiting cannot help (every host unreachable over SSH, without the model, its port
taken...) and the cold start fails at once with each host's reason (the SSH error in words for
one that could not be reached), which the waiting requests get as their 503.

**Weights**: a chosen host without the llama.cpp file (or the vLLM/SGLang model folder) gets the
same download as the host it came from (`downloads.weights_of`), as a supervised download job; the cold start waits in
`downloading` (retried every `HOSTS_ONDEMAND_RETRY_SECONDS`, nothing evicted meanwhile) and
launches once the file is there, with the deployment's model path moved to that host's copy. Its
size is read from a host that has it; when none does, the least loaded host downloads it first.

**Making room**: on a host without room, idle on-demand deployments are stopped, in this order:
idle longest first (last request ended earliest), then cheapest to restart (smallest cold-start
p50), then name. Only a deployment that is on demand, running, has no request in flight (the
gateway's count in Redis; unreadable counts as busy) and has been idle at least
`HOSTS_ONDEMAND_EVICT_IDLE_SECONDS` may be evicted; never one that is not on demand or busy.

**Stopping** (an eviction, the idle sweep): the deployment is first taken out of routing, then
what is in flight is read again, and only then is it stopped (`take_out`): a request that reached
it is served to its end, one that comes later waits for its next start.

**No thrash**: a model just started for waiting requests is not idle for that grace, so a second
cold model that needs its room waits (the placement is retried every
`HOSTS_ONDEMAND_RETRY_SECONDS`) until the first has served its queue and gone quiet, and is
refused (503 with Retry-After at the gateway) when its cold-start budget runs out first.
"""

from __future__ import annotations

import datetime
import functools
import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django import db
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from channels.models import Channel
from portal import faults
from portal.i18n import Message, stored

from .. import backends, calibration, fit
from ..choices import IDLE_DEPLOYMENT_STATUSES, DeploymentStatus, JobAction, JobState
from ..deployments import jobs
from ..deployments.services import set_status
from ..downloads import services as downloads
from ..downloads.choices import DownloadState
from ..models import GPU, Deployment, Host, LaunchJob
from ..remote import commands, inventory, ssh
from . import activity, signals
from .models import ColdStart, ColdStartState

logger = logging.getLogger(__name__)

HISTORY = 20  # cold starts the estimates are taken from
DEFAULT_ESTIMATE_SECONDS = 60.0  # before the first cold start of a deployment
RETRY_FLOOR_SECONDS = 5.0  # the soonest a refused request is told to come back once a start runs late
CLAIMING = (DeploymentStatus.STARTING, DeploymentStatus.RUNNING, DeploymentStatus.STOPPING)


# --- what the gateway asks --------------------------------------------------------------------------
def serving_on_demand() -> dict[str, Deployment]:
    """Per public model served by an on-demand deployment, the one that serves it: the first by id
    (another deployment of the same name is not what a request for it starts)."""
    first: dict[str, Deployment] = {}
    for d in Deployment.objects.filter(on_demand=True).order_by("pk"):
        first.setdefault(d.served_model_name, d)
    return first


def catalog_entries() -> dict[str, dict[str, Any]]:
    """Per public model served by an on-demand deployment: what the gateway's catalog keeps of it."""
    return {
        name: {
            "deployment_id": d.pk,
            "budget": float(d.cold_start_budget),
            "estimate": estimate_seconds(d.pk),
            "context_window": expected_window(d),
            "channel_id": d.channel_id,  # its last run's (disabled while stopped), None before one
        }
        for name, d in serving_on_demand().items()
    }


def cold_windows() -> dict[str, int | None]:
    """For `channels.services.register_cold_windows`: per model served on demand, the window a
    request gets once its server starts (`expected_window`)."""
    return {name: expected_window(d) for name, d in serving_on_demand().items()}


def expected_window(d: Deployment) -> int | None:
    """The window a request gets from `d`'s server: as the server reported it at its last start,
    else as its options set it (a deployment never started yet), so that clients are configured
    with the right window before the first request starts it."""
    if d.context_window:
        return d.context_window
    try:
        return backends.get(d.backend).configured_window(d.options or {}, list(d.extra_args or ()))
    except (KeyError, TypeError, ValueError):  # an unknown backend or options saved by hand: unknown
        return None


def model_states(names: list[str]) -> dict[str, dict[str, bool]]:
    """For the models pages (`channels.services.register_model_states`): each of `names` served by
    an on-demand deployment, and whether it is cold (not serving: the next request starts it)."""
    states: dict[str, dict[str, bool]] = {}
    for d in (
        Deployment.objects.filter(on_demand=True, served_model_name__in=names).select_related("channel").order_by("pk")
    ):
        states.setdefault(d.served_model_name, {"on_demand": True, "cold": not is_ready(d)})
    return states


def _history(deployment_id: int) -> list[float]:
    """The lengths of this deployment's last cold starts that served."""
    return [
        float(s)
        for s in ColdStart.objects.filter(
            deployment_id=deployment_id, state=ColdStartState.READY, seconds__isnull=False
        )
        .order_by("-created")
        .values_list("seconds", flat=True)[:HISTORY]
        if s is not None
    ]


def estimate_seconds(deployment_id: int, q: float = 0.5) -> float:
    """A cold start's expected length from this deployment's history (its quantile `q`)."""
    seconds = _history(deployment_id)
    return quantile(seconds, q) if seconds else DEFAULT_ESTIMATE_SECONDS


def retry_seconds(deployment_id: int, elapsed: float) -> float:
    """When a request refused while the start runs should come back: when the start is expected
    to be done (its median), past that its 95th percentile; a start that runs longer than both is
    asked about every tenth of what it has taken (at least every RETRY_FLOOR_SECONDS), not every
    second by every waiting client."""
    seconds = _history(deployment_id)
    for q in (0.5, 0.95):
        left = (quantile(seconds, q) if seconds else DEFAULT_ESTIMATE_SECONDS) - elapsed
        if left >= 1:
            return left
    return max(RETRY_FLOOR_SECONDS, elapsed / 10)


def quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[max(0, min(98, int(q * 100) - 1))])


def is_ready(deployment: Deployment) -> bool:
    return (
        deployment.status == DeploymentStatus.RUNNING
        and deployment.channel_id is not None
        and deployment.channel.enabled  # type: ignore[union-attr]
    )


def demand(deployment_id: int) -> dict[str, Any]:
    """A request wants the deployment's model (the gateway, after the key's limits admitted it):
    its state, opening a cold start unless one is active. The one-active constraint makes this
    one launch however many requests and replicas ask at once."""
    d = Deployment.objects.select_related("channel").filter(pk=deployment_id).first()
    if d is None:
        return GONE
    if is_ready(d):
        return {"state": "ready"}
    cold = ColdStart.objects.active().filter(deployment=d).first()
    if cold is None:
        deadline = timezone.now() + datetime.timedelta(seconds=d.cold_start_budget)
        try:
            with transaction.atomic():
                cold = ColdStart.objects.create(
                    deployment=d, deadline=deadline, **Message(gettext_noop("Choosing a host.")).columns("message")
                )
        except IntegrityError:  # another request, here or on another replica, opened it first
            cold = ColdStart.objects.active().get(deployment=d)
        else:
            cold_id = cold.pk
            # A pinned deployment has one host to look at: its placement runs here, no Celery hop.
            here = d.pin_host and bool(settings.HOSTS_ONDEMAND_PINNED_IN_PROCESS)
            transaction.on_commit(
                lambda: signals.placement_needed.send(sender=ColdStart, cold_start_id=cold_id, here=here)
            )
    return observe(cold.pk)


# What the requests waiting for a deployment that was deleted meanwhile are told (the gateway's
# answers are English, as every error of its API).
GONE: dict[str, Any] = {"state": "failed", "message": "Its deployment was deleted."}


def observe(cold_start_id: int) -> dict[str, Any]:
    """Where a cold start stands, for the requests waiting on it; a launching one whose
    deployment has become ready (or failed) is moved on here, by whoever looks first."""
    cold = ColdStart.objects.select_related("deployment__channel", "download__host").filter(pk=cold_start_id).first()
    if cold is None:  # deleted with its deployment
        return GONE
    d = cold.deployment
    if cold.state == ColdStartState.LAUNCHING or (cold.state in PLACEABLE and is_ready(d)):
        # (a placeable one: its deployment was being stopped, and a request kept it: `take_out`)
        if is_ready(d):
            finish(cold, ColdStartState.READY, Message(gettext_noop("Serving on %(host)s."), host=d.host.name))
        elif d.status in IDLE_DEPLOYMENT_STATUSES and not d.jobs.active().exists():
            why = stored(d, "status_message") if d.status_message else Message(gettext_noop("The launch failed."))
            finish(cold, ColdStartState.FAILED, why)
    elif cold.is_active and timezone.now() > cold.deadline + datetime.timedelta(seconds=30):
        # the task died
        finish(cold, ColdStartState.FAILED, Message(gettext_noop("No placement within the cold-start budget.")))
    elapsed = (timezone.now() - cold.created).total_seconds()
    seen = {
        "cold_start_id": cold.pk,
        "state": "ready" if cold.state == ColdStartState.READY else cold.state,
        "message": cold.message,
        "elapsed": elapsed,
        "retry_after": retry_seconds(d.pk, elapsed),
    }
    if cold.state in (ColdStartState.DOWNLOADING, ColdStartState.FAILED) and cold.download_id is not None:
        download = cold.download
        if download is not None and download.is_active:  # what a refused request is told
            seen["downloading"] = f"{download.percent} % of the weights are on {download.host}"
            seen["retry_after"] = float(download.eta_seconds or 60) + estimate_seconds(d.pk)
    return seen


def finish(cold: ColdStart, state: str, message: Message) -> bool:
    now = timezone.now()
    seconds = (now - cold.created).total_seconds()
    columns = message.columns("message", 500)
    moved = ColdStart.objects.filter(pk=cold.pk, state=cold.state).update(
        state=state, finished=now, seconds=seconds if state == ColdStartState.READY else None, **columns
    )
    if moved:
        cold.state, cold.finished = state, now
        for name, value in columns.items():
            setattr(cold, name, value)
        if state == ColdStartState.READY:
            activity.touch(cold.deployment_id)  # its waiting requests follow: not idle yet
        activity.announce(cold.deployment_id)
    return bool(moved)


# --- placement --------------------------------------------------------------------------------------
@dataclass
class Candidate:
    host: Host
    gpu_indices: list[int] = field(default_factory=list)
    victims: list[Deployment] = field(default_factory=list)
    weights: bool = False
    load: float = 0.0
    fits: bool = False  # room found (on `gpu_indices`; none for a deployment that uses no GPU)
    reason: Message = field(default_factory=lambda: Message.verbatim(""))  # why (not) here, shown on its page
    model_path: str = ""  # the model's path on this host
    download_first: bool = False  # lacks the weights and their size is unknown: the fit runs once there
    full: bool = False  # no room now: room may come (an idle model to evict), so the placement waits
    unreachable: Message | None = None  # the SSH error when the host could not be asked


def place(cold_start_id: int) -> float | None:
    """One placement attempt (the Celery task's body): choose the host, make room, ask for the
    launch. Returns seconds until the next attempt while it waits for room or for the weights'
    download onto the chosen host, else None."""
    cold = ColdStart.objects.select_related("deployment__host").filter(pk=cold_start_id).first()
    if cold is None or cold.state not in PLACEABLE:
        return None
    d = cold.deployment
    ColdStart.objects.filter(pk=cold.pk).update(attempts=F("attempts") + 1)  # two placements count twice
    if d.status == DeploymentStatus.STOPPING:  # a take-out whose process died is settled now, not by a timeout
        settle_take_outs(d)
        d.refresh_from_db()
    if d.status == DeploymentStatus.RUNNING or d.jobs.active().filter(action=JobAction.LAUNCH).exists():
        _move(cold, ColdStartState.LAUNCHING, Message(gettext_noop("Already starting or running.")))
        return None
    if d.status not in IDLE_DEPLOYMENT_STATUSES:  # being stopped (its idle TTL, an admin): next round
        return _wait(cold, Message(gettext_noop("The deployment is being stopped; starting it again once it is.")), [])
    hosts = [d.host] if d.pin_host else list(Host.objects.key_confirmed())
    weights = downloads.weights_of(d.model_path) if d.model_path.startswith("/") else None
    paths = {h.pk: _model_path_on(d, h, weights) for h in hosts}
    surveys = survey_all(d, hosts, paths)
    known_arch = next((s.arch for s in surveys.values() if s.arch is not None), None)  # read where it is
    candidates: list[Candidate] = []
    downloads_first: list[Candidate] = []
    reasons: list[dict[str, object]] = []  # each a `Message.as_item`: `ColdStart.reasons_text` renders them
    assessed: list[Candidate] = []
    for host in hosts:
        candidate = assess(d, host, surveys[host.pk], weights=weights, arch=known_arch, model_path=paths[host.pk])
        assessed.append(candidate)
        reasons.append(Message(gettext_noop("%(host)s: %(reason)s"), host=host.name, reason=candidate.reason).as_item())
        if candidate.fits:
            candidates.append(candidate)
        elif candidate.download_first:
            downloads_first.append(candidate)
    if not candidates and not downloads_first:
        return _nowhere(cold, assessed, reasons)
    candidates.sort(key=lambda c: (len(c.victims), not c.weights, c.load, c.host.name))
    downloads_first.sort(key=lambda c: (c.load, c.host.name))
    chosen = (candidates or downloads_first)[0]
    survey_of = surveys[chosen.host.pk]
    chosen_text = gettext_noop("chosen %(host)s (pinned)") if d.pin_host else gettext_noop("chosen %(host)s")
    reasons.append(Message(chosen_text, host=chosen.host.name).as_item())
    if not chosen.weights:
        assert weights is not None  # only a host that can download them is a candidate without them
        return _download(cold, chosen, weights, reasons)
    evicted = []
    for victim in chosen.victims:
        room = Message(gettext_noop("Stopped to make room for %(model)s (on demand)."), model=d.served_model_name)
        if not evict(victim, room):
            again = Message(gettext_noop("Could not stop %(name)s to make room; trying again."), name=victim.name)
            return _wait(cold, again, reasons)
        evicted.append({"name": victim.name, "host": chosen.host.name})
    try:
        with transaction.atomic():  # one commit, not one per row: each is a WAL flush on a busy box
            # Guarded, as `_move`: the cold start may have ended while the hosts were surveyed (its
            # budget ran out, `observe`; its deployment was deleted): then nothing is launched.
            if not ColdStart.objects.filter(pk=cold.pk, state=cold.state).update(
                state=ColdStartState.LAUNCHING,
                **Message(gettext_noop("Launching on %(host)s."), host=chosen.host.name).columns("message", 500),
                host_name=chosen.host.name,
                reasons=reasons,
                evicted=evicted,
            ):
                return None
            Deployment.objects.filter(pk=d.pk).update(
                host=chosen.host, gpu_indices=chosen.gpu_indices, model_path=chosen.model_path
            )
            d.host, d.gpu_indices, d.model_path = chosen.host, chosen.gpu_indices, chosen.model_path
            jobs.request_job(d, JobAction.LAUNCH, queue=False)  # `launch` runs it, in this process
    except jobs.JobConflict as exc:
        return _wait(cold, exc.text, reasons)
    if not evicted:  # a stop on the host since would make its answers stale
        _surveyed[cold.pk] = (time.monotonic(), survey_of.checks)
    return None


# The chosen host's answers to the launch checks, from the placement's survey, for the launch that
# follows in the same process (`launch`): a few seconds old at most, else asked again.
_surveyed: dict[int, tuple[float, list[Any]]] = {}
SURVEY_FRESH_SECONDS = 10.0


def _fresh_checks(cold_start_id: int) -> list[Any] | None:
    taken, checks = _surveyed.pop(cold_start_id, (0.0, []))
    for stale in [k for k, (at, _c) in _surveyed.items() if time.monotonic() - at > SURVEY_FRESH_SECONDS]:
        _surveyed.pop(stale, None)
    return checks if checks and time.monotonic() - taken <= SURVEY_FRESH_SECONDS else None


def launch(cold_start_id: int) -> tuple[int, float | None] | None:
    """Run the cold start's launch job here, right after its placement (the placement task's
    second half): the same process, so the same pooled SSH connection to the host, no task
    queued in between, and the checks the placement's survey just made are not asked again. The
    job watches the new server for HOSTS_ONDEMAND_WATCH_SECONDS. Returns (job id, seconds until
    its next re-scheduled look or None when it is done), or None when there is no launch job to
    run (another process holds it)."""
    cold = ColdStart.objects.filter(pk=cold_start_id).first()
    if cold is None:
        return None
    job = cold.deployment.jobs.active().filter(action=JobAction.LAUNCH, worker="").first()
    if job is None:
        return None
    delay = jobs.run_job(job.pk, watch=float(settings.HOSTS_ONDEMAND_WATCH_SECONDS), checked=_fresh_checks(cold.pk))
    if delay is None:
        observe(cold.pk)  # ready or failed: move the cold start on now, not at the next look
    return job.pk, delay


PLACEABLE = (ColdStartState.PLACING, ColdStartState.WAITING_ROOM, ColdStartState.DOWNLOADING)
FAILED_DOWNLOAD = (DownloadState.FAILED, DownloadState.CANCELLED)


def _model_path_on(d: Deployment, host: Host, weights: downloads.Weights | None) -> str:
    """The model's path on `host`: where the same download landed there, else the deployment's own."""
    there = weights.on(host) if weights is not None else None
    return weights.path_in(there) if there is not None and weights is not None else d.model_path


def _download(
    cold: ColdStart, chosen: Candidate, weights: downloads.Weights, reasons: list[dict[str, object]]
) -> float | None:
    """The chosen host lacks the model's file: download it there (a supervised download job, or
    the one already under way) and look again once it may be done; nothing is stopped meanwhile."""
    waited = cold.download
    host = chosen.host.name
    if waited is not None and waited.host_id == chosen.host.pk and waited.state in FAILED_DOWNLOAD:
        failed = Message(
            gettext_noop("Downloading the weights to %(host)s failed: %(why)s"),
            host=host,
            why=stored(waited, "message"),
        )
        finish(cold, ColdStartState.FAILED, failed)
        return None
    try:
        job = weights.fetch(chosen.host)
    except (ValidationError, downloads.DownloadConflict) as exc:
        why = exc.message if isinstance(exc, downloads.DownloadConflict) else " ".join(exc.messages)
        refused = Message(
            gettext_noop("The weights cannot be downloaded to %(host)s: %(why)s"),
            host=host,
            why=Message.verbatim(str(why)),
        )
        return _wait(cold, refused, reasons)
    message = Message(
        gettext_noop("Downloading the weights to %(host)s (%(percent)s %%, download #%(download)s)."),
        host=host,
        percent=job.percent,
        download=job.pk,
    )
    if timezone.now() >= cold.deadline:
        _move(cold, ColdStartState.DOWNLOADING, message, reasons=reasons, download=job, host_name=host)
        cold.state = ColdStartState.DOWNLOADING
        later = Message(
            gettext_noop("%(downloading)s The model starts on a request once they are there."), downloading=message
        )
        finish(cold, ColdStartState.FAILED, later)
        return None
    _move(cold, ColdStartState.DOWNLOADING, message, reasons=reasons, download=job, host_name=host)
    if cold.state != ColdStartState.DOWNLOADING:
        activity.announce(cold.deployment_id)  # the waiting requests learn why it takes longer
    return float(settings.HOSTS_ONDEMAND_RETRY_SECONDS)


def not_sent(cold_start_id: int) -> None:
    """The broker did not take the cold start's placement: it says so, and `sweep_idle` sends it
    again once Redis answers (the waiting requests would otherwise wait out their budget)."""
    ColdStart.objects.filter(pk=cold_start_id, state__in=PLACEABLE).update(
        **Message(faults.NOT_SENT).columns("message", 500), updated=timezone.now()
    )


def _resend_placements() -> None:
    for pk in ColdStart.objects.filter(state__in=PLACEABLE, message_code=faults.NOT_SENT).values_list("pk", flat=True):
        again = {**Message(faults.SENT_AGAIN).columns("message", 500), "updated": timezone.now()}
        if ColdStart.objects.filter(pk=pk, state__in=PLACEABLE, message_code=faults.NOT_SENT).update(**again):
            signals.placement_needed.send(sender=ColdStart, cold_start_id=pk)


def _nowhere(cold: ColdStart, assessed: list[Candidate], reasons: list[dict[str, object]]) -> float | None:
    """No host can take the deployment now. While some host only lacks room, the placement waits
    for it (an idle model may be evicted meanwhile); when none does, the start cannot succeed by
    waiting (every host unreachable, without the model, ...) and fails at once, saying why, so
    the waiting requests are told now instead of at the end of their budget."""
    unreachable = [c for c in assessed if c.unreachable is not None]
    if any(c.full for c in assessed):
        message = Message(gettext_noop("No host has room for it now, even after stopping idle on-demand models."))
        if unreachable:
            message = Message(
                gettext_noop(
                    "No host has room for it now, even after stopping idle on-demand models, and some could not "
                    "be reached over SSH: %(hosts)s"
                ),
                hosts=_listed(unreachable),
            )
        return _wait(cold, message, reasons)
    if unreachable and len(unreachable) == len(assessed) == 1:
        only = unreachable[0]
        message = Message(
            gettext_noop("Host %(host)s could not be reached over SSH: %(why)s"),
            host=only.host.name,
            why=only.unreachable,
        )
    elif unreachable and len(unreachable) == len(assessed):
        message = Message(gettext_noop("No host could be reached over SSH: %(hosts)s"), hosts=_listed(unreachable))
    else:
        message = Message(gettext_noop("No host can run it: %(hosts)s"), hosts=_listed(assessed))
    _move(cold, cold.state, message, reasons=reasons)
    finish(cold, ColdStartState.FAILED, message)
    return None


def _listed(candidates: list[Candidate]) -> Message:
    """Each host with why it cannot run the deployment, "gpu-a: why; gpu-b: why" (the SSH error
    for a host that could not be reached, else its placement reason)."""
    items = [
        Message(gettext_noop("%(host)s: %(reason)s"), host=c.host.name, reason=c.unreachable or c.reason)
        for c in candidates
    ]
    return functools.reduce(lambda first, second: Message(LIST_ITEMS, first=first, second=second), items)


LIST_ITEMS = gettext_noop("%(first)s; %(second)s")


def _move(cold: ColdStart, state: str, message: Message, **fields: Any) -> bool:
    """Move the cold start on from the state the placement read it in; False when another process
    moved it meanwhile, whose move stands: the gateway's `observe` finds a deployment that the
    placement just put back (`settle_take_outs`) ready and finishes the cold start, maybe before
    the placement moves it to `launching` (unguarded, that undid `ready`)."""
    return bool(
        ColdStart.objects.filter(pk=cold.pk, state=cold.state).update(
            state=state, **message.columns("message", 500), **fields
        )
    )


def _wait(cold: ColdStart, message: Message, reasons: list[dict[str, object]]) -> float | None:
    if timezone.now() >= cold.deadline:
        _move(cold, ColdStartState.WAITING_ROOM, message, reasons=reasons)
        cold.state = ColdStartState.WAITING_ROOM
        finish(cold, ColdStartState.FAILED, message + Message(gettext_noop("Gave up after the cold-start budget.")))
        return None
    _move(cold, ColdStartState.WAITING_ROOM, message, reasons=reasons)
    if cold.state != ColdStartState.WAITING_ROOM or cold.message != message.english[:500]:
        activity.announce(cold.deployment_id)  # the waiting requests learn why it takes longer
    return float(settings.HOSTS_ONDEMAND_RETRY_SECONDS)


@dataclass
class Survey:
    """What one SSH session told of a host for a placement: its GPUs (a fresh nvidia-smi) and the
    answers to the launch job's own checks (`jobs.launch_probes`: pid file, why the model cannot
    be loaded there ("" when it can), its architecture, RAM, port in use), which the launch on the
    chosen host then takes instead of asking again; or why the host was not asked."""

    inventory: inventory.Inventory | None = None
    checks: list[Any] = field(default_factory=list)
    failed: Message | None = None
    unreachable: Message | None = None  # the SSH error, when that is why it failed

    @property
    def problem(self) -> str:
        return str(self.checks[1]) if self.checks else ""

    @property
    def arch(self) -> fit.Architecture | None:
        return self.checks[2] if self.checks else None

    @property
    def port_taken(self) -> bool:
        running, port_taken = (self.checks[0], self.checks[4]) if self.checks else (None, False)
        return bool(port_taken) and not running  # its own server left running is taken over


def survey(d: Deployment, host: Host, model_path: str = "") -> Survey:
    """Ask the host, in one session on its pooled connection (no database work: it runs in
    parallel threads for several hosts, `survey_all`); the model is looked for at `model_path`
    (the deployment's own by default)."""
    try:
        with ssh.connect(host, reuse=True) as remote:
            smi_queries = [commands.Probe(query, lambda result: result) for query in inventory.QUERIES]
            answers = commands.ask(remote, *smi_queries, *jobs.launch_probes(d, model_path or d.model_path))
            smi, checks = answers[: len(smi_queries)], answers[len(smi_queries) :]
            try:
                return Survey(inventory.from_results(remote, *smi), checks)
            except inventory.InventoryError as exc:
                return Survey(failed=Message(gettext_noop("no GPUs (%(why)s)"), why=exc.text))
    except ssh.SSHError as exc:
        return Survey(failed=Message(gettext_noop("unreachable (%(why)s)"), why=exc.text), unreachable=exc.text)


def survey_all(d: Deployment, hosts: list[Host], paths: dict[int, str]) -> dict[int, Survey]:
    """Every host surveyed at once (one SSH round trip for all, not one per host); `paths`: the
    model's path on each host."""
    if len(hosts) < 2:
        return {h.pk: survey(d, h, paths[h.pk]) for h in hosts}

    def one(host: Host) -> Survey:
        try:
            return survey(d, host, paths[host.pk])
        finally:
            db.connection.close()  # a refused host key is recorded from this thread

    with ThreadPoolExecutor(max_workers=min(len(hosts), 16), thread_name_prefix="placement-survey") as pool:
        return dict(zip([h.pk for h in hosts], pool.map(one, hosts), strict=True))


def assess(
    d: Deployment,
    host: Host,
    found: Survey | None = None,
    *,
    weights: downloads.Weights | None = None,
    arch: fit.Architecture | None = None,
    model_path: str = "",
) -> Candidate:
    """Can `d` run on `host`, on which GPUs, after stopping which idle deployments; and why not.
    `found` is the host's survey when already taken (`survey_all`); `weights`, where the llama.cpp
    file can be downloaded from onto a host that lacks it; `arch`, the model's architecture as
    read on another host; `model_path`, the model's path on this host."""
    candidate = Candidate(host=host, model_path=model_path or d.model_path)
    if Deployment.objects.filter(host=host, port=d.port).exclude(pk=d.pk).exists():
        candidate.reason = Message(gettext_noop("port %(port)s is taken by another deployment"), port=d.port)
        return candidate
    found = found or survey(d, host, candidate.model_path)
    if found.failed is not None or found.inventory is None:
        candidate.reason = found.failed or Message.verbatim("")
        candidate.unreachable = found.unreachable
        return candidate
    gpus = inventory.store(host, found.inventory)  # the rows as stored: none stale
    claims = _claims(host, exclude=d.pk)
    total = sum(g.memory_total_mib or 0 for g in gpus.values()) or 1
    candidate.load = sum(sum(c.values()) for c in claims.values()) / total
    if found.port_taken:
        candidate.reason = Message(gettext_noop("port %(port)s is in use on the host"), port=d.port)
        return candidate
    candidate.weights = not found.problem
    if not candidate.weights and weights is None:
        if d.backend == "llamacpp":
            candidate.reason = Message(
                gettext_noop("the model file is not on this host (and no download of it is known)")
            )
        else:
            candidate.reason = Message(
                gettext_noop("the model folder is not on this host (and no download of it is known)")
            )
        return candidate
    arch = (found.arch if candidate.weights else None) or arch or fit.preset_for(d.model_path)
    if arch is None:
        if not candidate.weights and weights is not None:
            candidate.download_first = True
            candidate.reason = Message(
                gettext_noop("downloads the weights first (their size is read once they are there)")
            )
        else:
            candidate.reason = Message(gettext_noop("the model's size is unknown (no readable files, no preset)"))
        return candidate
    if d.backend == "llamacpp" and not arch.quant:
        arch.quant = fit.quant_from_name(d.model_path)
    victims = _evictable(host, exclude=d.pk)
    freed: dict[int, float] = {}
    for n_evicted in range(len(victims) + 1):
        chosen = _fit(d, arch, host, gpus, claims, freed)
        if chosen is not None:
            candidate.fits, candidate.gpu_indices, candidate.victims = True, chosen, victims[:n_evicted]
            have = gettext_noop("has the weights") if candidate.weights else gettext_noop("downloads the weights")
            made = (
                Message(gettext_noop(", after stopping %(names)s"), names=", ".join(v.name for v in candidate.victims))
                if candidate.victims
                else Message.verbatim("")
            )
            candidate.reason = Message(
                gettext_noop("fits on GPU %(gpus)s%(after_stopping)s; %(weights)s; %(claimed)s%% claimed"),
                gpus=",".join(map(str, chosen)),
                after_stopping=made,
                weights=Message(have),
                claimed=round(candidate.load * 100),
            )
            return candidate
        if n_evicted < len(victims):
            for index, mib in claims.get(victims[n_evicted].pk, {}).items():
                freed[index] = freed.get(index, 0) + mib
    candidate.full = True
    candidate.reason = Message(
        gettext_noop("no room: %(free)s free%(even_after)s; %(kept)s other deployment(s) may not be stopped"),
        free=_free_text(gpus, claims, freed),
        even_after=Message(
            gettext_noop(", even after stopping %(count)s idle on-demand deployment(s)"), count=len(victims)
        )
        if victims
        else Message.verbatim(""),
        kept=len(_busy_or_pinned(host, d.pk)),
    )
    return candidate


def _claims(host: Host, *, exclude: int) -> dict[int, dict[int, float]]:
    """MiB per GPU index each starting/running deployment on the host was estimated to need."""
    claims: dict[int, dict[int, float]] = {}
    for other in Deployment.objects.filter(host=host, status__in=CLAIMING).exclude(pk=exclude):
        devices = (other.last_fit or {}).get("devices") or []
        per = {dev["index"]: float(dev["need_gib"]) * 1024 for dev in devices if dev.get("index") is not None}
        if not per:  # no estimate stored: the whole of its GPUs
            per = {i: float("inf") for i in other.gpu_indices}
        claims[other.pk] = per
    return claims


def _free(gpus: dict[int, GPU], claims: dict[int, dict[int, float]], freed: dict[int, float]) -> dict[int, int]:
    free = {}
    for index, g in gpus.items():
        claimed = sum(c.get(index, 0) for c in claims.values()) - freed.get(index, 0)
        by_portal = (g.memory_total_mib or 0) - claimed
        by_smi = (g.memory_free_mib or 0) + freed.get(index, 0)
        free[index] = int(max(0, min(by_smi, by_portal)))
    return free


def _free_text(gpus: dict[int, GPU], claims: dict[int, dict[int, float]], freed: dict[int, float]) -> Message:
    free = ", ".join(f"GPU {i} {mib} MiB" for i, mib in sorted(_free(gpus, claims, freed).items()))
    return Message.verbatim(free) if free else Message(gettext_noop("no GPU"))


def _fit(
    d: Deployment,
    arch: fit.Architecture,
    host: Host,
    gpus: dict[int, GPU],
    claims: dict[int, dict[int, float]],
    freed: dict[int, float],
) -> list[int] | None:
    """The GPUs (as many as the deployment uses, most free first) it fits on, or None."""
    want = len(d.gpu_indices)
    free = _free(gpus, claims, freed)
    if want == 0 or len(free) < want:
        return [] if want == 0 else None
    chosen = sorted(free, key=lambda i: (-free[i], i))[:want]
    impl = backends.get(d.backend)
    request = fit.FitRequest(
        arch=arch,
        backend=d.backend,
        gpus=[fit.GPUMemory(i, gpus[i].memory_total_mib or 0, free[i]) for i in sorted(chosen)],
        **impl.fit_params(d.options, d.model_path),
        **calibration.correction_for(host, d.backend),
    )
    return sorted(chosen) if fit.estimate(request).fits else None


def _idle_since(d: Deployment) -> float:
    """Epoch seconds since which the deployment has had no request (its last request, else its
    start), and at least since Redis started: a restart without its data forgot the last request,
    so a model used a moment before it is not stopped as if idle since its start."""
    last = activity.last_request(d.pk) or 0.0
    started = d.cold_starts.filter(state=ColdStartState.READY).values_list("finished", flat=True).first()
    run = d.runs.filter(stopped__isnull=True).values_list("started", flat=True).first()
    known = [t.timestamp() for t in (started, run) if t is not None]
    if (redis_started := activity.redis_started()) is not None:
        known.append(redis_started)
    return max([last, *known]) if (last or known) else 0.0


def _evictable(host: Host, *, exclude: int) -> list[Deployment]:
    """Idle on-demand deployments of the host, in eviction order (see the module's docstring)."""
    now = time.time()
    grace = float(settings.HOSTS_ONDEMAND_EVICT_IDLE_SECONDS)
    found = []
    for other in Deployment.objects.filter(host=host, on_demand=True, status=DeploymentStatus.RUNNING).exclude(
        pk=exclude
    ):
        if other.jobs.active().exists() or activity.in_flight(other.pk) != 0:
            continue
        idle_since = _idle_since(other)
        if now - idle_since < grace:
            continue
        found.append((idle_since, estimate_seconds(other.pk), other.name, other))
    found.sort(key=lambda t: t[:3])
    return [t[3] for t in found]


def _busy_or_pinned(host: Host, exclude: int) -> list[int]:
    ids = set(
        Deployment.objects.filter(host=host, status__in=CLAIMING).exclude(pk=exclude).values_list("pk", flat=True)
    )
    return sorted(ids - {v.pk for v in _evictable(host, exclude=exclude)})


def evict(d: Deployment, why: Message) -> bool:
    """Stop an idle on-demand deployment now (a stop job, run here: a stop is seconds), once it
    is out of routing with nothing in flight (`take_out`)."""
    job = take_out(d, why)
    if job is None:
        return False
    jobs.run_job(job.pk)  # takes it from this process's hold
    job.refresh_from_db()
    if job.state != JobState.STOPPED:
        return False
    Deployment.objects.filter(pk=d.pk).update(**why.columns("status_message", 500))  # the reason on its page
    return True


# --- the idle sweep ---------------------------------------------------------------------------------
def sweep_idle(now: float | None = None) -> list[str]:
    """Beat: stop every on-demand deployment idle past its TTL with nothing in flight; settle the
    stops whose process died half-way (`settle_take_outs`); move on cold starts whose deployment
    settled, and send again the placements the broker did not take. Returns the names it stopped."""
    now = now or time.time()
    stopped = settle_take_outs() + _send_unclaimed_stops()
    _resend_placements()
    for cold in ColdStart.objects.active().filter(state=ColdStartState.LAUNCHING):
        observe(cold.pk)
    for d in Deployment.objects.filter(on_demand=True, status=DeploymentStatus.RUNNING):
        if d.jobs.active().exists() or ColdStart.objects.active().filter(deployment=d).exists():
            continue
        if now - _idle_since(d) < d.idle_ttl or activity.in_flight(d.pk) != 0:
            continue
        idle = Message(gettext_noop("Idle for %(seconds)s s: stopping (on demand)."), seconds=d.idle_ttl)
        job = take_out(d, idle)
        if job is None or not jobs.hand_over(job):
            continue
        jobs.send(job)  # a worker stops it; no request can reach it meanwhile
        stopped.append(d.name)
    return stopped


# --- stopping with no request under it --------------------------------------------------------------
def take_out(d: Deployment, why: Message) -> LaunchJob | None:
    """Take an idle on-demand deployment out of routing before it is stopped, so that a request
    never reaches a server being killed: it is served to its end, or it waits for a new start.

    1. In one commit: its STOP job (not run yet, held by this process: `jobs.TAKE_OUT`; no other
       job may start meanwhile), its status `stopping` with `why` (a request from now on opens a
       cold start, whose placement waits for the stop and starts the model again) and its channel
       disabled.
    2. The gateway's routes generation is bumped in Redis (`activity.bump_routes`): every
       replica's next admission on an older snapshot is Stale and resolves the model again, now
       cold.
    3. What is in flight is read again. The gateway's admission script counts a request to an
       on-demand model in the same step as it checks the generations (`gateway.ondemand.busy`),
       so a request admitted on the older snapshot is counted by now, and one admitted later was
       never routed here (a request now waiting for its cold start counts too).

    Returns the STOP job, still held by this process: the caller runs it here (`jobs.run_job`) or
    hands it on (`jobs.hand_over`, then `jobs.send`). Returns None, having put everything back (the
    job ends unrun) and logged why, when the deployment must not be stopped this round: something
    in flight, or Redis could not be told or read (a stop is never made on a guess). Called
    outside a transaction: step 1 must be committed before step 2. When this process dies before
    the job is run or handed on, `settle_take_outs` finishes steps 2 and 3 for it."""
    channel_id = d.channel_id
    with transaction.atomic():
        try:
            job = jobs.request_job(d, JobAction.STOP, hold=jobs.TAKE_OUT)
        except jobs.JobConflict:
            return None
        if not set_status(d, DeploymentStatus.STOPPING, why, expect=DeploymentStatus.RUNNING):
            transaction.set_rollback(True)  # stopped or failed meanwhile: not ours to stop
            return None
        routed = channel_id is not None and _route(channel_id, enabled=False)
    return _stop_or_put_back(d, job, routed)


def _stop_or_put_back(d: Deployment, job: LaunchJob, routed: bool) -> LaunchJob | None:
    """Steps 2 and 3 of `take_out`, for the process holding the job: the job to run, or None with
    the deployment put back (running, its channel routed again when `routed`)."""
    if not activity.bump_routes():
        kept = Message(gettext_noop("Not stopped: the gateway could not be told to stop routing to it."))
    elif (count := activity.in_flight(d.pk)) != 0:
        kept = Message(gettext_noop("Not stopped: a request reached it as it was taken out of routing."))
        if count is None:
            kept = Message(gettext_noop("Not stopped: its requests in flight could not be read."))
    else:
        return job
    with transaction.atomic():
        # Guarded: a sweep that took the job from a holder it thought dead puts back (or stops) instead.
        if not jobs.change_state(job, JobState.FAILED, kept, guard=True):
            return None
        if routed and d.channel_id is not None:
            _route(d.channel_id, enabled=True)
        set_status(d, DeploymentStatus.RUNNING, kept, expect=DeploymentStatus.STOPPING)
    logger.info("on-demand deployment %s kept running: %s", d.name, kept.english)
    return None


def settle_take_outs(deployment: Deployment | None = None) -> list[str]:
    """Finish the take-outs (`take_out`) whose process died after step 1 (a worker killed, a
    gateway replica restarted; `jobs.abandoned`: a dead process of this host at once, one of
    another host once its heartbeat is HOSTS_STALE_JOB_SECONDS old), of `deployment` or of all.
    Left alone, the deployment would stay `stopping` with its channel disabled, and every request
    for it wait for a stop that no worker runs, until the job sweep failed the job after
    HOSTS_QUEUED_JOB_SECONDS.

    The take-out goes on where it may have stopped: steps 2 and 3 again (bumping the generation
    twice is harmless), under this process's hold (`jobs.take_hold`: of two sweeps, one settles).
    Its server was never touched (the job was not run), and until step 3 says so nothing routes to
    it, so both ends are safe: with nothing in flight the stop is handed to a worker, as the sweep
    meant; with a request in flight, or one waiting for the model (it counts too: it opened a cold
    start, whose placement calls this), the deployment is put back, running and routed again, and
    the waiting request is served by the server that never stopped, with no new start. Its channel
    is routed again whatever it was before step 1: a running on-demand deployment is routed (a
    dead process cannot say otherwise). Runs from the idle sweep (beat), at a worker's start and
    in the placement of a cold start that waits for the stop. Returns the names it stopped."""
    stopped = []
    for job in jobs.abandoned(jobs.TAKE_OUT, deployment):
        d = job.deployment
        if not jobs.take_hold(job, jobs.TAKE_OUT):
            continue  # another sweep settles it
        if d.status != DeploymentStatus.STOPPING:  # moved on meanwhile: not ours; the job sweep fails it unrun
            jobs.hand_over(job)
            continue
        logger.warning("on-demand deployment %s: its take-out's process died; settling it", d.name)
        kept = _stop_or_put_back(d, job, routed=True)
        if kept is not None and jobs.hand_over(kept):
            jobs.send(kept)
            stopped.append(d.name)
    return stopped


def _send_unclaimed_stops() -> list[str]:
    """Send again the stop of a taken-out deployment that was handed to the queue (`jobs.hand_over`)
    and that no worker claimed within HOSTS_STALE_JOB_SECONDS: the sweep that handed it on died
    before it sent it, or the message was lost. Otherwise the deployment would stay `stopping`, out
    of routing, until the job sweep failed the job after HOSTS_QUEUED_JOB_SECONDS. Returns their names."""
    unclaimed = LaunchJob.objects.active().filter(
        action=JobAction.STOP,
        state=JobState.QUEUED,
        worker="",
        attempts=0,
        heartbeat__lt=jobs.stale_cutoff(),
        deployment__on_demand=True,
        deployment__status=DeploymentStatus.STOPPING,
    )
    sent = []
    for job in unclaimed.select_related("deployment"):
        if jobs.send_again(job):
            logger.warning(
                "on-demand deployment %s: its stop was not taken by a worker; sent again", job.deployment.name
            )
            sent.append(job.deployment.name)
    return sent


def _route(channel_id: int, *, enabled: bool) -> bool:
    """Route to the channel again, or not; whether it changed. Saved, not updated: the gateway
    drops its cached routes on the signal."""
    channel = Channel.objects.filter(pk=channel_id, enabled=not enabled).first()
    if channel is None:
        return False
    channel.enabled = enabled
    channel.save(update_fields=["enabled", "updated"])
    return True


# --- what the admin sees ----------------------------------------------------------------------------
def overview(d: Deployment) -> dict[str, Any]:
    """The on-demand section of a deployment's page: state, where it last ran, cold-start
    p50/p95, starts and evictions per day (last 7 days), the last placements and their reasons."""
    since = timezone.now() - datetime.timedelta(days=7)
    starts = list(d.cold_starts.filter(created__gte=since).order_by("created"))
    seconds = [c.seconds for c in starts if c.seconds is not None]
    evictions = [
        c.created
        for c in ColdStart.objects.filter(created__gte=since).exclude(evicted=[])
        if any(e.get("name") == d.name for e in c.evicted)
    ]
    per_day: dict[str, dict[str, int]] = {}
    for c in starts:
        per_day.setdefault(c.created.date().isoformat(), {"starts": 0, "evictions": 0})["starts"] += 1
    for at in evictions:
        per_day.setdefault(at.date().isoformat(), {"starts": 0, "evictions": 0})["evictions"] += 1
    if d.status == DeploymentStatus.RUNNING:
        state = "warm"
    elif d.cold_starts.active().exists():
        state = "starting"
    else:
        state = "cold"
    last = d.cold_starts.exclude(host_name="").first()
    return {
        "state": state,
        "last_host": last.host_name if last else d.host.name,
        "p50": quantile(seconds, 0.5) if seconds else None,
        "p95": quantile(seconds, 0.95) if seconds else None,
        "per_day": sorted(per_day.items(), reverse=True),
        "recent": list(d.cold_starts.all()[:10]),
        "in_flight": activity.in_flight(d.pk),
    }
