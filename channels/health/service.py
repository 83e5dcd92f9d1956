"""One probe round: gather evidence, probe what needs probing, move statuses, tell people.

Called by the Celery tasks, `check_channels --once`, the API and the "Check now" button alike.
The network part runs in one asyncio event loop (`probe.probe_many`); the database part is a
handful of queries per channel, and every status move is a compare-and-set
(`filter(pk=, status=old).update(...)`) so two overlapping rounds can never both move a channel.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.db.models import F, Sum
from django.utils import timezone

from channels.choices import ChannelStatus, ProbeSource
from channels.models import Channel, ModelRoute, ProbeResult, StatusChange

from . import passive
from .conf import setting
from .probe import Outcome, Target, probe_many, run_loop
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
    message: str
    discovered: bool = False  # a route's discovered context window changed

    @property
    def changed(self) -> bool:
        return self.old_status != self.new_status


def rules() -> Rules:
    return Rules(
        down_after=setting("PORTAL_HEALTH_DOWN_AFTER"),
        up_after=setting("PORTAL_HEALTH_UP_AFTER"),
        down_ratio=setting("PORTAL_HEALTH_DOWN_RATIO"),
        down_min_samples=setting("PORTAL_HEALTH_DOWN_MIN_SAMPLES"),
        degraded_ratio=setting("PORTAL_HEALTH_DEGRADED_RATIO"),
        degraded_min_samples=setting("PORTAL_HEALTH_DEGRADED_MIN_SAMPLES"),
    )


def target_for(channel: Channel) -> Target:
    routes = [r for r in channel.routes.all() if r.enabled]
    return Target(
        channel_id=channel.pk,
        kind=channel.kind,
        base_url=channel.base_url,
        api_key=channel.api_key or "",
        model=routes[0].upstream_id if routes else "",
        inference=channel.probe_inference,
        max_tokens=channel.probe_max_tokens,
    )


def run_probes(targets: list[Target]) -> list[Outcome]:
    """The network half of a round, on a fresh event loop (Celery tasks and views are sync)."""
    if not targets:
        return []
    return run_loop(
        probe_many(
            targets,
            concurrency=setting("PORTAL_PROBE_CONCURRENCY"),
            connect_timeout=setting("PORTAL_PROBE_CONNECT_TIMEOUT"),
            timeout=setting("PORTAL_PROBE_TIMEOUT"),
        )
    )


def run_round(channel_ids: list[int] | None = None, *, force: bool = False) -> list[ChannelRound]:
    """Probe enabled channels (all, or `channel_ids`) and update their status.

    Without `force`, channels whose credentials were rejected are left alone, and a healthy channel
    that the gateway just used successfully is not probed (its traffic is the evidence), unless
    its last real probe is older than PORTAL_HEALTH_MAX_SKIP_SECONDS.
    """
    now = timezone.now()
    tallies = passive.collect()
    qs = Channel.objects.filter(enabled=True).prefetch_related("routes__model")
    if channel_ids is not None:
        qs = qs.filter(pk__in=channel_ids)
    if not force:
        qs = qs.exclude(status=ChannelStatus.CREDENTIALS_REJECTED)
    channels = list(qs)
    skip_min = setting("PORTAL_HEALTH_PASSIVE_SKIP_MIN")
    max_skip = dt.timedelta(seconds=setting("PORTAL_HEALTH_MAX_SKIP_SECONDS"))

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
            targets.append(target_for(ch))
    outcomes = {o.channel_id: o for o in run_probes(targets)}

    window_start = timezone.now() - dt.timedelta(seconds=setting("PORTAL_HEALTH_WINDOW_SECONDS"))
    window = {
        row["channel_id"]: (row["n"] or 0, row["f"] or 0)
        for row in ProbeResult.objects.filter(channel_id__in=[c.pk for c in channels], created__gte=window_start)
        .values("channel_id")
        .annotate(n=Sum("samples"), f=Sum("failures"))
    }
    r = rules()
    done = [
        _settle(ch, tallies.get(ch.pk), outcomes.get(ch.pk), window.get(ch.pk, (0, 0)), r, force) for ch in channels
    ]
    if any(d.changed or d.discovered for d in done):
        _tell_gateway()
    from .alerts import notify_pending

    notify_pending([c.pk for c in channels])
    return done


def _settle(
    ch: Channel,
    tally: passive.Tally | None,
    outcome: Outcome | None,
    window: tuple[int, int],
    r: Rules,
    force: bool,
) -> ChannelRound:
    now = timezone.now()
    pieces: list[str] = []  # "good", "slow" (answered, but over the TTFT threshold) or "fail"
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
            error_message=(
                f"{tally.fail_count} of {tally.samples} gateway requests failed" if tally.fail_count else ""
            ),
            ttft_ms=tally.ttft_ms,
        )
        pieces.append("good" if tally.ok_count >= tally.fail_count else "fail")
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
            error_message=outcome.error_message,
            model=outcome.model[:256],
            connect_ms=outcome.connect_ms,
            ttfb_ms=outcome.ttfb_ms,
            ttft_ms=outcome.ttft_ms,
            total_ms=outcome.total_ms,
            tokens=outcome.tokens,
            tokens_per_s=outcome.tokens_per_s,
        )
        slow = outcome.ttft_ms is not None and outcome.ttft_ms > ch.ttft_degraded_ms
        pieces.append("fail" if not outcome.ok else "slow" if slow else "good")
    if not pieces:
        return ChannelRound(ch, None, None, ch.status, ch.status, ch.status_message)

    cf, cs = _count(ch.pk, pieces)
    rows = [x for x in (passive_row, active_row) if x is not None]
    samples = window[0] + sum(x.samples for x in rows)
    failures = window[1] + sum(x.failures for x in rows)
    last = active_row or passive_row
    auth = (outcome is not None and outcome.auth_rejected) or (
        outcome is None and tally is not None and tally.auth_failures > 0 and tally.ok_count == 0
    )
    ttft = active_row.ttft_ms if active_row and active_row.ttft_ms is not None else (last.ttft_ms if last.ok else None)
    current = ch.status
    if force and current == ChannelStatus.CREDENTIALS_REJECTED and outcome is not None and outcome.ok:
        current = ChannelStatus.UNKNOWN  # an admin checked by hand and the key works again
    new, message = decide(
        Evidence(
            current=current,
            consecutive_failures=cf,
            consecutive_successes=cs,
            window_samples=samples,
            window_failures=failures,
            last_ok=last.ok,
            last_error=last.error,
            last_error_message=last.error_message,
            last_ttft_ms=ttft,
            ttft_threshold_ms=ch.ttft_degraded_ms,
            auth_rejected=auth,
        ),
        r,
    )
    message = message or ch.status_message
    for row in rows:
        row.status_after = new
    ProbeResult.objects.bulk_create(rows)

    fields: dict = {"status_message": message, "last_checked": now}
    if ttft is not None:
        fields["last_ttft_ms"] = ttft
    if outcome is not None:
        fields["last_active_probe"] = now
    old = ch.status
    if new != old:
        fields.update(status=new, status_changed=now)
    moved = Channel.objects.filter(pk=ch.pk, status=old).update(**fields)
    if moved and new != old:
        StatusChange.objects.create(channel=ch, created=now, from_status=old, to_status=new, message=message)
        logger.info("channel %s: %s → %s (%s)", ch.name, old, new, message)
    elif not moved:
        new = Channel.objects.filter(pk=ch.pk).values_list("status", flat=True).first() or old
        logger.info("channel %s: status moved by someone else meanwhile; left as %s", ch.name, new)
    discovered = bool(outcome is not None and outcome.served and _record_discovery(ch, outcome.served, now))
    ch.status, ch.status_message = new, message
    return ChannelRound(ch, active_row, passive_row, old, new, message, discovered)


def _count(pk: int, pieces: list[str]) -> tuple[int, int]:
    """Advance the consecutive good/failed counters atomically; return (failures, successes).

    A slow answer is neither: it resets both, so a slow channel has to answer fast M times in a
    row before it counts as healthy again.
    """
    last = pieces[-1]
    trailing = 0
    for p in reversed(pieces):
        if p != last:
            break
        trailing += 1
    if last == "slow":
        Channel.objects.filter(pk=pk).update(consecutive_successes=0, consecutive_failures=0)
    elif trailing == len(pieces):
        counter = "consecutive_successes" if last == "good" else "consecutive_failures"
        other = "consecutive_failures" if last == "good" else "consecutive_successes"
        Channel.objects.filter(pk=pk).update(**{counter: F(counter) + trailing, other: 0})
    else:
        good = last == "good"
        Channel.objects.filter(pk=pk).update(
            consecutive_successes=trailing if good else 0, consecutive_failures=0 if good else trailing
        )
    row = Channel.objects.filter(pk=pk).values("consecutive_failures", "consecutive_successes").first() or {}
    return row.get("consecutive_failures", 0), row.get("consecutive_successes", 0)


def _record_discovery(ch: Channel, served: dict[str, int | None], now: dt.datetime) -> bool:
    """Write the context window each served model reports onto the matching routes; True if one changed."""
    changed = False
    for route in ch.routes.all():
        ctx = served.get(route.upstream_id)
        if ctx is None:
            continue
        stale = route.discovered_at is None or now - route.discovered_at > DISCOVERY_REFRESH
        if route.discovered_context_window != ctx or stale:
            changed |= route.discovered_context_window != ctx
            ModelRoute.objects.filter(pk=route.pk).update(discovered_context_window=ctx, discovered_at=now)
    return changed


def _tell_gateway() -> None:
    """Status and limits are written with `update()` (compare-and-set, no signals), so bump the
    gateway's route-cache generation ourselves: every gateway process re-reads routes at once."""
    try:
        from gateway.signals import bump
    except ImportError:  # a deployment without the gateway app
        return
    bump(routes=True)


def check_channel(channel_id: int) -> ChannelRound | None:
    """Probe one channel now, whatever its status (the "Check now" button, the API, launch jobs)."""
    done = run_round([channel_id], force=True)
    return done[0] if done else None
