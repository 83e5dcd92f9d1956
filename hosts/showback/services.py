"""GPU-hours showback: how long each deployment held its GPUs (its runs), attributed to teams and
developers by their share of the tokens sent through its channel while it ran.

Runs are recorded by the launch jobs (`record_status`, called wherever a job moves a deployment's
status); the token shares come from the app that records usage, through `portal.showback`
(hosts and keys are independent siblings). GPU-hours no one sent tokens for are "idle".
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from channels.prices import NANOS
from portal.showback import spend, token_shares

from ..choices import IDLE_DEPLOYMENT_STATUSES, DeploymentStatus
from ..models import GPU, Deployment, DeploymentRun, GPUTypeCost, Host

IDLE = "(idle)"


def gpu_count(deployment: Deployment) -> int:
    """GPUs the deployment holds: its GPU indices on its host and on each worker node."""
    nodes = 1 + (deployment.worker_hosts.count() if deployment.pk else 0)
    return len(deployment.gpu_indices or []) * nodes


def record_status(deployment: Deployment, now: dt.datetime | None = None) -> None:
    """Open a run when `deployment` is running and none is open; close the open one when it is
    stopped or failed. Starting and stopping keep an open run open: a launch of a running
    deployment passes through "starting" while its server keeps serving, and a server being
    stopped still holds its GPUs. Safe to call twice (one open run per deployment, a named
    constraint)."""
    now = now or timezone.now()
    open_runs = DeploymentRun.objects.filter(deployment=deployment, stopped__isnull=True)
    if deployment.status in IDLE_DEPLOYMENT_STATUSES:
        open_runs.update(stopped=now, updated=now)
        return
    if deployment.status != DeploymentStatus.RUNNING or open_runs.exists():
        return
    try:
        with transaction.atomic():
            DeploymentRun.objects.create(
                deployment=deployment,
                deployment_name=deployment.name,
                host_name=deployment.host.name,
                gpus=gpu_count(deployment),
                channel_id=deployment.channel_id,
                started=now,
            )
    except IntegrityError:  # another job opened it meanwhile
        pass


class GPUCosts:
    """What one GPU costs per hour, per host: the host's own cost, else by its GPUs' types
    (`GPUTypeCost`; GPUs of mixed types cost their mean). Loaded once, in three queries."""

    def __init__(self) -> None:
        self.by_type = dict(GPUTypeCost.objects.values_list("gpu_name", "hour_cost"))
        self.own = dict(Host.objects.values_list("name", "gpu_hour_cost"))
        self.gpus: dict[str, dict[int, str]] = defaultdict(dict)
        for host_name, index, gpu_name in GPU.objects.values_list("host__name", "index", "name"):
            self.gpus[host_name][index] = gpu_name

    def of(self, host_name: str, indices: list[int] | None = None) -> Decimal | None:
        """The cost of one GPU-hour on `host_name` (of the GPUs at `indices`, else all of its GPUs);
        None when it has no cost of its own and one of those GPUs' types has none."""
        own = self.own.get(host_name)
        if own is not None:
            return own
        gpus = self.gpus.get(host_name, {})
        found = [self.by_type.get(gpus.get(i, "")) for i in (indices or sorted(gpus))]
        costs = [c for c in found if c is not None]
        if not found or len(costs) < len(found):
            return None
        return sum(costs, Decimal(0)) / len(costs)


def gpu_types() -> list[tuple[str, Decimal | None]]:
    """Every GPU type the inventories saw or a cost was set for, with its cost per GPU-hour."""
    costs: dict[str, Decimal | None] = dict.fromkeys(GPU.objects.values_list("name", flat=True).distinct())
    costs.update(GPUTypeCost.objects.values_list("gpu_name", "hour_cost"))
    return sorted(costs.items())


def set_gpu_type_cost(gpu_name: str, hour_cost: Decimal | None) -> None:
    """Set (or, with None, clear) what one GPU of this type costs per hour."""
    if hour_cost is None:
        for row in GPUTypeCost.objects.filter(gpu_name=gpu_name):
            row.delete()  # one by one: the audit log records each
        return
    GPUTypeCost.objects.update_or_create(gpu_name=gpu_name, defaults={"hour_cost": hour_cost})


