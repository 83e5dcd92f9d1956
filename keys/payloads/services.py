"""Request logs: storing a logged request (redacted, compressed), reading it back, pruning.

The gateway hands finished calls of keys whose `PayloadLogging` is on to its payload writer
thread (`gateway.payloads`), which calls `build()` there: redaction and compression never run on
the event loop, nor before the first byte.
"""

from __future__ import annotations

import datetime as dt
import zlib
from dataclasses import dataclass
from typing import Any

import orjson
from django.utils import timezone
from django.utils.translation import gettext_noop

from keys.models import PAYLOAD_LOGGING_RELATED, Key, RequestPayload, payload_logging_of
from portal import audit
from portal.choices import AuditAction
from portal.i18n import Message

from .redact import Redactor

COMPRESSION_LEVEL = 6


@dataclass(slots=True)
class Captured:
    """One logged call as the gateway saw it: bodies as bytes, at most the configured size each."""

    created: dt.datetime
    request_id: str
    key_id: int | None
    user_id: int | None
    model: str
    surface: str
    stream: bool
    status: str
    http_status: int
    retention_days: int
    request: bytes
    response: bytes  # a non-streaming answer's body, or a stream's assembled text
    request_bytes: int
    response_bytes: int
    truncated: bool
    sse: bool = False  # `response` is still the relayed SSE (the writer assembles its text)


def redact_body(raw: bytes, redactor: Redactor) -> bytes:
    """A JSON body with every string redacted (re-encoded), or any other body redacted as text."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return redactor.text(raw.decode(errors="replace")).encode()
    return orjson.dumps(redactor.json(data))


def build(captured: Captured, redactor: Redactor) -> RequestPayload:
    """The row for one captured call: redacted, then compressed (nothing unredacted is kept)."""
    before = redactor.count
    request = redact_body(captured.request, redactor) if captured.request else b""
    response = redact_body(captured.response, redactor) if captured.response else b""
    return RequestPayload(
        created=captured.created,
        expires_at=captured.created + dt.timedelta(days=captured.retention_days),
        request_id=captured.request_id[:64],
        key_id=captured.key_id,
        user_id=captured.user_id,
        model=redactor.text(captured.model)[:128],  # shown in the list: a secret sent as a model name too
        surface=captured.surface,
        stream=captured.stream,
        status=captured.status,
        http_status=captured.http_status,
        request_body=zlib.compress(request, COMPRESSION_LEVEL),
        response_body=zlib.compress(response, COMPRESSION_LEVEL),
        request_bytes=captured.request_bytes,
        response_bytes=captured.response_bytes,
        truncated=captured.truncated,
        redactions=redactor.count - before,
    )


def bodies(payload: RequestPayload) -> dict[str, Any]:
    """The stored bodies as text (JSON pretty-printed), for an admin. Use `read()` to also audit."""
    return {"request": _text(payload.request_body), "response": _text(payload.response_body)}


# Where the bodies were read, for the audit entry.
READ_VIA = {
    "web": Message(gettext_noop("read the request log's bodies (web)")),
    "API": Message(gettext_noop("read the request log's bodies (API)")),
}


def read(payload: RequestPayload, *, reader: Any, via: str) -> dict[str, Any]:
    """The bodies of `payload`, with an audit entry naming `reader` (`via`: "web" or "API")."""
    audit.record(AuditAction.ACTION, payload, message=READ_VIA[via], actor=reader)
    return bodies(payload)


def _text(blob: bytes | memoryview) -> str:
    raw = zlib.decompress(bytes(blob))
    try:
        return orjson.dumps(orjson.loads(raw), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")


def prune(now: dt.datetime | None = None, **kwargs: Any) -> dict[str, int]:
    """Delete stored bodies past their retention (the daily prune's `daily_prune` receiver)."""
    from keys.usage.retention import delete_in_batches

    return {"request_payloads": delete_in_batches(RequestPayload, expires_at__lt=now or timezone.now())}


@dataclass(slots=True)
class LoggedKey:
    name: str
    masked: str
    retention_days: int


def logged_keys(user: Any) -> list[LoggedKey]:
    """The user's usable keys whose requests are logged now, for the notice on the Connect page."""
    out = []
    keys = Key.objects.not_revoked().filter(owner=user).select_related(*PAYLOAD_LOGGING_RELATED)
    for key in keys.order_by("name"):
        policy = payload_logging_of(key)
        if policy is not None and policy.enabled:
            out.append(LoggedKey(key.shown_name, key.masked, policy.retention_days))
    return out
