"""Usage: what a call used, and the records of finished calls, written in batches off the request path.

The gateway calls `writer.record(UsageEvent(...))` (an O(1) append). A background task in the
gateway process flushes every `GATEWAY_USAGE_FLUSH_INTERVAL` seconds (0.5 by default) and at
shutdown: one multi-row insert of UsageRecord rows, one F()-increment per (day, user, key, model,
channel, team) bucket of UsageDaily and per (hour, …) bucket of UsageHourly (with its TTFT
histogram), and one `last_used_at` update per key. The reports over these rows are `keys.usage.services`'s.

Nothing counted is lost, nothing is counted twice (`Journal`): every event is appended to this
process's journal file when it is recorded (one write(2): a SIGTERM or SIGKILL of the process loses
nothing the kernel has), the file is fsynced before its batch is written (a power loss loses at most
one flush interval), and deleted once the batch is committed. While the database is unreachable the
sealed files wait on disk (at most GATEWAY_USAGE_QUEUE events stay in memory as well) and are
written when it answers again; the files of a process that died are adopted by the next gateway
that starts or by a running replica. Every record carries an idempotency key (`event_id`, unique):
a retried or replayed batch inserts with ON CONFLICT DO NOTHING and counts the daily buckets of
the rows it inserted only.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fcntl
import logging
import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings
from django.db import (
    IntegrityError,
    close_old_connections,
    connection,
    connections,
    transaction,
)
from django.db.models import F, Q

from keys.choices import Pricing, UsageStatus
from keys.models import Key, UsageDaily, UsageHourly, UsageRecord, ttft_field
from portal import faults
from portal.db import deadline, empty_deleted_references, retry_when_locked, use_timeouts
from portal.hot import hot
from portal.logfilters import is_database_outage

from . import metrics
from .translate.common import text_tokens

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Usage:
    """Tokens one call used (`estimated` when the upstream reported none). `cached_tokens` and
    `cache_creation_tokens` are parts of `prompt_tokens`: read from a prompt cache (vLLM/OpenAI
    `cached_tokens`, llama.cpp `cache_n`, Anthropic `cache_read_input_tokens`) and written to one
    (Anthropic `cache_creation_input_tokens`)."""

    prompt_tokens: int
    completion_tokens: int
    estimated: bool = False
    cached_tokens: int = 0
    cache_creation_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_chat(self) -> dict[str, Any]:
        """The Chat Completions `usage` object of these tokens."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }

    def shown_in(self, usage: Any, shape: str) -> None:
        """Writes these tokens over an answer's `usage` object of `shape` ("chat", "responses" or
        "anthropic"), its other fields kept: an implausible report is shown as it is charged."""
        if not isinstance(usage, dict):
            return
        if shape == "anthropic":  # (input without the cache's reads and writes)
            uncached = self.prompt_tokens - self.cached_tokens - self.cache_creation_tokens
            usage.update(input_tokens=max(0, uncached), output_tokens=self.completion_tokens)
            usage.update(cache_read_input_tokens=self.cached_tokens)
            usage.update(cache_creation_input_tokens=self.cache_creation_tokens)
            return
        prompt, completion, details = (
            ("input_tokens", "output_tokens", "input_tokens_details")
            if shape == "responses"
            else ("prompt_tokens", "completion_tokens", "prompt_tokens_details")
        )
        usage.update({prompt: self.prompt_tokens, completion: self.completion_tokens, "total_tokens": self.total})
        if isinstance(usage.get(details), dict):
            usage[details]["cached_tokens"] = self.cached_tokens


def so_far(reported: Usage | None, prompt: int, tokens: int) -> Usage:
    """What an answer is charged from what its stream showed (one cut short: the client left, the
    upstream failed): the upstream's usage so far, else the `prompt` estimate and the output
    events read (`tokens`), estimated."""
    return reported if reported is not None else Usage(prompt, tokens, estimated=True)