def month_bounds(month: dt.date) -> tuple[dt.datetime, dt.datetime]:
    """[first instant, first instant of the next month) in UTC."""
    first = dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC)
    following = (first + dt.timedelta(days=32)).replace(day=1)
    return first, following


@dataclass
class DeploymentHours:
    name: str
    host: str
    gpus: int
    hours: float = 0.0  # hours running in the month
    gpu_hours: float = 0.0


@dataclass
class Showback:
    month: dt.date
    since: dt.datetime
    until: dt.datetime
    deployments: list[DeploymentHours] = field(default_factory=list)
    # (team or None, user or None, GPU-hours, tokens); the idle row has user IDLE
    people: list[tuple[str | None, str | None, float, int]] = field(default_factory=list)
    teams: list[tuple[str | None, float, int]] = field(default_factory=list)
    # (team, user) -> GPU cost (the host's cost per GPU-hour * the person's GPU-hours on it) and
    # priced spend on every route, both in nano-units of PORTAL_CURRENCY
    gpu_cost: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    spend: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    unpriced_hosts: set[str] = field(default_factory=set)  # ran this month without a cost per GPU-hour

    @property
    def money(self) -> list[tuple[str | None, str | None, int, int]]:
        """(team, user, GPU cost, spend) per person, largest first."""
        people = set(self.gpu_cost) | set(self.spend)
        rows = [(t, u, self.gpu_cost.get((t, u), 0), self.spend.get((t, u), 0)) for t, u in people]
        return sorted(rows, key=lambda r: (-(r[2] + r[3]), r[0] or "", r[1] or ""))

    @property
    def total_gpu_hours(self) -> float:
        return sum(d.gpu_hours for d in self.deployments)


def monthly(month: dt.date, now: dt.datetime | None = None) -> Showback:
    """The showback of the calendar month (UTC) holding `month`: GPU-hours per deployment, and
    per developer and team by their token share on the deployment's channel during each run."""
    now = now or timezone.now()
    since, until = month_bounds(month)
    report = Showback(month=since.date(), since=since, until=until)
    runs = DeploymentRun.objects.filter(started__lt=until).filter(Q(stopped__isnull=True) | Q(stopped__gt=since))
    per_deployment: dict[str, DeploymentHours] = {}
    costs = GPUCosts()
    gpu_cost: dict[tuple[str | None, str | None], float] = defaultdict(float)
    people: dict[tuple[str | None, str | None], list[float]] = defaultdict(lambda: [0.0, 0])
    spans = [
        (run, max(run.started, since), min(run.stopped or now, until))
        for run in runs.select_related("deployment").order_by("started")
    ]
    spans = [(run, start, end) for run, start, end in spans if start < end]
    with_channel = [(run.channel_id, start, end) for run, start, end in spans if run.channel_id]
    read = iter(token_shares(with_channel))  # one query for the month's runs
    for run, start, end in spans:
        hours = (end - start).total_seconds() / 3600
        gpu_hours = hours * run.gpus
        row = per_deployment.setdefault(run.deployment_name, DeploymentHours(run.deployment_name, run.host_name, 0))
        row.gpus = max(row.gpus, run.gpus)
        row.hours += hours
        row.gpu_hours += gpu_hours
        shares = [s for s in next(read) if s.tokens > 0] if run.channel_id else []
        total = sum(s.tokens for s in shares)
        rate = costs.of(run.host_name, run.deployment.gpu_indices if run.deployment else None)
        if rate is None:
            report.unpriced_hosts.add(run.host_name)
        per_hour = float(rate or 0) * NANOS
        if not total:
            people[(None, IDLE)][0] += gpu_hours
            gpu_cost[(None, IDLE)] += gpu_hours * per_hour
            continue
        for s in shares:
            bucket = people[(s.team, s.user)]
            bucket[0] += gpu_hours * s.tokens / total
            bucket[1] += s.tokens
            gpu_cost[(s.team, s.user)] += gpu_hours * s.tokens / total * per_hour
    report.deployments = sorted(per_deployment.values(), key=lambda d: (-d.gpu_hours, d.name))
    report.gpu_cost = {k: round(v) for k, v in gpu_cost.items()}
    report.spend = spend(since, until)
    report.people = sorted(
        ((team, user, hours, int(tokens)) for (team, user), (hours, tokens) in people.items()),
        key=lambda r: (-r[2], r[0] or "", r[1] or ""),
    )
    teams: dict[str | None, list[float]] = defaultdict(lambda: [0.0, 0])
    for team, user, hours, tokens in report.people:
        key = team if user != IDLE else IDLE
        teams[key][0] += hours
        teams[key][1] += tokens
    report.teams = sorted(
        ((team, hours, int(tokens)) for team, (hours, tokens) in teams.items()), key=lambda r: (-r[1], r[0] or "")
    )
    return report


