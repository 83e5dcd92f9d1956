"""Request logs on the gateway: what a logged call sent and got, handed to a writer thread.

Only keys whose `PayloadLogging` policy is on are captured (`KeyInfo.payload_days`, read from
the per-process snapshot: no query per request). The call keeps the request body and what the
client was sent, bounded (`Call.log_response`); `Call.finish` queues one `Captured` with
`writer.record()` (a non-blocking put on a bounded queue; a full queue drops the log, never the
request). The writer's own thread assembles a stream's text, redacts (detect-secrets), compresses
and inserts the rows on its own database connection: none of it runs on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading

import orjson
from django.conf import settings
from django.db import close_old_connections, connections, transaction

from keys.models import RequestPayload
from keys.payloads.redact import Redactor
from keys.payloads.services import Captured, build
from portal.db import empty_deleted_references, retry_when_locked, use_timeouts

logger = logging.getLogger(__name__)

# A stream is captured as relayed (SSE framing and JSON around each token) up to this multiple of
# GATEWAY_PAYLOAD_MAX_BYTES; its assembled text is then cut at GATEWAY_PAYLOAD_MAX_BYTES.
RAW_STREAM_FACTOR = 32
BATCH = 50
_STOP = object()


def max_bytes() -> int:
    return int(settings.GATEWAY_PAYLOAD_MAX_BYTES)


def stream_text(raw: bytes) -> str:
    """The text a client was streamed, from the SSE events it got: Chat/Completions deltas,
    Anthropic content deltas, Responses text deltas (tool-call arguments included)."""
    parts: list[str] = []
    for line in raw.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        try:
            event = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            _collect(event, parts)
    return "".join(parts)


def _collect(event: dict[str, object], parts: list[str]) -> None:
    choices = event.get("choices")
    if isinstance(choices, list):  # Chat Completions, Completions
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                for name in ("reasoning_content", "content"):
                    if isinstance(delta.get(name), str):
                        parts.append(delta[name])
                for call in delta.get("tool_calls") or ():
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        parts.append(fn["arguments"])
            elif isinstance(choice.get("text"), str):
                parts.append(choice["text"])
        return
    delta = event.get("delta")
    if isinstance(delta, dict):  # Anthropic content_block_delta
        for name in ("text", "thinking", "partial_json"):
            if isinstance(delta.get(name), str):
                parts.append(delta[name])
    elif isinstance(delta, str) and str(event.get("type", "")).endswith(".delta"):  # Responses
        parts.append(delta)


def _assembled(captured: Captured) -> Captured:
    """A stream's relayed SSE replaced by its text, cut at GATEWAY_PAYLOAD_MAX_BYTES."""
    if captured.sse:
        text = stream_text(captured.response).encode()
        cap = max_bytes()
        captured.truncated = captured.truncated or len(text) > cap
        captured.response, captured.sse = text[:cap], False
    return captured


class PayloadWriter:
    """A bounded queue and one thread that redacts, compresses and stores captured calls. The
    thread starts with the first logged call, so a gateway that logs nothing runs none."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Captured | object] | None = None
        self._thread: threading.Thread | None = None
        self.dropped = 0  # logs lost to a full queue (the requests themselves were served)
        self.written = 0

    def record(self, captured: Captured) -> None:
        """Queue one captured call; never blocks."""
        if self._queue is None or self._thread is None or not self._thread.is_alive():
            self._start()
        assert self._queue is not None
        try:
            self._queue.put_nowait(captured)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                logger.warning("request log queue full: %d logged requests dropped so far", self.dropped)

    def _start(self) -> None:
        self._queue = queue.Queue(maxsize=max(1, int(settings.GATEWAY_PAYLOAD_QUEUE)))
        self._thread = threading.Thread(target=self._run, args=(self._queue,), name="payload-writer", daemon=True)
        self._thread.start()

    def _run(self, q: queue.Queue[Captured | object]) -> None:
        use_timeouts("gateway")
        redactor = Redactor()
        stopping = False
        while not stopping:
            batch = [q.get()]
            while len(batch) < BATCH:
                try:
                    batch.append(q.get_nowait())
                except queue.Empty:
                    break
            captured = [c for c in batch if isinstance(c, Captured)]
            stopping = len(captured) < len(batch)
            if not captured:
                continue
            try:
                self._write(captured, redactor)
                self.written += len(captured)
            except Exception:  # evidence, not accounting: a lost batch is logged, the thread lives on
                logger.exception("storing %d request logs failed", len(batch))
        connections.close_all()

    @staticmethod
    def _write(batch: list[Captured], redactor: Redactor) -> None:
        rows = [build(_assembled(c), redactor) for c in batch]
        close_old_connections()

        def write() -> None:
            with transaction.atomic():
                RequestPayload.objects.bulk_create(rows)

        # A key or user deleted since the request: its logs are stored without it, and the rest with them.
        retry_when_locked(write, mend=lambda: empty_deleted_references(RequestPayload, rows, ("key_id", "user_id")))

    async def stop(self) -> None:
        """Store what is queued, then end the thread (at the gateway's shutdown)."""
        thread, q = self._thread, self._queue
        if thread is None or q is None or not thread.is_alive():
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, q.put, _STOP)
        await loop.run_in_executor(None, thread.join, 30.0)
        self._thread = None
