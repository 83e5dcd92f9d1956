"""Hourly rollups, pages flat in the size of the data, and retention (issue 9/12)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count, Sum
from django.db.models.functions import TruncHour
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from channels.models import Channel
from gateway.usage import write_batch
from keys.models import UsageDaily, UsageHourly, UsageRecord
from keys.services import issue_key
from keys.usage import retention
from keys.usage.services import channel_token_shares, last_day, ttft_percentile, windows_token_shares
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db


def _channels(n: int, first: int = 0) -> list[Channel]:
    return [
        Channel.objects.create(name=f"ch-{i}", kind="vllm", base_url=f"http://127.0.0.1:{9000 + i}/v1")
        for i in range(first, first + n)
    ]


def test_hourly_buckets_hold_what_the_raw_records_hold_and_a_replay_counts_nothing(alice, mallory):
    a, _ = issue_key(owner=alice, name="a")
    m, _ = issue_key(owner=mallory, name="m")
    chans = _channels(3)
    now = timezone.now().replace(minute=30)
    events = [
        event(
            (a, m)[i % 2],
            created=now - dt.timedelta(hours=i % 5, minutes=i % 7),
            channel_id=chans[i % 3].pk,
            prompt_tokens=i,
            completion_tokens=2 * i,
            ttft_ms=float(37 * i % 2500),
            model=("qwen", "llama")[i % 2],
        )
        for i in range(200)
    ]
    write_batch(events[:120])
    write_batch(events[80:], replay=True)  # 40 already stored: counted once
    raw = {
        (r["hour"], r["channel_id"], r["key_id"]): (r["n"], r["t"])
        for r in UsageRecord.objects.annotate(hour=TruncHour("created"))
        .values("hour", "channel_id", "key_id")
        .annotate(n=Count("id"), t=Sum("total_tokens"))
    }
    rolled = {
        (r["hour"], r["channel_id"], r["key_id"]): (r["n"], r["t"])
        for r in UsageHourly.objects.values("hour", "channel_id", "key_id").annotate(
            n=Sum("requests"), t=Sum("total_tokens")
        )
    }
    assert UsageRecord.objects.count() == 200
    assert rolled == raw
    histogram = UsageHourly.objects.aggregate(**{f: Sum(f) for f in ("ttft_le_50", "ttft_le_3000", "ttft_slower")})
    assert histogram["ttft_le_50"] == UsageRecord.objects.filter(ttft_ms__lte=50).count()
    assert histogram["ttft_le_3000"] == UsageRecord.objects.filter(ttft_ms__gt=2000, ttft_ms__lte=3000).count()
    assert histogram["ttft_slower"] == 0
    assert UsageDaily.objects.aggregate(n=Sum("requests"))["n"] == 200


def test_ttft_percentiles_interpolate_inside_the_bucket_and_the_open_bucket_answers_its_floor():
    assert ttft_percentile({}, 50) is None
    assert ttft_percentile({"ttft_le_100": 4}, 50) == 75.0  # (50, 100], rank 2 of 4
    assert ttft_percentile({"ttft_le_50": 1, "ttft_slower": 99}, 50) == 20000.0


def _dashboard_queries(admin_client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.get(reverse("dashboard")).status_code == 200
    return len(queries)


def test_the_dashboard_reads_the_same_number_of_queries_whatever_the_records_and_channels(admin_client, admin, alice):
    a, _ = issue_key(owner=alice, name="a")
    chans = _channels(1)
    write_batch([event(a, channel_id=chans[0].pk, request_id=f"x{i}") for i in range(5)])
    few = _dashboard_queries(admin_client)
    with CaptureQueriesContext(connection) as q:
        last_day(admin)
    assert len(q) == 2

    chans += _channels(11, first=1)
    now = timezone.now()
    write_batch(
        [
            event(a, channel_id=chans[i % len(chans)].pk, created=now - dt.timedelta(minutes=i % 600), ttft_ms=i % 900)
            for i in range(3000)
        ]
    )
    assert _dashboard_queries(admin_client) == few
    with CaptureQueriesContext(connection) as q:
        usage = last_day(admin)
    assert len(q) == 2
    assert usage["total_requests"] == 3005 and len(usage["ttft"]) == 12


def test_showback_shares_come_from_hourly_buckets_and_edges_are_weighted(alice, mallory):
    a, _ = issue_key(owner=alice, name="a")
    m, _ = issue_key(owner=mallory, name="m")
    (ch,) = _channels(1)
    base = dt.datetime(2026, 11, 3, 10, 0, tzinfo=dt.UTC)
    write_batch(
        [
            event(a, channel_id=ch.pk, created=base + dt.timedelta(minutes=5), prompt_tokens=0, completion_tokens=600),
            event(
                a,
                channel_id=ch.pk,
                created=base + dt.timedelta(hours=1, minutes=5),
                prompt_tokens=0,
                completion_tokens=100,
            ),
            event(
                m,
                channel_id=ch.pk,
                created=base + dt.timedelta(hours=2, minutes=5),
                prompt_tokens=0,
                completion_tokens=400,
            ),
        ]
    )
    # A run 10:30 -> 12:15 covers half of hour 10, all of 11, a quarter of 12.
    shares = {
        s.user: s.tokens for s in channel_token_shares(ch.pk, base.replace(minute=30), base.replace(hour=12, minute=15))
    }
    assert shares == {"alice": 300 + 100, "mallory": 100}
    # Two adjacent runs never count an hour twice: 10:00-10:30 and 10:30-11:00 split hour 10.
    first = channel_token_shares(ch.pk, base, base.replace(minute=30))
    second = channel_token_shares(ch.pk, base.replace(minute=30), base.replace(hour=11))
    assert first[0].tokens + second[0].tokens == 600


def test_a_runs_whole_days_come_from_the_daily_rollups_and_its_ends_from_the_hourly(alice, mallory):
    """A run from 22:30 on the 3rd to 01:15 on the 6th: the 4th and 5th are read from the daily
    buckets (three queries whatever the traffic), the ends from hours weighted by what it covers."""
    a, _ = issue_key(owner=alice, name="a")
    m, _ = issue_key(owner=mallory, name="m")
    (ch,) = _channels(1)
    day = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)

    def at(days: int, hours: int, key, tokens: int):
        created = day + dt.timedelta(days=days, hours=hours, minutes=5)
        return event(key, channel_id=ch.pk, created=created, prompt_tokens=0, completion_tokens=tokens)

    write_batch(
        [
            at(0, 21, a, 1000),  # before the run
            at(0, 22, a, 600),  # half of it: 300
            at(0, 23, m, 50),
            at(1, 3, a, 7),
            at(1, 20, m, 11),
            at(2, 12, a, 13),
            at(3, 0, m, 80),
            at(3, 1, a, 400),  # a quarter: 100
            at(3, 2, a, 5000),  # after the run
        ]
    )
    since, until = day.replace(hour=22, minute=30), day + dt.timedelta(days=3, hours=1, minutes=15)
    with CaptureQueriesContext(connection) as q:
        shares = {s.user: s.tokens for s in channel_token_shares(ch.pk, since, until)}
    assert shares == {"alice": 300 + 7 + 13 + 100, "mallory": 50 + 11 + 80}
    one_run = len(q)
    assert one_run <= 3  # the daily part and the two ends in one query, then the teams' and users' names
    assert "keys_usagedaily" in q[0]["sql"] and "keys_usagehourly" in q[0]["sql"]
    # A month's runs are read together, each with its own shares, in as many queries as one run.
    evening = (ch.pk, day, day + dt.timedelta(hours=22))
    with CaptureQueriesContext(connection) as q:
        many = windows_token_shares([(ch.pk, since, until), evening] * 200)
    assert len(q) == one_run
    assert all({s.user: s.tokens for s in got} == shares for got in many[0::2])
    assert all({s.user: s.tokens for s in got} == {"alice": 1000} for got in many[1::2])  # the 3rd before 22:00


def _old_records(n: int, days: int) -> None:
    """n raw records `days` old, inserted in bulk (their rollups are not what this test is about)."""
    created = timezone.now() - dt.timedelta(days=days)
    UsageRecord.objects.bulk_create([UsageRecord(created=created, model="old", total_tokens=1) for _ in range(n)])


def test_retention_deletes_old_raw_records_in_batches_and_keeps_the_rollups(settings, alice):
    settings.PORTAL_USAGE_RETENTION_DAYS = 90
    a, _ = issue_key(owner=alice, name="a")
    write_batch([event(a, created=timezone.now() - dt.timedelta(days=120), request_id="old-with-rollup")])
    write_batch([event(a, request_id="new")])
    _old_records(2_500, days=91)
    _old_records(7, days=89)
    daily_before = UsageDaily.objects.aggregate(n=Sum("requests"))["n"]
    hourly_before = UsageHourly.objects.aggregate(n=Sum("requests"))["n"]

    statements = []
    with CaptureQueriesContext(connection) as q:
        deleted = retention.delete_in_batches(UsageRecord, batch=1000, created__lt=retention.raw_cutoff())
    statements = [s["sql"] for s in q.captured_queries if s["sql"].startswith("DELETE")]
    assert deleted == 2_501
    assert len(statements) == 3  # 1000 + 1000 + 501: never one statement over the whole table
    assert UsageRecord.objects.count() == 1 + 7
    assert UsageDaily.objects.aggregate(n=Sum("requests"))["n"] == daily_before == 2
    assert UsageHourly.objects.aggregate(n=Sum("requests"))["n"] == hourly_before == 2
    assert retention.prune()["usage_records"] == 0  # the daily prune's receiver: nothing left to do


def test_the_daily_prune_task_runs_usage_retention(settings, alice):
    from channels.tasks import prune_probe_results

    settings.PORTAL_USAGE_RETENTION_DAYS = 30
    _old_records(3, days=31)
    assert prune_probe_results()["usage_records"] == 3


@pytest.mark.django_db(transaction=True)
def test_a_writer_is_not_blocked_by_a_prune_batch_in_flight(settings, alice):
    """A prune batch holds its transaction open (paused here); the gateway's usage writer (new
    records, today's F() buckets) completes meanwhile instead of waiting for it."""
    settings.PORTAL_USAGE_RETENTION_DAYS = 90
    a, _ = issue_key(owner=alice, name="a")
    write_batch([event(a, request_id="today-bucket")])  # the bucket the writer will update
    _old_records(500, days=100)
    deleting = threading.Event()
    release = threading.Event()

    def prune_batch_held_open():
        try:
            with transaction.atomic():
                ids = list(UsageRecord.objects.filter(created__lt=retention.raw_cutoff()).values_list("pk", flat=True))
                UsageRecord.objects.filter(pk__in=ids)._raw_delete(UsageRecord.objects.db)
                deleting.set()
                release.wait(60)
        finally:
            connections.close_all()

    pruner = threading.Thread(target=prune_batch_held_open)
    pruner.start()
    try:
        assert deleting.wait(60)
        done = threading.Event()

        def writer():
            try:
                write_batch([event(a, request_id=f"w{i}") for i in range(50)])
                done.set()
            finally:
                connections.close_all()

        t = threading.Thread(target=writer)
        t.start()
        # The prune's transaction stays open until the writer finished or 30 s passed: a writer
        # waiting on the prune's locks would only finish after `release`.
        finished_while_prune_open = done.wait(30)
        release.set()
        t.join(60)
    finally:
        release.set()
        pruner.join(60)
    assert finished_while_prune_open
    assert UsageDaily.objects.aggregate(n=Sum("requests"))["n"] == 51
    assert UsageRecord.objects.filter(model="old").count() == 0


def test_each_reference_of_a_usage_record_is_served_by_one_index_that_also_orders_by_time():
    """A record's key, user, team and channel each lead a (reference, created) index, and none has a
    single-column index of its own: that one served no lookup the pair does not, and cost a B-tree
    write with every record (migration 0019 dropped the four)."""
    with connection.cursor() as cursor:
        found = connection.introspection.get_constraints(cursor, UsageRecord._meta.db_table)
    indexes = [c["columns"] for c in found.values() if c["index"] and not c["primary_key"]]
    for reference in ("key_id", "user_id", "team_id", "channel_id"):
        assert [reference] not in indexes, f"{reference} still has an index of its own: {indexes}"
        assert [reference, "created"] in indexes, f"nothing serves a lookup by {reference}: {indexes}"
    assert ["created"] in indexes  # the time range of every page, and retention's pruning