def usage_from(data: Any) -> Usage | None:
    """An OpenAI `usage` object (Chat or Responses) as Usage, or None when absent or malformed.
    Pass a Chat answer's usage through `translate.common.answer_usage` first (llama.cpp reports
    its cache hits beside it)."""
    if not isinstance(data, dict):
        return None
    try:
        prompt = int(data.get("prompt_tokens") or data.get("input_tokens") or 0)
        completion = int(data.get("completion_tokens") or data.get("output_tokens") or 0)
        details = data.get("prompt_tokens_details") or data.get("input_tokens_details")
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        # Prompt-cache writes (OpenRouter's name; Chat on an Anthropic channel reports them so)
        written = int(details.get("cache_write_tokens") or 0) if isinstance(details, dict) else 0
    except (TypeError, ValueError, AttributeError):
        return None
    if prompt == 0 and completion == 0 and not data.get("total_tokens"):
        return None
    cached = max(0, min(cached, prompt))
    return Usage(prompt, completion, cached_tokens=cached, cache_creation_tokens=max(0, min(written, prompt - cached)))


_TEXT_FIELDS = ("content", "text", "input", "prompt", "arguments", "tool_calls", "function")


def estimate_tokens(value: Any) -> int:
    """A cheap prompt-size estimate (`translate.common.text_tokens`: ≈4 characters a token, half a
    token a CJK character) for reservations and for usage when an upstream reports none. Strings,
    token ids, lists and OpenAI message/content-part shapes are understood. (`(n + 3) // 4` is `ceil(n / 4)`,
    text_tokens's own first case inlined: most text is ASCII, and this runs on every request.)"""
    kind = type(value)
    if kind is str:
        return (len(value) + 3) // 4 if value.isascii() else text_tokens(value)
    if kind is list:
        total = 0
        for v in value:
            if type(v) is str:
                total += (len(v) + 3) // 4 if v.isascii() else text_tokens(v)
            else:
                total += estimate_tokens(v)
        return total
    if kind is dict:
        total = 0
        for k in _TEXT_FIELDS:
            if k in value:
                v = value[k]
                if type(v) is str:
                    total += (len(v) + 3) // 4 if v.isascii() else text_tokens(v)
                else:
                    total += estimate_tokens(v)
        return total
    if kind is int:  # a token id of a prompt or input given as token ids: one token, exactly
        return 1
    if isinstance(value, str):
        return text_tokens(value)
    if isinstance(value, list):
        return sum(estimate_tokens(v) for v in value)
    if isinstance(value, dict):
        return sum(estimate_tokens(value[k]) for k in _TEXT_FIELDS if k in value)
    return 0


