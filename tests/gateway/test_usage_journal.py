"""Usage is journaled before it is written: a process that dies leaves its journal, the next
gateway adopts and writes it; a batch written twice (a retry after a lost commit, an adopted file
whose batch had already been committed) is counted once."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import stat

from django.db.models import Sum

from gateway.usage import UsageEvent, UsageWriter
from keys.models import USAGE_COUNTERS, UsageDaily, UsageRecord


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
