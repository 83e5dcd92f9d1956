"""Usage is journaled before it is written: a process that dies leaves its journal, the next
gateway adopts and writes it; a batch written twice (a retry after a lost commit, an adopted file
whose batch had already been committed) is counted once."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import stat
import threading
import time
import uuid

import pytest
from django.db import connection, transaction
from django.db.models import Sum

from gateway.usage import UsageEvent, UsageWriter
from keys.models import USAGE_COUNTERS, UsageDaily, UsageRecord
from tests.services import require_postgres


def event(user_id: int, n: int) -> UsageEvent:
    return UsageEvent(
        created=dt.datetime.now(dt.UTC),
        request_id=f"req-{n}",
        key_id=None,
        user_id=user_id,
        model="qwen3-32b",
        channel_id=None,
        surface="chat",
        stream=False,
        prompt_tokens=3,
        completion_tokens=4,
        estimated=False,
        status="ok",
        http_status=200,
    )


def test_an_event_counts_into_every_rollup_counter_and_no_other():
    assert list(event(1, 0).counters()) == list(USAGE_COUNTERS)


def daily_requests() -> int:
    return UsageDaily.objects.aggregate(n=Sum("requests"))["n"] or 0


def test_a_batch_written_again_is_counted_once(transactional_db, alice):
    batch = [event(alice.id, i) for i in range(3)]
    UsageWriter._write(batch)
    UsageWriter._write(batch, replay=True)  # the commit's answer was lost: the retry skips them
    UsageWriter._write([*batch, event(alice.id, 3)], replay=True)
    assert UsageRecord.objects.count() == 4
    assert daily_requests() == 4
    assert UsageDaily.objects.aggregate(n=Sum("total_tokens"))["n"] == 4 * 7


def test_the_journal_of_a_dead_process_is_adopted_and_written_once(transactional_db, alice, settings, tmp_path):
    settings.GATEWAY_STATE_DIR = tmp_path

    async def scenario() -> None:
        dead = UsageWriter(interval=3600)
        for i in range(5):
            dead.record(event(alice.id, i))
        seg = dead._current
        assert seg is not None and seg.path.exists()
        assert stat.S_IMODE(seg.path.stat().st_mode) == 0o600
        assert stat.S_IMODE(seg.path.parent.stat().st_mode) == 0o700
        # The process dies (SIGKILL): nothing flushed, its lock goes with it.
        assert dead.journal._lock_fd is not None
        os.close(dead.journal._lock_fd)
        dead.journal._lock_fd = None

        heir = UsageWriter(interval=3600)
        heir.start()
        assert heir.journaled == 5
        await heir.flush()
        await heir.stop()

    assert UsageRecord.objects.count() == 0
    asyncio.run(scenario())
    assert UsageRecord.objects.count() == 5
    assert daily_requests() == 5
    assert not any((tmp_path / "usage-journal").glob("*/*.jsonl"))  # written, then deleted


def drop_the_waiting_copy() -> None:
    """Terminate the backend of this database's COPY that waits for a lock (as a restarted server,
    or a proxy or network that drops the connection, would), on this thread's own connection."""
    try:
        for _ in range(600):  # up to ~30 s for the writer's COPY to reach the lock
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE 'COPY %%'"
                )
                waiting = [pid for (pid,) in cursor.fetchall()]
                if waiting:
                    cursor.execute("SELECT pg_terminate_backend(%s)", [waiting[0]])
                    return
            time.sleep(0.05)
    finally:
        connection.close()


@pytest.mark.parametrize("fault", ["cancelled", "dropped"])
def test_a_batch_whose_copy_the_database_cut_waits_and_is_written_once_later(
    fault, transactional_db, alice, settings, tmp_path
):
    """The database cuts a batch's COPY in the middle: its statement timeout cancels it (a stall
    that began while it ran), or its connection is dropped (`refuse`, a restart). That is the
    database being away: the batch waits in the journal and is written once when the database
    answers, not set aside in `usage-journal/failed/` as a batch that cannot be written (the outage
    test lost such a batch: the COPY runs on the raw connection, whose errors were psycopg's own,
    not Django's)."""
    require_postgres()
    settings.GATEWAY_STATE_DIR = tmp_path
    # `cancelled`: the server's statement timeout cancels the COPY waiting for the lock below.
    settings.GATEWAY_DB_TIMEOUT = 1.0 if fault == "cancelled" else 60.0
    writer = UsageWriter(interval=3600)
    writer.RETRY_EVERY = 0.0  # the test says when the next try is

    async def first_batch() -> None:
        writer.start()
        writer.record(event(alice.id, 0))
        await writer.flush()

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(first_batch())  # the writer's thread is connected
        assert UsageRecord.objects.count() == 1
        dropper = threading.Thread(target=drop_the_waiting_copy)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {connection.ops.quote_name(UsageRecord._meta.db_table)} IN SHARE MODE")
            writer.record(event(alice.id, 1))
            if fault == "dropped":
                dropper.start()
            loop.run_until_complete(writer.flush())  # its COPY waits for the lock until it is cut
            if fault == "dropped":
                dropper.join()
        assert writer.journaled == 1  # still waiting for the database
        assert not (tmp_path / "usage-journal" / "failed").exists()
        loop.run_until_complete(writer.flush())  # the database answers again
        assert writer.journaled == 0
    finally:
        loop.run_until_complete(writer.stop())  # its thread's connection is closed too
        loop.close()
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-0", "req-1"]
    assert daily_requests() == 2


