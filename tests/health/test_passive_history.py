"""Gateway traffic as evidence (across processes), and the probe history: aggregates and pruning."""

import datetime as dt
import os
import subprocess
import sys

import pytest
from django.test import override_settings
from django.utils import timezone

from channels.choices import ChannelStatus, ProbeSource
from channels.health import history, passive, services
from channels.models import Channel, ProbeHourly, ProbeResult
from tests.services import require_redis

pytestmark = pytest.mark.django_db


def test_busy_healthy_channel_is_not_probed_its_traffic_counts_instead(upstream, make_channel):
    up = upstream()
    ch = make_channel("busy", up.base_url)
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY, last_active_probe=timezone.now())
    for _ in range(5):
        passive.report(ch.pk, True, status=200, ttft_ms=42.0)

    services.run_round()

    assert up.requests == []  # no probe needed
    row = ProbeResult.objects.get(channel=ch)
    assert row.source == ProbeSource.PASSIVE and row.ok and row.samples == 5 and row.ttft_ms == 42.0


def test_gateway_failures_feed_the_window_and_take_a_channel_down(upstream, make_channel):
    up = upstream()
    up.behave(mode="status", status=502)
    ch = make_channel("failing", up.base_url)
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY)
    with override_settings(PORTAL_HEALTH_DOWN_MIN_SAMPLES=10, PORTAL_HEALTH_DOWN_AFTER=99):
        for _ in range(12):
            passive.report(ch.pk, False, status=502, error="http_5xx")
        services.run_round()

    ch.refresh_from_db()
    assert ch.status == ChannelStatus.DOWN and "13 recent" in ch.status_message
    assert ProbeResult.objects.filter(channel=ch, source=ProbeSource.PASSIVE, failures=12).exists()


def test_outcomes_flushed_by_another_process_are_collected_once_through_redis(make_channel):
    """The gateway (another process) flushes to Redis, the worker's round takes it exactly once."""
    url = require_redis()
    ch = make_channel("other-process", "http://127.0.0.1:9/v1")
    passive.collect()  # start clean
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'portal.settings'); django.setup();"
        "from channels.health import passive;"
        f"[passive.report({ch.pk}, True, ttft_ms=10.0) for _ in range(3)];"
        f"passive.report({ch.pk}, False, status=401, error='http_4xx');"
        "print(passive.flush())"
    )
    env = {**os.environ, "REDIS_URL": url}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "4", out.stderr[-2000:]

    tallies = passive.collect()

    assert tallies[ch.pk].ok_count == 3 and tallies[ch.pk].fail_count == 1 and tallies[ch.pk].ttft_ms == 10.0
    assert tallies[ch.pk].auth_failures == 1
    assert passive.collect() == {}  # consumed once


def test_a_round_without_redis_still_probes_and_keeps_this_processs_outcomes(upstream, make_channel, settings):
    """`portal manage check_channels --once` while the portal (and its Redis) is down, or a Redis
    blip during a worker's round: the active checks run and a channel's status follows them."""
    from tests.services import free_port

    up = upstream()
    ch = make_channel("checked-without-redis", up.base_url)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    passive.report(ch.pk, True, status=200, ttft_ms=7.0)

    services.run_round(force=True)

    ch.refresh_from_db()
    assert up.requests and ch.status == ChannelStatus.HEALTHY


def test_report_is_cheap_and_does_no_io(make_channel):
    import time

    best = float("inf")
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing there: any I/O would be slow or raise
        for _ in range(5):  # best of five batches, so a busy machine does not fail it
            started = time.perf_counter()
            for i in range(2_000):
                passive.report(1, i % 7 != 0, status=200)
            best = min(best, (time.perf_counter() - started) / 2_000 * 1e6)
    assert len(passive.drain()) == 10_000
    assert best < 50  # microseconds per call; typically 2-3


def _probe(ch, minutes_ago: float, ok=True, ttft=None, now=None):
    now = now or timezone.now()
    return ProbeResult.objects.create(
        channel=ch, created=now - dt.timedelta(minutes=minutes_ago), ok=ok, failures=0 if ok else 1, ttft_ms=ttft
    )


def test_hourly_aggregates_keep_p50_p95_and_error_ratio(make_channel):
    ch = make_channel("agg", "http://127.0.0.1:9/v1")
    now = timezone.now().replace(minute=30)
    for i in range(1, 21):
        _probe(ch, 60 + i, ttft=float(i * 10), now=now)  # the previous hour: 10…200 ms
    _probe(ch, 61.5, ok=False, now=now)

    history.aggregate_hours(now=now)
    history.aggregate_hours(now=now)  # idempotent

    hour = ProbeHourly.objects.get(
        channel=ch, hour=(now - dt.timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    )
    assert hour.samples == 21 and hour.failures == 1
    assert hour.ttft_p50_ms == 100.0 and hour.ttft_p95_ms == 190.0
    assert round(hour.error_ratio, 3) == round(1 / 21, 3)


def test_prune_drops_raw_probes_past_retention_but_keeps_aggregates(make_channel):
    ch = make_channel("old", "http://127.0.0.1:9/v1")
    _probe(ch, 60 * 24 * 8)
    keep = _probe(ch, 5)
    ProbeHourly.objects.create(channel=ch, hour=timezone.now() - dt.timedelta(days=8), samples=1)
    with override_settings(PORTAL_PROBE_RETENTION_DAYS=7):
        result = history.prune()
    assert result["probes"] == 1
    assert list(ProbeResult.objects.values_list("pk", flat=True)) == [keep.pk]
    assert ProbeHourly.objects.count() == 1


def test_series_and_badge_summaries(make_channel, monkeypatch):
    # A clock pinned mid-hour: "3 minutes ago" must fall in the current hour, whatever the real time.
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    monkeypatch.setattr(timezone, "now", lambda: now)
    ch = make_channel("chart", "http://127.0.0.1:9/v1")
    for m in range(0, 180, 10):
        _probe(ch, m, ttft=100.0 + m)
    _probe(ch, 3, ok=False)

    data = history.series(ch, "24h")
    assert len(data["labels"]) == 24
    assert data["ttft_p50_ms"][-1] is not None and data["error_ratio"][-1] > 0
    week = history.series(ch, "7d")
    assert len(week["labels"]) == 24 * 7

    [c] = history.attach_health([Channel.objects.get(pk=ch.pk)])
    assert c.health.samples_24h == 19 and 0 < c.health.error_ratio < 0.1
    assert c.health.sparkline_points.count(",") >= 2


def test_a_single_channel_check_leaves_other_channels_gateway_evidence_for_the_round(upstream, make_channel):
    up = upstream()
    a, b = make_channel("a", up.base_url), make_channel("b", up.base_url)
    passive.report(b.pk, False, status=502, error="http_5xx")

    services.check_channel(a.pk)
    services.run_round()

    assert ProbeResult.objects.filter(channel=b, source=ProbeSource.PASSIVE, failures=1).exists()