# --- prices of self-hosted models from their GPU-hours -------------------------------------------

PRICE_WINDOW_DAYS = 30


@dataclass
class DerivedPrice:
    """A local route's price per million tokens from its host's GPU-hour cost and the tokens its
    deployment served per GPU-hour while it ran (the showback's runs and token counts)."""

    deployment: str
    gpu_hour_cost: Decimal
    gpu_hours: float
    tokens: int
    per_million: Decimal | None  # None: nothing to derive from (no cost set, no runs or no tokens)
    reason: str = ""

    @property
    def tokens_per_gpu_hour(self) -> float:
        return self.tokens / self.gpu_hours if self.gpu_hours else 0.0


def derive_price(
    deployment: Deployment, *, days: int = PRICE_WINDOW_DAYS, now: dt.datetime | None = None
) -> DerivedPrice:
    """cost per GPU-hour * GPU-hours / tokens served, per million tokens, over the last `days`:
    what one token cost in GPU time at the deployment's measured throughput. Input and output
    tokens share the price (a GPU-hour serves both)."""
    now = now or timezone.now()
    since = now - dt.timedelta(days=days)
    cost = GPUCosts().of(deployment.host.name, deployment.gpu_indices)
    result = DerivedPrice(deployment.name, cost or Decimal(0), 0.0, 0, None)
    if cost is None:
        result.reason = f"host {deployment.host.name} has no cost per GPU-hour, nor its GPUs' type"
        return result
    runs = DeploymentRun.objects.filter(deployment=deployment, started__lt=now).filter(
        Q(stopped__isnull=True) | Q(stopped__gt=since)
    )
    windows = []
    for r in runs:
        start, end = max(r.started, since), min(r.stopped or now, now)
        if end <= start:
            continue
        result.gpu_hours += (end - start).total_seconds() / 3600 * r.gpus
        if r.channel_id:
            windows.append((r.channel_id, start, end))
    result.tokens = sum(s.tokens for shares in token_shares(windows) for s in shares)
    if not result.gpu_hours or not result.tokens:
        result.reason = f"no tokens served by {deployment.name} in the last {days} days to measure"
        return result
    per_million = cost * Decimal(str(result.gpu_hours)) * 1_000_000 / result.tokens
    result.per_million = per_million.quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    return result


def price_from_gpu_hours(deployment: Deployment, *, days: int = PRICE_WINDOW_DAYS) -> tuple[DerivedPrice, list[Any]]:
    """Set the derived price (a new price row from now) on every route of the deployment's channel."""
    from channels.choices import PriceSource
    from channels.models import ModelRoute
    from channels.services import set_route_price

    derived = derive_price(deployment, days=days)
    if derived.per_million is None or deployment.channel_id is None:
        return derived, []
    note = (
        f"{derived.gpu_hour_cost}/GPU-h × {derived.gpu_hours:.2f} GPU-h ÷ {derived.tokens} tokens "
        f"({derived.tokens_per_gpu_hour:.0f} tokens/GPU-h, last {days} days)"
    )
    prices = [
        set_route_price(
            route, input=derived.per_million, output=derived.per_million, source=PriceSource.GPU_HOURS, note=note
        )
        for route in ModelRoute.objects.filter(channel_id=deployment.channel_id)
    ]
    return derived, prices