def test_a_stop_that_cuts_a_flush_short_writes_what_was_recorded_after_it_too(
    transactional_db, alice, settings, tmp_path
):
    """A gateway stopped (SIGTERM) while a batch is being written: the stop's own flush writes
    that batch, and then what was recorded meanwhile too, not only the first."""
    settings.GATEWAY_STATE_DIR = tmp_path

    async def scenario() -> None:
        writer = UsageWriter(interval=3600)
        writer.start()
        assert writer._task is not None
        writer._task.cancel()
        release = threading.Event()
        writer._executor.submit(release.wait)  # the writer's thread is busy: the next batch waits
        writer.record(event(alice.id, 0))
        writer._task = asyncio.get_running_loop().create_task(writer.flush())  # the background flush
        while writer._current is not None:  # …has sealed its batch and waits for the thread
            await asyncio.sleep(0)
        writer.record(event(alice.id, 1))
        release.set()
        await writer.stop()

    asyncio.run(scenario())
    assert sorted(UsageRecord.objects.values_list("request_id", flat=True)) == ["req-0", "req-1"]
    assert daily_requests() == 2
    assert not any((tmp_path / "usage-journal").rglob("*.jsonl"))


def test_event_ids_are_uuid7_ordered_by_their_millisecond_and_unique_within_it(monkeypatch):
    """Ids made later sort later (each record's entry in the unique index lands next to the last one's,
    not on a random page of it), and ids of the same millisecond still differ by their random bits."""
    from gateway import usage

    now = [1_764_800_000_000_000_000]
    monkeypatch.setattr(usage.time, "time_ns", lambda: now[0])
    same = [usage.new_event_id() for _ in range(1000)]
    now[0] += 1_000_000  # one millisecond on
    later = usage.new_event_id()
    assert len(set(same)) == 1000
    assert max(same) < later
    for made in [*same, later]:
        parsed = uuid.UUID(made)
        assert (parsed.version, parsed.variant, parsed.hex) == (7, uuid.RFC_4122, made)
        assert made[:12] == f"{parsed.int >> 80:012x}"
    assert int(later[:12], 16) == now[0] // 1_000_000
    assert event(1, 1).event_id != event(1, 2).event_id  # (the dataclass's default)


def test_a_batch_naming_a_deleted_key_channel_user_or_team_is_written_whole(
    transactional_db, alice, mallory, settings, tmp_path
):
    """A key, channel, user or team deleted between a request and its batch's write: the records that
    name it are written with that reference empty, as the deletion's SET NULL leaves the older ones,
    and the rest of the batch with them (the batch's commit failed on the foreign key before, and
    every record in it, anyone's, was set aside for an operator)."""
    from accounts.models import Team
    from channels.models import Channel
    from keys.services import issue_key

    team = Team.objects.create(name="gone-team")
    gone_user = type(alice).objects.create(username="gone-user", team=team)
    channel = Channel.objects.create(name="gone", kind="vllm", base_url="http://127.0.0.1:9/v1")
    key, _ = issue_key(owner=mallory, name="gone-key")
    kept = [event(alice.id, i) for i in range(3)]
    named = [event(mallory.id, 10), event(mallory.id, 11), event(gone_user.id, 12)]
    named[0].channel_id = channel.id
    named[1].key_id = key.id
    named[2].team_id = team.id
    ids = {"channel": channel.id, "key": key.id, "user": gone_user.id, "team": team.id}
    channel.delete()
    key.delete()
    gone_user.delete()
    team.delete()

    settings.GATEWAY_STATE_DIR = tmp_path

    async def through_the_writer() -> None:  # recorded (journaled), then flushed, as the gateway does
        writer = UsageWriter(interval=3600)
        writer.start()
        for e in [*kept[:2], *named, kept[2]]:
            writer.record(e)
        await writer.flush()
        await writer.stop()

    asyncio.run(through_the_writer())

    assert not any((tmp_path / "usage-journal").rglob("*.jsonl"))  # written, nothing set aside in failed/
    assert UsageRecord.objects.count() == 6
    assert daily_requests() == 6
    for name, value in ids.items():
        assert not UsageRecord.objects.filter(**{f"{name}_id": value}).exists()
        assert not UsageDaily.objects.filter(**{f"{name}_id": value}).exists()
    assert UsageRecord.objects.filter(request_id="req-12", user=None, team=None).count() == 1
    assert UsageRecord.objects.filter(user=alice).count() == 3


def test_a_batch_that_fails_for_another_reason_still_fails_whole(transactional_db, alice):
    """Only deleted references are emptied and retried: a batch that breaks another constraint (two
    records with one event id) still fails as a whole, for `flush` to set it aside."""
    from django.db import IntegrityError

    batch = [event(alice.id, i) for i in range(3)]
    batch[2].event_id = batch[0].event_id
    with pytest.raises(IntegrityError):
        UsageWriter._write(batch)
    assert UsageRecord.objects.count() == 0