def new_event_id() -> str:
    """A UUID version 7 as 32 hex digits: the time in milliseconds, then 74 random bits. Ids made
    one after another sort one after another, so each record's entry in the unique index lands
    next to the last one's instead of on a random page of an index as large as the table
    (`bench/usage_insert.py`); 74 random bits a millisecond keep them unique across replicas."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10))
    return f"{value & _V7_CLEAR | _V7_SET:032x}"


# UUID version 7's fixed bits: the version (0b0111) at bits 76-79, the variant (0b10) at 62-63
_V7_CLEAR = ~(0xF << 76 | 0x3 << 62) & (1 << 128) - 1
_V7_SET = 0x7 << 76 | 0x2 << 62


@dataclass(slots=True)
class UsageEvent:
    """One finished gateway request, as the gateway saw it."""

    created: dt.datetime
    request_id: str
    key_id: int | None
    user_id: int | None
    model: str
    channel_id: int | None
    surface: str
    stream: bool
    prompt_tokens: int
    completion_tokens: int
    estimated: bool
    status: str
    http_status: int
    error: str = ""
    latency_ms: float | None = None
    ttft_ms: float | None = None
    team_id: int | None = None  # the owner's team when the request was made (usage by team stays exact)
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    route_explanation: list[str] = field(default_factory=list)  # `catalog.Selection.explanation`
    upstream_request_id: str = ""  # the upstream's own `x-request-id` (ours is `request_id`)
    # Idempotency key of its record, as a UUID's 32 hex digits (`new_event_id`).
    event_id: str = field(default_factory=new_event_id)
    cold_start_ms: float | None = None  # waited this long for its on-demand model to start
    # nano-units of PORTAL_CURRENCY from the route's price when the call finished (None: no price)
    cost_nanos: int | None = 0
    pricing: str = Pricing.PRICED

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def counters(self) -> dict[str, int]:
        """What this call adds to each of the rollups' `USAGE_COUNTERS` (tests hold the two
        lists equal, so a counter added to the rollup model cannot be left at zero here)."""
        return UsageEvent.totals([self])

    @staticmethod
    def totals(events: list[UsageEvent]) -> dict[str, int]:
        """What `events` add together to each of the rollups' `USAGE_COUNTERS` (summed per bucket:
        a dict per record cost more than the rest of aggregating a batch)."""
        errors = prompt = completion = estimated = cached = created = cost = unpriced = 0
        ok = UsageStatus.OK
        for e in events:
            if e.status != ok:
                errors += 1
            prompt += e.prompt_tokens
            completion += e.completion_tokens
            if e.estimated:
                estimated += 1
            cached += e.cached_tokens
            created += e.cache_creation_tokens
            if e.cost_nanos is None:
                unpriced += 1
            else:
                cost += e.cost_nanos
        return {
            "requests": len(events),
            "errors": errors,
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "estimated_requests": estimated,
            "cached_tokens": cached,
            "cache_creation_tokens": created,
            "cost_nanos": cost,
            "unpriced_requests": unpriced,
        }


_RECORD_COLUMNS = (
    "created",
    "request_id",
    "key_id",
    "user_id",
    "model",
    "channel_id",
    "surface",
    "stream",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "estimated",
    "status",
    "http_status",
    "error",
    "latency_ms",
    "ttft_ms",
    "team_id",
    "cached_tokens",
    "cache_creation_tokens",
    "route_explanation",
    "upstream_request_id",
    "event_id",
    "cold_start_ms",
    "cost_nanos",
    "pricing",
)


def _datetime_adapter() -> Callable[[dt.datetime], Any]:
    """How this connection stores a record's `created`: as it is on PostgreSQL; on SQLite the
    text Django's `adapt_datetimefield_value` makes (naive, in the connection's time zone), with
    the settings read once per batch instead of once per record."""
    if connection.vendor == "postgresql":
        return lambda v: v
    if connection.vendor != "sqlite" or not settings.USE_TZ:
        return connection.ops.adapt_datetimefield_value
    tz = connection.timezone

    def adapt(v: dt.datetime) -> str:
        if v.utcoffset() is None:
            return str(v)
        local = str(v.astimezone(tz))  # the naive text, then its offset: "+HH:MM" in every zone but a few
        if local[-6] in "+-":  # ... ones of seconds' precision: those (never seen) take the long way
            return local[:-6]  # `replace(tzinfo=None)` (keywords parsed in C: ~5 k instructions a record)
        return str(v.astimezone(tz).replace(tzinfo=None))

    return adapt


def _insert_records(events: list[UsageEvent], *, replay: bool = False) -> list[UsageEvent]:
    """One multi-row INSERT per batch: ORM object construction cost more CPU than the insert, and
    the writer shares the gateway process with the hot path. A first attempt (fresh ids) uses COPY
    on PostgreSQL; a `replay` skips the records already there and returns the ones it inserted."""
    table = connection.ops.quote_name(UsageRecord._meta.db_table)
    cols = ", ".join(connection.ops.quote_name(c) for c in _RECORD_COLUMNS)
    adapt = _datetime_adapter()
    # SQLite's driver looks for an adapter (a dict lookup and two attribute lookups) for every
    # parameter that is not exactly an int, float or str: the flags (bool) and the choices (str
    # enums) are given to it as the int and the plain str it stores for them (`str.__str__`: the
    # str's own copy, in C; a choice's `__str__` is Python).
    flag: Callable[[bool], object] = int if connection.vendor == "sqlite" else bool
    text: Callable[[str], str] = str.__str__
    rows = [
        (
            adapt(e.created),
            e.request_id[:64],
            e.key_id,
            e.user_id,
            e.model[:128],
            e.channel_id,
            text(e.surface),
            flag(e.stream),
            max(e.prompt_tokens, 0),
            max(e.completion_tokens, 0),
            max(e.total_tokens, 0),
            flag(e.estimated),
            text(e.status),
            e.http_status,
            e.error[:300],
            e.latency_ms,
            e.ttft_ms,
            e.team_id,
            max(e.cached_tokens, 0),
            max(e.cache_creation_tokens, 0),
            orjson.dumps(e.route_explanation).decode(),
            e.upstream_request_id[:100],
            e.event_id if connection.vendor != "postgresql" or not replay else uuid.UUID(e.event_id),
            e.cold_start_ms,
            e.cost_nanos,
            text(e.pricing),
        )
        for e in events
    ]
    if replay:
        return _insert_new_only(table, cols, rows, events)
    if connection.vendor == "postgresql":
        # COPY: no SQL text to build, rows encoded in C. On the raw connection, so by hand as Django's
        # cursor would: under the client-side deadline (a stall cannot hold it), and its errors as
        # Django's. A COPY the server cancelled or whose connection dropped is the database being
        # away (the batch waits and is retried), not a batch that cannot be written (set aside):
        # psycopg's own OperationalError is not Django's.
        connection.ensure_connection()
        with (
            connection.wrap_database_errors,
            deadline(connection),
            connection.connection.cursor() as raw,
            raw.copy(f"COPY {table} ({cols}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        return events
    # SQLite: one single-row INSERT in the driver's own `?` style, run for every row by the driver
    # (`executemany`: the statement is prepared once). Through Django's cursor a multi-row INSERT
    # had its `%s` rewritten by a regex and a statement of ~900 parameters prepared per batch,
    # ~190 k instructions per record on the gateway's process. Only our own quoted identifiers and
    # placeholders go into the text; values are bound.
    sql = f"INSERT INTO {table} ({cols}) VALUES (" + ", ".join(["?"] * len(_RECORD_COLUMNS)) + ")"  # noqa: S608
    connection.ensure_connection()
    with connection.wrap_database_errors:
        cursor = connection.connection.cursor()
        try:
            cursor.executemany(sql, rows)
        finally:
            cursor.close()
    return events


def _insert_new_only(table: str, cols: str, rows: list[tuple[Any, ...]], events: list[UsageEvent]) -> list[UsageEvent]:
    """INSERT … ON CONFLICT (event_id) DO NOTHING RETURNING event_id (PostgreSQL and SQLite ≥ 3.35)."""
    per_row = "(" + ", ".join(["%s"] * len(_RECORD_COLUMNS)) + ")"
    step = max(1, 900 // len(_RECORD_COLUMNS))
    conflict = connection.ops.quote_name("event_id")
    inserted: set[str] = set()
    with connection.cursor() as cursor:
        for i in range(0, len(rows), step):
            chunk = rows[i : i + step]
            sql = (
                f"INSERT INTO {table} ({cols}) VALUES "  # noqa: S608 - our quoted identifiers only
                + ", ".join([per_row] * len(chunk))
                + f" ON CONFLICT ({conflict}) DO NOTHING RETURNING {conflict}"
            )
            cursor.execute(sql, [v for row in chunk for v in row])
            inserted.update(uuid.UUID(str(r[0])).hex for r in cursor.fetchall())
    return [e for e in events if e.event_id in inserted]


# The references a usage record keeps, each set to null when the row it names is deleted.
_REFERENCES = ("key_id", "user_id", "team_id", "channel_id")


def write_batch(events: list[UsageEvent], *, replay: bool = False) -> None:
    """Persist a batch: records, daily buckets (F() upserts) and keys' last use. Safe to call from
    any thread with a database connection. With `replay` (a retry, or a journal from before an
    outage) records already stored are skipped and counted nowhere."""
    if not events:
        return
    events = _insert_records(events, replay=replay)
    # The records by hourly bucket first, then each bucket's counters summed at once (and a
    # day's from its hours'): the batch's Python is per bucket, not per record and counter.
    by_hour: dict[tuple[Any, ...], list[UsageEvent]] = defaultdict(list)
    last_used: dict[int, dt.datetime] = {}
    limited = UsageStatus.RATE_LIMITED
    # The hour of each record, made once per hour of the batch (`replace` parses its keywords in C,
    # ~5 k instructions a record; the batch's records are almost all of one hour).
    hours: dict[tuple[Any, ...], dt.datetime] = {}
    for e in events:
        c = e.created
        at = (c.year, c.month, c.day, c.hour, c.tzinfo, c.fold)
        hour_ = hours.get(at)
        if hour_ is None:
            hour_ = hours[at] = c.replace(minute=0, second=0, microsecond=0)
        by_hour[(hour_, e.user_id, e.key_id, e.model[:128], e.channel_id, e.team_id)].append(e)
        if e.key_id is not None and e.status != limited:
            last_used[e.key_id] = max(last_used.get(e.key_id, e.created), e.created)
    daily: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    hourly: dict[tuple[Any, ...], dict[str, int]] = {}
    for (hour_, *dims), group in by_hour.items():
        counts = UsageEvent.totals(group)
        day = daily[(hour_.date(), *dims)]
        for name, value in counts.items():
            day[name] += value
        for e in group:
            if e.ttft_ms is not None:
                name = ttft_field(e.ttft_ms)
                counts[name] = counts.get(name, 0) + 1
        hourly[(hour_, *dims)] = counts
    for (day_, *day_dims), counts in daily.items():
        _add_to_bucket(UsageDaily, {"day": day_}, day_dims, counts)
    for (hour_, *hour_dims), counts in hourly.items():
        _add_to_bucket(UsageHourly, {"hour": hour_}, hour_dims, counts)
    for key_id, when in last_used.items():
        Key.objects.filter(pk=key_id).filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=when)).update(
            last_used_at=when
        )


def _add_to_bucket(
    rollup: type[UsageDaily | UsageHourly], period: dict[str, Any], dims: list[Any], counts: dict[str, int]
) -> None:
    """Add `counts` to one rollup bucket (period + user, key, model, channel, team), creating it
    when it does not exist yet; concurrent writers (replicas) never lose an increment."""
    user_id, key_id, model, channel_id, team_id = dims
    increments = {name: F(name) + value for name, value in counts.items() if value}
    # NULLs never collide in a unique constraint, so match them explicitly.
    match = Q(model=model, **period)
    match &= Q(user_id=user_id) if user_id is not None else Q(user__isnull=True)
    match &= Q(key_id=key_id) if key_id is not None else Q(key__isnull=True)
    match &= Q(channel_id=channel_id) if channel_id is not None else Q(channel__isnull=True)
    match &= Q(team_id=team_id) if team_id is not None else Q(team__isnull=True)
    if rollup.objects.filter(match).update(**increments):
        return
    try:
        with transaction.atomic():
            rollup.objects.create(
                **period, user_id=user_id, key_id=key_id, model=model, channel_id=channel_id, team_id=team_id, **counts
            )
    except IntegrityError:  # another process created the bucket meanwhile
        rollup.objects.filter(match).update(**increments)


def _send_budget_alerts(owner_id: int, budget_ids: list[int]) -> None:
    from keys.budgets.services import send_alerts

    close_old_connections()
    try:
        send_alerts(budget_ids)
    except Exception:
        logger.exception("budget alert for user %s failed", owner_id)


def event_from_json(line: bytes) -> UsageEvent:
    data = orjson.loads(line)
    data["created"] = dt.datetime.fromisoformat(data["created"])
    if "pricing" not in data and (data.get("prompt_tokens") or data.get("completion_tokens")):
        # journaled by a gateway from before prices: its cost is unknown, not 0
        data["cost_nanos"], data["pricing"] = None, Pricing.NONE
    return UsageEvent(**data)


@dataclass(slots=True)
class Segment:
    """One journal file: the events recorded between two flushes."""

    path: Path
    fd: int | None  # open for appending until sealed and synced
    count: int = 0
    events: list[UsageEvent] | None = None  # in memory too (None: read it back from the file)
    tried: bool = False  # a write was attempted: its outcome may be unknown, so retries skip duplicates
    overflowed: bool = False  # recorded past the memory bound: read back from the file


class Journal:
    """This process's usage journal: `<data folder>/usage-journal/<process id>/<n>.jsonl`, one JSON
    line per event, files 0600 in 0700 folders. The folder is locked (flock) for the process's
    life; a folder whose lock is free belonged to a process that died, and its files are adopted."""

    def __init__(self) -> None:
        self.dir: Path | None = None
        self._lock_fd: int | None = None
        self._seq = 0

    @property
    def root(self) -> Path:
        return Path(settings.GATEWAY_STATE_DIR) / "usage-journal"

    def open(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        own = self.root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        own.mkdir(mode=0o700)
        fd = os.open(own / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.dir, self._lock_fd = own, fd

    def new_segment(self) -> Segment:
        assert self.dir is not None
        self._seq += 1
        path = self.dir / f"{self._seq:09d}.jsonl"
        return Segment(path, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))

    def adopt_orphans(self) -> list[Segment]:
        """The segments of dead processes (their folder's lock is free), moved into ours."""
        adopted: list[Segment] = []
        if self.dir is None:
            return adopted
        for other in sorted(self.root.iterdir()):
            if other == self.dir or not other.is_dir() or other.name == "failed":
                continue
            try:
                fd = os.open(other / "lock", os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # alive
            try:
                for old in sorted(other.glob("*.jsonl")):
                    if old.stat().st_size == 0:
                        old.unlink()
                        continue
                    self._seq += 1
                    path = self.dir / f"{self._seq:09d}.jsonl"
                    os.replace(old, path)
                    # Its last write may have been cut (SIGKILL): such a batch may also be in the
                    # database already, so it is written as a replay.
                    adopted.append(Segment(path, None, tried=True))
                (other / "lock").unlink(missing_ok=True)
                other.rmdir()
            except OSError as exc:
                logger.warning("could not adopt the usage journal %s: %s", other, exc)
            finally:
                os.close(fd)
        if adopted:
            logger.warning("adopted %d usage journal files of a process that stopped", len(adopted))
        return adopted

    def quarantine(self, seg: Segment) -> None:
        """Move a file whose batch cannot be written to `usage-journal/failed/` for an operator."""
        if seg.path == Path():
            return
        failed = self.root / "failed"
        try:
            failed.mkdir(mode=0o700, exist_ok=True)
            os.replace(seg.path, failed / f"{uuid.uuid4().hex[:8]}-{seg.path.name}")
        except OSError as exc:
            logger.error("could not set aside %s: %s", seg.path, exc)

    def close(self, *, remove: bool) -> None:
        if self.dir is not None and remove:
            for leftover in self.dir.glob("*.jsonl"):
                if leftover.stat().st_size == 0:
                    leftover.unlink()
            if not any(self.dir.glob("*.jsonl")):
                (self.dir / "lock").unlink(missing_ok=True)
                self.dir.rmdir()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
        self.dir, self._lock_fd = None, None


def read_segment(path: Path) -> list[UsageEvent]:
    events = []
    for line in path.read_bytes().splitlines():
        try:
            events.append(event_from_json(line))
        except (ValueError, TypeError):  # a line cut by a kill: it was never counted anywhere else
            logger.warning("skipping a torn line in the usage journal %s", path.name)
    return events


class UsageWriter:
    """Buffers events in memory and in the journal, and writes them in batches from one thread."""

    ADOPT_EVERY = 10.0  # seconds between looks for journals of processes that died
    RETRY_EVERY = 1.0  # while the database is down
    JOURNAL_RETRY_EVERY = 10.0  # seconds before a journal that could not be written is tried again

    def __init__(self, interval: float | None = None) -> None:
        self._interval = interval
        self._current: Segment | None = None
        self._buffer: list[UsageEvent] = []
        self._sealed: list[Segment] = []
        self.journal = Journal()
        self._journal_failed = False
        self._journal_retry_at = 0.0
        self.recorded = 0  # events since start (the heap is settled again once traffic warmed it)
        self._task: asyncio.Task[None] | None = None
        # Its own thread (and so its own connection): batches in order, and a slow or locked write
        # never delays the gateway's key and model lookups.
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="usage-writer", initializer=use_timeouts, initargs=("gateway",)
        )
        self._alerts: ThreadPoolExecutor | None = None
        self._stopping = False
        self._down_since: float | None = None
        self._last_try = 0.0
        self._last_adopt = 0.0

    def _segment(self) -> Segment | None:
        if self._journal_failed and (self._current is not None or time.monotonic() < self._journal_retry_at):
            return None  # the file a write failed on is sealed as it is; a new one is tried later
        if self._current is None:
            try:
                if self.journal.dir is None:
                    self.journal.open()
                self._current = self.journal.new_segment()
            except OSError as exc:
                self._journal_lost(exc)
                return None
            if self._journal_failed:
                self._journal_failed = False
                logger.warning("usage journal writable again")
        return self._current

    def _journal_lost(self, exc: OSError) -> None:
        """The journal cannot be written (a full disk, above all): usage goes on in memory, to the
        database as before, and the journal is tried again a little later. Said once per episode."""
        if not self._journal_failed:
            reason = faults.disk_full_message() if faults.is_disk_full(exc) else str(exc)
            logger.error("usage journal unavailable (%s): usage is kept in memory only until it can be written", reason)
        self._journal_failed = True
        self._journal_retry_at = time.monotonic() + self.JOURNAL_RETRY_EVERY

    def alert_budgets(self, owner_id: int, budget_ids: list[int]) -> None:
        """Send budget alerts off the request path (their own thread: a slow webhook delays no batch)."""
        if self._alerts is None:
            self._alerts = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="budget-alerts", initializer=use_timeouts, initargs=("gateway",)
            )
        self._alerts.submit(_send_budget_alerts, owner_id, budget_ids)

    def record(self, event: UsageEvent) -> None:
        seg = self._segment()
        if seg is not None:
            assert seg.fd is not None
            try:
                os.write(seg.fd, orjson.dumps(event) + b"\n")
            except OSError as exc:  # never fail the request for the journal: this event is in memory
                self._journal_lost(exc)
                seg = None
            else:
                seg.count += 1
        if seg is None or len(self._buffer) < int(hot.GATEWAY_USAGE_QUEUE):
            self._buffer.append(event)
        else:
            seg.overflowed = True  # past the memory bound: this batch is read back from its file
        self.recorded += 1
        metrics.observe(event)

    @property
    def pending(self) -> int:
        """Events queued, not yet written."""
        return self.journaled + (self._current.count if self._current is not None else len(self._buffer))

    @property
    def journaled(self) -> int:
        """Events in sealed journal files waiting for the database."""
        return sum(seg.count for seg in self._sealed)

    @property
    def interval(self) -> float:
        if self._interval:
            return self._interval
        return float(settings.GATEWAY_USAGE_FLUSH_INTERVAL)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._segment()
            self._adopt()
            self._task = asyncio.get_running_loop().create_task(self._run())

    def _adopt(self) -> None:
        self._last_adopt = time.monotonic()
        try:
            for seg in self.journal.adopt_orphans():
                seg.count = sum(1 for _ in seg.path.open("rb"))
                self._sealed.append(seg)
        except OSError as exc:
            logger.warning("looking for usage journals to adopt failed: %s", exc)

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval)
            if time.monotonic() - self._last_adopt > self.ADOPT_EVERY:
                self._adopt()
            await self.flush()

    def _seal(self) -> None:
        seg = self._current
        if seg is not None:
            if seg.count == 0 and not self._buffer:
                return
            seg.events = None if seg.overflowed else self._buffer
            self._current = None
        else:  # no journal: the memory buffer is all there is
            if not self._buffer:
                return
            seg = Segment(Path(), None, count=len(self._buffer), events=self._buffer)
        self._buffer = []
        self._sealed.append(seg)
        # Past the memory bound, the oldest waiting batches are kept on disk only.
        kept = 0
        for waiting in reversed(self._sealed):
            if waiting.events is not None:
                kept += len(waiting.events)
                if kept > int(hot.GATEWAY_USAGE_QUEUE) and waiting.path != Path():
                    waiting.events = None

    async def flush(self) -> None:
        if self._down_since is not None and time.monotonic() - self._last_try < self.RETRY_EVERY:
            return
        if not self._sealed:
            # While older batches wait for the database, the current file keeps growing: the
            # outage's records are then one batch, not one per flush interval.
            self._seal()
        if not self._sealed:
            return
        loop = asyncio.get_running_loop()
        while self._sealed:
            seg = self._sealed[0]
            self._last_try = time.monotonic()
            try:
                await loop.run_in_executor(self._executor, self._write_segment, seg)
            except Exception as exc:
                metrics.FLUSH_ERRORS.inc()
                if not is_database_outage(exc):
                    # Not the database being away: this batch cannot be written as it is (a bug, a
                    # row it references deleted). Set it aside, so it does not block the others.
                    logger.exception("a usage batch of %d records cannot be written; kept aside", seg.count)
                    self._sealed.pop(0)
                    self.journal.quarantine(seg)
                    continue
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    logger.error(
                        "writing usage failed (%s): %d records wait in the journal until the database answers",
                        faults.disk_full_message() if faults.is_disk_full(exc) else exc.__class__.__name__,
                        self.journaled,
                    )
                return
            self._sealed.pop(0)
            if self._down_since is not None:
                logger.warning("usage writes resumed after %.0f s", time.monotonic() - self._down_since)
                self._down_since = None

    @staticmethod
    def _write_segment(seg: Segment) -> None:
        if seg.fd is not None:
            try:
                os.fsync(seg.fd)
            except OSError:
                if seg.events is None:
                    raise  # the file is the only copy
                # The journal is a copy of what is in memory: a disk that cannot take it (full)
                # must not keep the batch from the database.
            finally:
                os.close(seg.fd)
                seg.fd = None
        events = seg.events if seg.events is not None else read_segment(seg.path)
        replay, seg.tried = seg.tried, True
        UsageWriter._write(events, replay=replay)
        if seg.path != Path():
            seg.path.unlink(missing_ok=True)

    @staticmethod
    def _write(batch: list[UsageEvent], *, replay: bool = False) -> None:
        close_old_connections()

        def write() -> None:
            with transaction.atomic():
                write_batch(batch, replay=replay)

        # A key, user, team or channel a record names, deleted since its request, fails the commit
        # on that foreign key: written without it (else the whole batch, anyone's, is set aside).
        retry_when_locked(write, mend=lambda: empty_deleted_references(UsageRecord, batch, _REFERENCES))

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._down_since = None  # one last try, whatever the last one said
        await self.flush()
        if not self._sealed:
            # A flush the cancel cut short left its batch sealed: the one above wrote that batch
            # only, and what was recorded since is still in the current file.
            await self.flush()
        if self._sealed:
            logger.warning("%d usage records stay in the journal for the next gateway to write", self.journaled)
        await asyncio.get_running_loop().run_in_executor(self._executor, connections.close_all)
        current = self._current
        if current is not None and current.fd is not None:
            os.close(current.fd)  # its records stay in the file for the next gateway
        self.journal.close(remove=not self._sealed and (current is None or current.count == 0))
        self._sealed, self._current, self._buffer = [], None, []
