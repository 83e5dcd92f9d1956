"""What writing a batch of usage records costs the gateway's process, by the size of the table and the
indexes on it (the embedded default: SQLite, written on the usage writer's thread in the gateway).

    uv run python bench/usage_insert.py --sizes 100k,1M --repeats 5

For each size, a fresh SQLite database in a temporary folder is migrated with this tree's code and
filled in SQL with that many records over 30 days (200 developers in 20 teams with a key each, 20
channels, 50 models, in time order, random event ids as records written before 12-04 have). Then,
in alternating rounds, 6,000 new records are written in batches of 60 through the writer's own
insert (`gateway.usage._insert_records`), each round on a copy of the filled file, in each of
`VARIANTS`: as the code is now, with random event ids (as before `gateway.usage.new_event_id`), and
with those and the four single-column indexes of the references added back (as before migration
keys/0019). It prints the CPU time (this process's, `time.process_time`) per record, median and
spread of the rounds, and each against now. Foreign keys are checked as the gateway checks them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from usage_scale import parse_size  # (it sets DATABASE_URL only when unset: main sets its own)

BATCH, NEW = 60, 6000
# migration keys/0019's four indexes, as they were before it
REFERENCE_INDEXES = (
    ("channel", "keys_usagerecord_channel_id_4cc679ce"),
    ("key", "keys_usagerecord_key_id_b0f7e216"),
    ("team", "keys_usagerecord_team_id_15931b18"),
    ("user", "keys_usagerecord_user_id_c6d302be"),
)


def fill(size: int) -> None:
    """The people, keys, channels and `size` records, in SQL (Django's connection, this tree's schema)."""
    from django.db import connection

    from accounts.models import Team, User
    from channels.models import Channel
    from keys.models import Key

    teams = Team.objects.bulk_create([Team(name=f"team-{i}") for i in range(20)])
    users = User.objects.bulk_create(
        [User(username=f"dev-{i}", role="developer", team=teams[i % 20]) for i in range(200)]
    )
    Key.objects.bulk_create([Key(owner=u, name="k", key_hash=f"{i:064x}") for i, u in enumerate(users)])
    Channel.objects.bulk_create(
        [Channel(name=f"ch-{i}", kind="vllm", base_url=f"http://10.0.0.{i}:8000/v1") for i in range(20)]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %s)
            INSERT INTO keys_usagerecord (created, request_id, upstream_request_id, key_id, user_id, team_id,
                model, channel_id, surface, stream, prompt_tokens, completion_tokens, total_tokens, estimated,
                status, http_status, error, latency_ms, ttft_ms, cached_tokens, cache_creation_tokens,
                route_explanation, event_id, pricing)
            SELECT strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '-30 days', (i * 2592.0 / %s) || ' seconds'),
                printf('%%013x', i), '', 1 + i %% 200, 1 + i %% 200, 1 + i %% 20, 'model-' || (i %% 50),
                1 + i %% 20, 'chat', 0, 200, 16, 216, 0, 'ok', 200, '', 50.0, 20.0, 0, 0, '[]',
                lower(hex(randomblob(16))), 'none'
            FROM n
            """,
            [size, size / 1000],
        )


def random_event_id() -> str:
    """The event id as it was before time-ordered ids: 128 random bits."""
    return os.urandom(16).hex()


def events(n: int, start: int, event_id: Callable[[], str] | None = None) -> list:
    import datetime as dt

    from gateway.usage import UsageEvent

    now = dt.datetime.now(dt.UTC)
    made = [
        UsageEvent(
            key_id=1 + i % 200,
            user_id=1 + i % 200,
            team_id=1 + i % 20,
            model=f"model-{i % 50}",
            channel_id=1 + i % 20,
            surface="chat",
            stream=False,
            prompt_tokens=200,
            completion_tokens=16,
            estimated=False,
            status="ok",
            http_status=200,
            error="",
            latency_ms=50.0,
            ttft_ms=20.0,
            request_id=f"{start + i:013x}",
            created=now,
        )
        for i in range(n)
    ]
    if event_id is not None:
        for e in made:
            e.event_id = event_id()
    return made


# (label, add the four reference indexes back, the event ids' maker or None for the writer's own)
VARIANTS: tuple[tuple[str, bool, Callable[[], str] | None], ...] = (
    ("now (keys/0019, time-ordered event ids)", False, None),
    ("random event ids", False, random_event_id),
    ("random event ids + the four reference indexes (before 12-04)", True, random_event_id),
)


def one_round(path: Path, copy: Path, reference_indexes: bool, event_id: Callable[[], str] | None) -> float:
    """CPU seconds per record to write NEW records in batches, on a fresh copy of the filled file."""
    from django.db import connection, transaction

    from gateway.usage import _insert_records

    connection.close()
    shutil.copyfile(path, copy)
    connection.settings_dict["NAME"] = str(copy)
    if reference_indexes:
        with connection.cursor() as cursor:
            for field, index in REFERENCE_INDEXES:
                cursor.execute(f'CREATE INDEX "{index}" ON "keys_usagerecord" ("{field}_id")')
    batches = [events(BATCH, 10**9 + k * BATCH, event_id) for k in range(NEW // BATCH)]
    started = time.process_time()
    for batch in batches:
        with transaction.atomic():
            _insert_records(batch)
    spent = time.process_time() - started
    connection.close()
    return spent / NEW


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100k,1M")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="usage-insert-"))
    os.environ["PORTAL_DATA_DIR"] = str(tmp / "data")
    os.environ["DATABASE_URL"] = f"sqlite:///{tmp / 'seed.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    print(f"| records in the table | insert | µs CPU a record (median, min–max of {a.repeats}) | × now |")
    print("|--:|---|--:|--:|")
    try:
        for text in a.sizes.split(","):
            size = parse_size(text)
            filled = tmp / f"filled-{size}.sqlite3"
            connection.close()
            connection.settings_dict["NAME"] = str(filled)
            call_command("migrate", interactive=False, verbosity=0)
            fill(size)
            connection.close()
            results: list[list[float]] = [[] for _ in VARIANTS]
            for r in range(a.repeats):
                order = list(enumerate(VARIANTS))
                for i, (_label, indexes, maker) in order if r % 2 == 0 else order[::-1]:
                    results[i].append(one_round(filled, tmp / "round.sqlite3", indexes, maker) * 1e6)
            base = statistics.median(results[0])
            for (label, _indexes, _maker), values in zip(VARIANTS, results, strict=True):
                med = statistics.median(values)
                print(
                    f"| {size:,} | {label} | {med:.1f} ({min(values):.1f}–{max(values):.1f}) | {med / base:.2f} |",
                    flush=True,
                )
            filled.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
