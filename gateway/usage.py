"""Usage: what a call used, and the records of finished calls, written in batches off the request path.

The gateway calls `writer.record(UsageEvent(...))` (an O(1) append). A background task in the
gateway process flushes every `GATEWAY_USAGE_FLUSH_INTERVAL` seconds (0.5 by default) and at
shutdown: one multi-row insert of UsageRecord rows, one F()-increment per (day, user, key, model,
channel, team) bucket of UsageDaily (cached prompt tokens included), and one `last_used_at`
update per key. The reports over these rows are `keys.usage.services`'s.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import math
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings
from django.db import IntegrityError, OperationalError, close_old_connections, connection, connections, transaction
from django.db.models import F, Q

from keys.choices import UsageStatus
from keys.models import Key, UsageDaily, UsageRecord

from . import metrics

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


def estimate_tokens(value: Any) -> int:
    """A cheap prompt-size estimate (≈4 characters a token) for reservations and for usage when an
    upstream reports none. Strings, lists and OpenAI message/content-part shapes are understood."""
    if isinstance(value, str):
        return math.ceil(len(value) / 4) if value else 0
    if isinstance(value, list):
        return sum(estimate_tokens(v) for v in value)
    if isinstance(value, dict):
        total = 0
        for k in ("content", "text", "input", "prompt", "arguments"):
            if k in value:
                total += estimate_tokens(value[k])
        if "tool_calls" in value:
            total += estimate_tokens(value["tool_calls"])
        if "function" in value:
            total += estimate_tokens(value["function"])
        return total
    return 0


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

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


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
)


def _insert_records(events: list[UsageEvent]) -> None:
    """One multi-row INSERT per batch: ORM object construction cost more CPU than the insert, and
    the writer shares the gateway process with the hot path."""
    table = connection.ops.quote_name(UsageRecord._meta.db_table)
    cols = ", ".join(connection.ops.quote_name(c) for c in _RECORD_COLUMNS)
    adapt = connection.ops.adapt_datetimefield_value if connection.vendor != "postgresql" else (lambda v: v)
    rows = [
        (
            adapt(e.created),
            e.request_id[:64],
            e.key_id,
            e.user_id,
            e.model[:128],
            e.channel_id,
            e.surface,
            e.stream,
            max(e.prompt_tokens, 0),
            max(e.completion_tokens, 0),
            max(e.total_tokens, 0),
            e.estimated,
            e.status,
            e.http_status,
            e.error[:300],
            e.latency_ms,
            e.ttft_ms,
            e.team_id,
            max(e.cached_tokens, 0),
            max(e.cache_creation_tokens, 0),
            orjson.dumps(e.route_explanation).decode(),
            e.upstream_request_id[:100],
        )
        for e in events
    ]
    if connection.vendor == "postgresql":
        # COPY: no SQL text to build, rows encoded in C.
        connection.ensure_connection()
        with connection.connection.cursor() as raw, raw.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    per_row = "(" + ", ".join(["%s"] * len(_RECORD_COLUMNS)) + ")"
    step = max(1, 900 // len(_RECORD_COLUMNS))  # SQLite's bound-parameter limit
    with connection.cursor() as cursor:
        for i in range(0, len(rows), step):
            chunk = rows[i : i + step]
            # Only our own quoted identifiers and placeholders go into the text; values are bound.
            sql = f"INSERT INTO {table} ({cols}) VALUES " + ", ".join([per_row] * len(chunk))  # noqa: S608
            cursor.execute(sql, [v for row in chunk for v in row])


def write_batch(events: list[UsageEvent]) -> None:
    """Persist a batch: records, daily buckets (F() upserts) and keys' last use. Safe to call from
    any thread with a database connection."""
    if not events:
        return
    _insert_records(events)
    Bucket = tuple[dt.date, int | None, int | None, str, int | None, int | None]
    buckets: dict[Bucket, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0, 0, 0, 0])
    last_used: dict[int, dt.datetime] = {}
    for e in events:
        b = buckets[(e.created.date(), e.user_id, e.key_id, e.model[:128], e.channel_id, e.team_id)]
        b[0] += 1
        b[1] += 0 if e.status == UsageStatus.OK else 1
        b[2] += e.prompt_tokens
        b[3] += e.completion_tokens
        b[4] += e.total_tokens
        b[5] += 1 if e.estimated else 0
        b[6] += e.cached_tokens
        b[7] += e.cache_creation_tokens
        if e.key_id is not None and e.status != UsageStatus.RATE_LIMITED:
            last_used[e.key_id] = max(last_used.get(e.key_id, e.created), e.created)
    for (day, user_id, key_id, model, channel_id, team_id), counts in buckets.items():
        req, err, pt, ct, tt, est, cached, written = counts
        increments = {
            "requests": F("requests") + req,
            "errors": F("errors") + err,
            "prompt_tokens": F("prompt_tokens") + pt,
            "completion_tokens": F("completion_tokens") + ct,
            "total_tokens": F("total_tokens") + tt,
            "estimated_requests": F("estimated_requests") + est,
            "cached_tokens": F("cached_tokens") + cached,
            "cache_creation_tokens": F("cache_creation_tokens") + written,
        }
        # NULLs never collide in a unique constraint, so match them explicitly.
        match = Q(day=day, model=model)
        match &= Q(user_id=user_id) if user_id is not None else Q(user__isnull=True)
        match &= Q(key_id=key_id) if key_id is not None else Q(key__isnull=True)
        match &= Q(channel_id=channel_id) if channel_id is not None else Q(channel__isnull=True)
        match &= Q(team_id=team_id) if team_id is not None else Q(team__isnull=True)
        if UsageDaily.objects.filter(match).update(**increments):
            continue
        try:
            with transaction.atomic():
                UsageDaily.objects.create(
                    day=day,
                    user_id=user_id,
                    key_id=key_id,
                    model=model,
                    channel_id=channel_id,
                    team_id=team_id,
                    requests=req,
                    errors=err,
                    prompt_tokens=pt,
                    completion_tokens=ct,
                    total_tokens=tt,
                    estimated_requests=est,
                    cached_tokens=cached,
                    cache_creation_tokens=written,
                )
        except IntegrityError:  # another process created the bucket meanwhile
            UsageDaily.objects.filter(match).update(**increments)
    for key_id, when in last_used.items():
        Key.objects.filter(pk=key_id).filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=when)).update(
            last_used_at=when
        )


class UsageWriter:
    """Buffers events in memory and writes them in batches from one background thread."""

    def __init__(self, interval: float | None = None) -> None:
        self._interval = interval
        self._buffer: list[UsageEvent] = []
        self.recorded = 0  # events since start (the heap is settled again once traffic warmed it)
        self._task: asyncio.Task[None] | None = None
        # Its own thread (and so its own connection): batches in order, and a slow or locked write
        # never delays the gateway's key and model lookups.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="usage-writer")
        self._stopping = False

    def record(self, event: UsageEvent) -> None:
        self._buffer.append(event)
        self.recorded += 1
        metrics.observe(event)

    @property
    def pending(self) -> int:
        """Events queued, not yet written."""
        return len(self._buffer)

    @property
    def interval(self) -> float:
        if self._interval:
            return self._interval
        return float(settings.GATEWAY_USAGE_FLUSH_INTERVAL)

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._stopping = False
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.interval)
            await self.flush()

    async def flush(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._write, batch)
        except Exception:
            metrics.FLUSH_ERRORS.inc()
            logger.exception("writing %d usage records failed; they are kept for the next flush", len(batch))
            self._buffer[:0] = batch[:50_000]

    @staticmethod
    def _write(batch: list[UsageEvent]) -> None:
        close_old_connections()
        for attempt in range(5):
            try:
                with transaction.atomic():
                    write_batch(batch)
                return
            except OperationalError as exc:  # SQLite busy with another process's write
                if "locked" not in str(exc) or attempt == 4:
                    raise
                time.sleep(0.05 * (attempt + 1))

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._executor, connections.close_all)
