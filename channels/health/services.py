"""One probe round: gather evidence, probe what needs probing, move statuses, tell people.

Called by the Celery tasks, `check_channels --once`, the API and the "Check now" button alike.
The network part runs in one asyncio event loop (`probe.probe_many`); the database part is a
handful of queries per channel, and every status move is a compare-and-set
(`filter(pk=, status=old).update(...)`) so two overlapping rounds can never both move a channel.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone
from django.utils.translation import gettext_noop

from channels.choices import ChannelStatus, ModelKind, ProbeSource
from channels.models import Channel, ModelRoute, ProbeResult, StatusChange
from channels.signals import routes_changed
from portal.i18n import Message, set_message, stored

from . import passive
from .probe import SELF_HOSTED_KINDS, Outcome, Target, list_served_models, only_listed_names, probe_many, run_loop
from .status import Evidence, Rules, decide

logger = logging.getLogger(__name__)

DISCOVERY_REFRESH = dt.timedelta(hours=1)


@dataclass
class ChannelRound:
    """What one round did for one channel (for the command's table and the Check now button)."""

    channel: Channel
    result: ProbeResult | None  # the active probe, None when skipped
    passive: ProbeResult | None
    old_status: str
    new_status: str
    message: Message
    discovered: bool = False  # a route's discovered context window changed

    @property
    def changed(self) -> bool:
        return self.old_status != self.new_status


def rules() -> Rules:
    return Rules(
        down_after=settings.PORTAL_HEALTH_DOWN_AFTER,
        up_after=settings.PORTAL_HEALTH_UP_AFTER,
        down_ratio=settings.PORTAL_HEALTH_DOWN_RATIO,
        down_min_samples=settings.PORTAL_HEALTH_DOWN_MIN_SAMPLES,
        degraded_ratio=settings.PORTAL_HEALTH_DEGRADED_RATIO,
        degraded_min_samples=settings.PORTAL_HEALTH_DEGRADED_MIN_SAMPLES,
    )


def target_for(channel: Channel, *, force: bool = False) -> Target:
    # Served routes first: the latency probe asks for the first, and a route the server does not
    # serve fails on its own account, not the channel's.
    routes = sorted((r for r in channel.routes.all() if r.enabled), key=lambda r: r.upstream_unlisted)
    stale = timezone.now() - DISCOVERY_REFRESH
    discover = (
        force
        or not routes
        or channel.status != ChannelStatus.HEALTHY
        or any(r.discovered_at is None or r.discovered_at < stale for r in routes)
    )
    return Target(
        channel_id=channel.pk,
        kind=channel.kind,
        base_url=channel.base_url,
        api_key=channel.api_key or "",
        model=routes[0].upstream_id if routes else "",
        embedding=bool(routes) and routes[0].model.kind == ModelKind.EMBEDDING,
        others=tuple(r.upstream_id for r in routes[1:]),
        inference=channel.probe_inference,
        max_tokens=channel.probe_max_tokens,
        discover=discover,
    )


def run_probes(targets: list[Target]) -> list[Outcome]:
    """The network half of a round, on a fresh event loop (Celery tasks and views are sync)."""
    if not targets:
        return []
    return run_loop(
        probe_many(
            targets,
            concurrency=settings.PORTAL_PROBE_CONCURRENCY,
            connect_timeout=settings.PORTAL_PROBE_CONNECT_TIMEOUT,
            timeout=settings.PORTAL_PROBE_TIMEOUT,
        )
    )


def run_round(channel_ids: list[int] | None = None, *, force: bool = False) -> list[ChannelRound]:
    """Probe enabled channels (all, or `channel_ids`) and update their status.

    Without `force`, channels whose credentials were rejected are left alone, and a healthy channel
    that the gateway just used successfully is not probed (its traffic is the evidence), unless
    its last real probe is older than PORTAL_HEALTH_MAX_SKIP_SECONDS.
    """
    now = timezone.now()
    # Gateway evidence is consumed by full rounds only: a one-channel check must not swallow the
    # other channels' share.
    tallies = passive.collect() if channel_ids is None else {}
    qs = Channel.objects.enabled().prefetch_related("routes__model")
    if channel_ids is not None:
        qs = qs.filter(pk__in=channel_ids)
    if not force:
        qs = qs.exclude(status=ChannelStatus.CREDENTIALS_REJECTED)
    channels = list(qs)
    skip_min = settings.PORTAL_HEALTH_PASSIVE_SKIP_MIN
    max_skip = dt.timedelta(seconds=settings.PORTAL_HEALTH_MAX_SKIP_SECONDS)

    targets: list[Target] = []
    for ch in channels:
        t = tallies.get(ch.pk)
        busy_and_fine = (
            t is not None
            and t.ok_count >= skip_min
            and t.fail_count == 0
            and ch.status == ChannelStatus.HEALTHY
            and ch.last_active_probe is not None
            and now - ch.last_active_probe < max_skip
        )
        if force or not busy_and_fine:
            targets.append(target_for(ch, force=force))
    t0 = time.perf_counter()
    outcomes = {o.channel_id: o for o in run_probes(targets)}
    t1 = time.perf_counter()

    window_start = timezone.now() - dt.timedelta(seconds=settings.PORTAL_HEALTH_WINDOW_SECONDS)
    window = {
        row["channel_id"]: (row["n"] or 0, row["f"] or 0)
        for row in ProbeResult.objects.filter(channel_id__in=[c.pk for c in channels], created__gte=window_start)
        .values("channel_id")
        .annotate(n=Sum("samples"), f=Sum("failures"))
    }
    r = rules()
    pending = [_evidence(ch, tallies.get(ch.pk), outcomes.get(ch.pk)) for ch in channels]
    pending = [p for p in pending if p.pieces]
    counters = _advance_counters(pending)
    done = _settle(pending, counters, window, r, force)
    if any(d.changed or d.discovered for d in done):
        _tell_gateway()
    from .alerts import notify_pending

    t2 = time.perf_counter()
    notify_pending([d.channel.pk for d in done])
    logger.info(
        "probe round: %d channels, %d probed in %.2f s, settled in %.2f s, alerts in %.2f s",
        len(done),
        len(targets),
        t1 - t0,
        t2 - t1,
        time.perf_counter() - t2,
    )
    return done


@dataclass
class _Pending:
    channel: Channel
    outcome: Outcome | None
    tally: passive.Tally | None
    passive_row: ProbeResult | None
    active_row: ProbeResult | None
    # "good", "fail", or neither: "slow" (answered over the TTFT threshold), "mixed" (some gateway failures)
    pieces: tuple[str, ...]


def _evidence(ch: Channel, tally: passive.Tally | None, outcome: Outcome | None) -> _Pending:
    now = timezone.now()
    pieces: list[str] = []
    passive_row = active_row = None
    if tally is not None and tally.samples:
        passive_row = ProbeResult(
            channel=ch,
            created=now,
            source=ProbeSource.PASSIVE,
            ok=tally.fail_count == 0,
            samples=tally.samples,
            failures=tally.fail_count,
            http_status=tally.last_status,
            error=tally.last_error[:32] if tally.fail_count else "",
            ttft_ms=tally.ttft_ms,
        )
        if tally.fail_count:
            failed = Message(
                gettext_noop("%(failed)s of %(samples)s gateway requests failed"),
                failed=tally.fail_count,
                samples=tally.samples,
            )
            set_message(passive_row, "error_message", failed)
        # Mostly failing counts as a failure; some failures reset the success streak (like a slow answer).
        pieces.append("fail" if tally.fail_count > tally.ok_count else "mixed" if tally.fail_count else "good")
    if outcome is not None:
        active_row = ProbeResult(
            channel=ch,
            created=dt.datetime.fromtimestamp(outcome.started, tz=dt.UTC),
            source=ProbeSource.ACTIVE,
            ok=outcome.ok,
            samples=1,
            failures=0 if outcome.ok else 1,
            http_status=outcome.http_status,
            error=outcome.error,
            model=outcome.model[:256],
            connect_ms=outcome.connect_ms,
            ttfb_ms=outcome.ttfb_ms,
            ttft_ms=outcome.ttft_ms,
            total_ms=outcome.total_ms,
            tokens=outcome.tokens,
            tokens_per_s=outcome.tokens_per_s,
        )
        set_message(active_row, "error_message", outcome.error_message)
        slow = outcome.ttft_ms is not None and outcome.ttft_ms > ch.ttft_degraded_ms
        pieces.append("fail" if not outcome.ok else "slow" if slow else "good")
    return _Pending(ch, outcome, tally, passive_row, active_row, tuple(pieces))


def _counter_update(pieces: tuple[str, ...]) -> dict[str, Any]:
    """The counter change a round's evidence makes, as F() expressions (never read-modify-write).

    A slow answer (or traffic with some failures) is neither good nor failed: it resets both, so
    such a channel has to answer well M times in a row before it counts as healthy again.
    """
    last = pieces[-1]
    trailing = 0
    for p in reversed(pieces):
        if p != last:
            break
        trailing += 1
    if last in ("slow", "mixed"):
        return {"consecutive_successes": 0, "consecutive_failures": 0}
    good = last == "good"
    counter, other = (
        ("consecutive_successes", "consecutive_failures") if good else ("consecutive_failures", "consecutive_successes")
    )
    if trailing == len(pieces):
        return {counter: F(counter) + trailing, other: 0}
    return {counter: trailing, other: 0}


def _advance_counters(pending: list[_Pending]) -> dict[int, tuple[int, int]]:
    """One UPDATE per distinct evidence pattern (a handful), then one SELECT: (failures, successes)."""
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for p in pending:
        groups[p.pieces].append(p.channel.pk)
    for pieces, ids in groups.items():
        for chunk in _chunks(ids):
            Channel.objects.filter(pk__in=chunk).update(**_counter_update(pieces))
    out: dict[int, tuple[int, int]] = {}
    for chunk in _chunks([p.channel.pk for p in pending]):
        for pk, cf, cs in Channel.objects.filter(pk__in=chunk).values_list(
            "pk", "consecutive_failures", "consecutive_successes"
        ):
            out[pk] = (cf, cs)
    return out


def _chunks(items: list[int], size: int = 500) -> Iterator[list[int]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _settle(
    pending: list[_Pending],
    counters: dict[int, tuple[int, int]],
    window: dict[int, tuple[int, int]],
    r: Rules,
    force: bool,
) -> list[ChannelRound]:
    """Decide every channel's status, then write everything in a few batched statements.

    A status move is a per-channel compare-and-set; the telemetry of channels whose status and
    message stay the same goes out in one bulk UPDATE (it never touches `status`).
    """
    now = timezone.now()
    rows: list[ProbeResult] = []
    moves: list[StatusChange] = []
    quiet: list[Channel] = []
    done: list[ChannelRound] = []
    discovered_routes: list[ModelRoute] = []
    for p in pending:
        ch, outcome, tally = p.channel, p.outcome, p.tally
        cf, cs = counters.get(ch.pk, (0, 0))
        mine = [x for x in (p.passive_row, p.active_row) if x is not None]
        samples = window.get(ch.pk, (0, 0))[0] + sum(x.samples for x in mine)
        failures = window.get(ch.pk, (0, 0))[1] + sum(x.failures for x in mine)
        last = p.active_row or p.passive_row
        assert last is not None  # a channel with evidence (`pieces`) has at least one row
        ttft: float | None
        auth = (outcome is not None and outcome.auth_rejected) or (
            outcome is None and tally is not None and tally.auth_failures > 0 and tally.ok_count == 0
        )
        if p.active_row is not None and p.active_row.ttft_ms is not None:
            ttft = p.active_row.ttft_ms
        else:
            ttft = last.ttft_ms if last.ok else None
        current = ch.status
        if force and current == ChannelStatus.CREDENTIALS_REJECTED and outcome is not None and outcome.ok:
            current = ChannelStatus.UNKNOWN  # an admin checked by hand and the key works again
        new, decided = decide(
            Evidence(
                current=current,
                consecutive_failures=cf,
                consecutive_successes=cs,
                window_samples=samples,
                window_failures=failures,
                last_ok=last.ok,
                last_error=last.error,
                last_error_message=stored(last, "error_message") if last.error_message else None,
                last_ttft_ms=ttft,
                ttft_threshold_ms=ch.ttft_degraded_ms,
                auth_rejected=auth,
            ),
            r,
        )
        text = decided if decided is not None else stored(ch, "status_message")
        columns = text.columns("status_message", 300)
        message = str(columns["status_message"])
        for row in mine:
            row.status_after = new
        rows.extend(mine)

        old = ch.status
        ch.last_checked = now
        if ttft is not None:
            ch.last_ttft_ms = ttft
        if outcome is not None:
            ch.last_active_probe = now
        if new == old and all(getattr(ch, k) == v for k, v in columns.items()):
            quiet.append(ch)
        else:
            fields = {
                **columns,
                "last_checked": now,
                "last_ttft_ms": ch.last_ttft_ms,
                "last_active_probe": ch.last_active_probe,
            }
            if new != old:
                fields.update(status=new, status_changed=now)
            moved = Channel.objects.filter(pk=ch.pk, status=old).update(**fields)
            if moved and new != old:
                moves.append(
                    StatusChange(
                        channel=ch, created=now, from_status=old, to_status=new, **text.columns("message", 300)
                    )
                )
                logger.info("channel %s: %s → %s (%s)", ch.name, old, new, message)
            elif not moved:
                new = Channel.objects.filter(pk=ch.pk).values_list("status", flat=True).first() or old
                logger.info("channel %s: status moved by someone else meanwhile; left as %s", ch.name, new)
        discovered = bool(
            outcome is not None and outcome.served and _discover(ch, outcome.served, now, discovered_routes)
        )
        ch.status = new
        set_message(ch, "status_message", text)
        done.append(ChannelRound(ch, p.active_row, p.passive_row, old, new, text, discovered))

    _insert_for_live_channels(rows, moves)
    Channel.objects.bulk_update(quiet, ["last_checked", "last_ttft_ms", "last_active_probe"], batch_size=500)
    ModelRoute.objects.bulk_update(
        discovered_routes, ["discovered_context_window", "discovered_at", "unlisted_upstream_id"], batch_size=500
    )
    return done


def _insert_for_live_channels(rows: list[ProbeResult], moves: list[StatusChange]) -> None:
    """Insert the round's rows, leaving out channels an admin deleted while we were probing."""
    for _attempt in range(2):
        live = set(Channel.objects.filter(pk__in={r.channel_id for r in rows}).values_list("pk", flat=True))
        try:
            with transaction.atomic():
                ProbeResult.objects.bulk_create([r for r in rows if r.channel_id in live], batch_size=500)
                StatusChange.objects.bulk_create([m for m in moves if m.channel_id in live], batch_size=500)
            return
        except IntegrityError:
            logger.info("a channel was deleted during the probe round; retrying without it")


def _discover(ch: Channel, served: dict[str, int | None], now: dt.datetime, out: list[ModelRoute]) -> bool:
    """Queue the context window each served model reports for the matching routes, and mark the
    routes whose id the server does not serve; True if a window changed. Which names a server
    answers is `probe.only_listed_names`: a server that answers any name with its one model gives
    that window to every route (an admin's `llama-server -m model.gguf` lists the file's path while
    the route asks for `qwen-7b`), and only a server that answers listed names can leave a route
    unserved."""
    changed = False
    checked = only_listed_names(ch.kind, served)
    one_model = len(served) == 1 and ch.kind in SELF_HOSTED_KINDS and not checked
    sole = next(iter(served.values())) if one_model else None
    for route in ch.routes.all():
        unlisted = route.upstream_id if checked and route.upstream_id not in served else ""
        ctx = served.get(route.upstream_id, sole)
        stale = route.discovered_at is None or now - route.discovered_at > DISCOVERY_REFRESH
        if ctx is not None and (route.discovered_context_window != ctx or stale):
            changed |= route.discovered_context_window != ctx
            route.discovered_context_window, route.discovered_at = ctx, now
            route.unlisted_upstream_id = unlisted
            out.append(route)
        elif route.unlisted_upstream_id != unlisted:
            route.unlisted_upstream_id = unlisted
            out.append(route)
    return changed


def _tell_gateway() -> None:
    """Status and limits are written with `update()` (compare-and-set, no model signals), so say so
    ourselves: the gateway bumps its route-cache generation and every process re-reads routes."""
    routes_changed.send(sender=Channel)


def check_channel(channel_id: int) -> ChannelRound | None:
    """Probe one channel now, whatever its status (the "Check now" button, the API, launch jobs)."""
    done = run_round([channel_id], force=True)
    return done[0] if done else None


def served_models(channel: Channel) -> dict[str, int | None]:
    """The models `channel`'s upstream lists now, with their served context windows (for "Add
    models from this channel"). Raises probe.ProbeFailure with a message for the admin."""
    target = Target(channel_id=channel.pk, kind=channel.kind, base_url=channel.base_url, api_key=channel.api_key or "")
    return run_loop(
        list_served_models(
            target, connect_timeout=settings.PORTAL_PROBE_CONNECT_TIMEOUT, timeout=settings.PORTAL_PROBE_TIMEOUT
        )
    )
