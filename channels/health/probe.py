"""The probe itself: async, Django-free, so one event loop checks hundreds of channels at once.

`probe_many()` runs `probe_one()` for every target with a bounded number in flight (a semaphore)
over one shared `httpx.AsyncClient`. Per channel:

1. liveness: `GET {root}/health` (vLLM, llama.cpp) or `GET {base}/models` (others);
2. discovery: the served models and their context windows (vLLM `/v1/models` → `max_model_len`,
   llama.cpp `/props` → `default_generation_settings.n_ctx`); for vLLM and llama.cpp only when the
   caller asks (limits rarely change, so the service refreshes them hourly and on Check now);
3. latency (optional): a tiny streaming chat completion timing connect, first byte, first token,
   total and tokens/s.

A failure stops at the step that failed; the outcome says which error class it was, and why in a
`portal.i18n.Message` (it needs no Django settings until it is rendered), so the channel's health
messages read in the reader's language. What is ours is a msgid: the step, the HTTP status, "cannot
connect". What the other side said stays verbatim, as a value inside it: the upstream's own error
text (its JSON `message`, an error event) and the network library's reason (`str(exc)`) are data,
not strings of ours to translate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpcore
import httpx
from django.utils.translation import gettext_noop

from channels.baseurl import root_url
from portal.i18n import Message
from portal.validators import sendable_in_header

from .netbackend import AsyncioBackend

logger = logging.getLogger(__name__)

PROMPT = "Reply with the single word: ok"
MIN_CHUNKS_FOR_RATE = 3  # token-bearing stream events, so at least two gaps are measured
MIN_SECONDS_FOR_RATE = 0.005
ANTHROPIC_VERSION = "2023-06-01"

# The probe's steps, named in its messages ("liveness: HTTP 503").
LIVENESS = gettext_noop("liveness")
MODEL_LIST = gettext_noop("model list")
PROPS = gettext_noop("props")
LATENCY = gettext_noop("latency probe")


@dataclass(frozen=True, slots=True)
class Target:
    channel_id: int
    kind: str
    base_url: str  # canonical, ending in /v1
    api_key: str = ""
    model: str = ""  # upstream model id for the latency probe; blank: the first one served
    # The other routes' ids: when a model server's list leaves `model` out, the first of these it
    # lists is probed, else the first it lists (the channel's health, not a route's typo)
    others: tuple[str, ...] = ()
    inference: bool = True
    max_tokens: int = 4
    discover: bool = True  # read the model list and limits (vLLM/llama.cpp: extra requests, so not every round)
    embedding: bool = False  # `model` is an embedding model (channels.choices.ModelKind): timed on an embedding


@dataclass(slots=True)
class Outcome:
    channel_id: int
    ok: bool = False
    http_status: int | None = None
    # connect, timeout, auth, http_4xx, http_429, http_5xx, protocol, stalled; config: the channel's
    # own settings cannot work (only an edit helps); internal: the probe itself failed
    error: str = ""
    error_message: Message = field(default_factory=lambda: Message.verbatim(""))
    model: str = ""
    connect_ms: float | None = None
    ttfb_ms: float | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None
    tokens: int | None = None
    tokens_per_s: float | None = None
    served: dict[str, int | None] = field(default_factory=dict)  # model id → context window (None: unknown)
    started: float = 0.0

    @property
    def auth_rejected(self) -> bool:
        return self.error == "auth"


class ProbeFailure(Exception):
    def __init__(self, error: str, message: Message, status: int | None = None) -> None:
        super().__init__(message.english)
        self.error, self.message, self.status = error, message, status


def _at(step: str, msgid: str, **params: object) -> Message:
    """`msgid` (a sentence with `%(step)s`) about one step of the probe."""
    return Message(msgid, step=Message(step), **params)


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def _headers(target: Target) -> dict[str, str]:
    if not target.api_key:
        return {}
    if not sendable_in_header(target.api_key):  # stored before the form refused such keys
        raise ProbeFailure(
            "config",
            Message(
                gettext_noop(
                    "the API key cannot be sent in an HTTP header (it has non-ASCII or control characters): "
                    "enter the key again"
                )
            ),
        )
    if target.kind == "anthropic":
        return {"x-api-key": target.api_key, "anthropic-version": ANTHROPIC_VERSION}
    return {"Authorization": f"Bearer {target.api_key}"}


def _status_failure(resp: httpx.Response, what: str) -> ProbeFailure:
    code = resp.status_code
    if code in (401, 403):
        return ProbeFailure(
            "auth",
            _at(what, gettext_noop("%(step)s: HTTP %(status)s, the upstream rejected the API key"), status=code),
            code,
        )
    if code == 429:
        return ProbeFailure(
            "http_429", _at(what, gettext_noop("%(step)s: HTTP 429, rate limited by the upstream")), code
        )
    kind = "http_5xx" if code >= 500 else "http_4xx"
    detail = ""
    try:
        body = resp.json()
        detail = str((body.get("error") or {}).get("message") or body.get("message") or "")[:150]
    except Exception:  # the body is whatever the upstream sent; its shape is not ours to trust
        detail = ""
    if detail:  # the upstream's own words: a value, shown as it sent them
        return ProbeFailure(
            kind, _at(what, gettext_noop("%(step)s: HTTP %(status)s (%(detail)s)"), status=code, detail=detail), code
        )
    return ProbeFailure(kind, _at(what, gettext_noop("%(step)s: HTTP %(status)s"), status=code), code)


class _Timer:
    """httpx trace hook: remembers how long the first TCP (and TLS) connect took."""

    def __init__(self) -> None:
        self.connect_ms: float | None = None
        self._started: float | None = None

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == "connection.connect_tcp.started":
            self._started = time.perf_counter()
        elif name in ("connection.connect_tcp.complete", "connection.start_tls.complete") and self._started:
            self.connect_ms = _ms(self._started)


async def _get_json(client: httpx.AsyncClient, url: str, target: Target, timer: _Timer, what: str) -> Any:
    resp = await client.get(url, headers=_headers(target), extensions={"trace": timer})
    if resp.status_code >= 400:
        raise _status_failure(resp, what)
    try:
        return resp.json()
    except ValueError:
        if what == "liveness" and resp.status_code < 300:
            return None  # some /health endpoints answer 200 with an empty body
        raise ProbeFailure(
            "protocol", _at(what, gettext_noop("%(step)s: the answer is not JSON")), resp.status_code
        ) from None


async def _every_slot_busy(client: httpx.AsyncClient, target: Target) -> bool:
    """Is every slot of a llama.cpp server generating (its `/slots`, on unless `--no-slots`)? Then
    the latency probe would wait for a slot without a byte (llama.cpp sends a stream's headers with
    its first token) and time out on a server that is only busy: a single-slot server answering a
    long generation would be marked down, and its alerts sent. Any other answer: not known busy."""
    try:
        resp = await client.get(f"{root_url(target.base_url)}/slots", headers=_headers(target))
        slots = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return False
    return (
        isinstance(slots, list)
        and bool(slots)
        and all(isinstance(slot, dict) and slot.get("is_processing") is True for slot in slots)
    )


def _parse_models(body: Any) -> dict[str, int | None]:
    served: dict[str, int | None] = {}
    items = body.get("data") if isinstance(body, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("id"):
            ctx = item.get("max_model_len")
            served[str(item["id"])] = int(ctx) if isinstance(ctx, int) and ctx > 0 else None
    return served


async def _discover(client: httpx.AsyncClient, target: Target, timer: _Timer, models_body: Any) -> dict[str, Any]:
    if models_body is None:
        models_body = await _get_json(client, f"{target.base_url}/models", target, timer, MODEL_LIST)
    served = _parse_models(models_body)
    if target.kind == "llamacpp":
        try:
            props = await _get_json(client, f"{root_url(target.base_url)}/props", target, timer, PROPS)
            n_ctx = ((props or {}).get("default_generation_settings") or {}).get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                served = {m: n_ctx for m in served} or {}
        except ProbeFailure as exc:
            if exc.error == "auth":
                raise
    return served


async def _stream_chat(client: httpx.AsyncClient, target: Target, model: str, out: Outcome, timer: _Timer) -> None:
    anthropic = target.kind == "anthropic"
    url = f"{target.base_url}/messages" if anthropic else f"{target.base_url}/chat/completions"
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": target.max_tokens,
        "stream": True,
    }
    if not anthropic:
        body["stream_options"] = {"include_usage": True}
        body["temperature"] = 0
    start = time.perf_counter()
    tokens = 0
    usage_tokens: int | None = None
    first_token_at: float | None = None
    last_token_at = 0.0
    async with client.stream("POST", url, json=body, headers=_headers(target), extensions={"trace": timer}) as resp:
        out.ttfb_ms = _ms(start)
        out.http_status = resp.status_code
        if resp.status_code >= 400:
            await resp.aread()
            raise _status_failure(resp, LATENCY)
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise ProbeFailure(
                    "protocol", _at(LATENCY, gettext_noop("%(step)s: a stream event is not JSON")), resp.status_code
                ) from None
            if not isinstance(event, dict):
                continue
            if event.get("error"):
                said = str((event["error"] or {}).get("message", "error event"))[:150]  # the upstream's words
                raise ProbeFailure(
                    "stream_error", _at(LATENCY, gettext_noop("%(step)s: %(said)s"), said=said), resp.status_code
                )
            text = _token_text(event, anthropic)
            if text:
                tokens += 1
                last_token_at = time.perf_counter()
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    out.ttft_ms = round((first_token_at - start) * 1000, 2)
            usage = event.get("usage") or (event.get("message") or {}).get("usage")
            if isinstance(usage, dict):
                usage_tokens = usage.get("completion_tokens") or usage.get("output_tokens") or usage_tokens
    out.total_ms = _ms(start)
    if first_token_at is None:
        raise ProbeFailure(
            "protocol", _at(LATENCY, gettext_noop("%(step)s: the stream ended without a token")), out.http_status
        )
    out.tokens = int(usage_tokens) if usage_tokens else tokens
    # A rate needs tokens that arrived apart: chunks delivered together (a proxy that buffers, a
    # server that batches) would divide by microseconds and report 10,000 tokens/s.
    gen_s = last_token_at - first_token_at
    if tokens >= MIN_CHUNKS_FOR_RATE and gen_s >= MIN_SECONDS_FOR_RATE:
        out.tokens_per_s = round((out.tokens - 1) / gen_s, 2)


def _not_a_chat_model(refused: ProbeFailure) -> bool:
    """Is this how a server refuses a chat to a model that cannot chat? vLLM's 400 or 501 "The model
    does not support Chat Completions API", Ollama's 400 "… does not support chat"; a 404 or 405 for
    a route an embedding server does not have. Any other refusal is the chat's failure."""
    if refused.status in (404, 405):
        return True
    return refused.status in (400, 501) and "support" in str(refused).lower()


async def _embeds(client: httpx.AsyncClient, target: Target, model: str, out: Outcome, timer: _Timer) -> bool:
    """Does the model answer an embedding? Then the channel serves it, timed (no tokens to time)."""
    if target.kind == "anthropic":
        return False
    start = time.perf_counter()
    try:
        resp = await client.post(
            f"{target.base_url}/embeddings",
            json={"model": model, "input": PROMPT},
            headers=_headers(target),
            extensions={"trace": timer},
        )
        data = resp.json().get("data") if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    if not (isinstance(data, list) and data and isinstance(data[0], dict) and data[0].get("embedding")):
        return False
    out.http_status = resp.status_code
    out.ttfb_ms = out.total_ms = _ms(start)
    out.error_message = _at(LATENCY, gettext_noop("%(step)s: an embedding model, timed on an embedding"))
    return True


def _token_text(event: dict[str, Any], anthropic: bool) -> str:
    if anthropic:
        if event.get("type") == "content_block_delta":
            delta = event.get("delta") or {}
            return delta.get("text") or delta.get("thinking") or ""
        return ""
    for choice in event.get("choices") or []:
        delta = (choice or {}).get("delta") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        if text or delta.get("tool_calls"):
            return text or "tool"
    return ""


# Servers we run ourselves: liveness is their /health (not the model list), and a model list they
# cannot give is a failure, not a cloud's quirk. SGLang, like vLLM, reports max_model_len.
SELF_HOSTED_KINDS = ("vllm", "llamacpp", "sglang")


def only_listed_names(kind: str, served: Mapping[str, object]) -> bool:
    """Does a server of `kind` whose model list is `served` answer only those names? vLLM does (404
    otherwise) and so does llama.cpp's router (several models; 400 otherwise). A one-model
    llama-server and SGLang answer any name with their one model; a cloud's list is not complete
    (Anthropic lists dated ids, not the aliases it accepts)."""
    return kind == "vllm" or (kind == "llamacpp" and len(served) > 1)


async def probe_one(client: httpx.AsyncClient, target: Target) -> Outcome:
    """Probe one channel; never raises (every failure is an Outcome with an error class)."""
    out = Outcome(channel_id=target.channel_id, started=time.time())
    timer = _Timer()
    start = time.perf_counter()
    try:
        models_body = None
        if target.kind in SELF_HOSTED_KINDS:
            await _get_json(client, f"{root_url(target.base_url)}/health", target, timer, LIVENESS)
        else:
            models_body = await _get_json(client, f"{target.base_url}/models", target, timer, LIVENESS)
        try:
            if target.discover or models_body is not None:
                out.served = await _discover(client, target, timer, models_body)
        except ProbeFailure as exc:
            if exc.error == "auth" or target.kind in SELF_HOSTED_KINDS:
                raise
            out.served = {}  # some clouds do not list models; liveness already answered
        if target.inference:
            model = target.model or next(iter(out.served), "")
            if out.served and only_listed_names(target.kind, out.served) and model not in out.served:
                # a route's typo must not make its channel look down (a cloud's route is asked for as it is)
                model = next((m for m in target.others if m in out.served), None) or next(iter(out.served))
            if not model:
                raise ProbeFailure(
                    "protocol", Message(gettext_noop("no model to probe: the channel has no route and lists none"))
                )
            out.model = model
            if target.kind == "llamacpp" and await _every_slot_busy(client, target):
                # Alive (its /health answered) and working: the gateway's own traffic measures
                # its time to first token meanwhile.
                out.error_message = _at(
                    LATENCY, gettext_noop("%(step)s: not sent, every slot of the server is generating")
                )
                out.total_ms = _ms(start)
            else:
                try:
                    # A model marked as an embedding model that answers one is sent no chat.
                    marked = target.embedding and model == target.model
                    if not (marked and await _embeds(client, target, model, out, timer)):
                        await _stream_chat(client, target, model, out, timer)
                except ProbeFailure as refused:
                    # An embedding model (vLLM's pooling runner, TEI) refuses a chat: it is probed
                    # with an embedding instead of being put down for what it never serves.
                    if not _not_a_chat_model(refused) or not await _embeds(client, target, model, out, timer):
                        raise
        else:
            out.total_ms = _ms(start)
        out.ok = True
    except ProbeFailure as exc:
        out.error, out.error_message = exc.error, exc.message
        out.http_status = exc.status or out.http_status
    except httpx.ConnectTimeout:
        out.error, out.error_message = "timeout", Message(gettext_noop("connect timed out"))
    except httpx.ConnectError as exc:
        out.error, out.error_message = (
            "connect",
            Message(gettext_noop("cannot connect: %(reason)s"), reason=_reason(exc)),
        )
    except httpx.ReadTimeout:
        stalled = out.ttfb_ms is not None
        out.error = "stalled" if stalled else "timeout"
        out.error_message = Message(
            gettext_noop("the stream stalled (no bytes within the timeout)")
            if stalled
            else gettext_noop("no answer in time")
        )
    except httpx.TimeoutException:
        out.error, out.error_message = "timeout", Message(gettext_noop("timed out"))
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        out.error = "protocol"
        out.error_message = Message(gettext_noop("connection dropped: %(reason)s"), reason=_reason(exc))
    except httpx.HTTPError as exc:
        out.error, out.error_message = "protocol", Message(gettext_noop("HTTP error: %(reason)s"), reason=_reason(exc))
    except Exception as exc:  # a bug or a value we did not foresee: this channel's verdict, not the round's end
        _crashed(out, exc)
    if out.total_ms is None:
        out.total_ms = _ms(start)
    out.connect_ms = timer.connect_ms
    return out


def _reason(exc: Exception) -> str:
    """The network library's own words (data, shown as they are)."""
    return (str(exc) or exc.__class__.__name__)[:200]


def _crashed(out: Outcome, exc: Exception) -> Outcome:
    logger.exception("probe of channel %s failed unexpectedly", out.channel_id)
    out.error = "internal"
    out.error_message = Message(
        gettext_noop("the check itself failed (%(reason)s); see the worker's log"),
        reason=f"{exc.__class__.__name__}: {exc}"[:200],
    )
    return out


_T = TypeVar("_T")


def run_loop(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run `coro` on a fresh event loop: uvloop when installed (it comes with uvicorn[standard] and
    roughly halves the CPU a probe round costs), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def make_client(
    *, connect_timeout: float, timeout: float, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(
        verify=ssl_context if ssl_context is not None else True,
        limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
        trust_env=False,
    )
    # Same pool, plain-asyncio sockets instead of anyio's (see netbackend for why).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context or httpx.create_ssl_context(),
        max_connections=2,
        max_keepalive_connections=1,
        network_backend=AsyncioBackend(),
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout, connect=connect_timeout),
        follow_redirects=False,
        trust_env=False,
    )


async def probe_many(
    targets: list[Target],
    *,
    concurrency: int = 200,
    connect_timeout: float = 5.0,
    timeout: float = 20.0,  # noqa: ASYNC109 - per-request httpx timeout, not a deadline
) -> list[Outcome]:
    """Probe every target concurrently, at most `concurrency` at a time; results in target order.

    Each channel gets its own small client (sharing one SSL context, the expensive part): one
    client for hundreds of origins makes httpcore's pool scan every connection for every request,
    which measured ~30 ms of CPU per probe at 200 in flight; a pool per channel keeps it O(1).
    """
    sem = asyncio.Semaphore(max(1, concurrency))
    ssl_context = httpx.create_ssl_context()

    async def one(t: Target) -> Outcome:
        async with make_client(connect_timeout=connect_timeout, timeout=timeout, ssl_context=ssl_context) as client:
            return await probe_one(client, t)

    async def bounded(t: Target) -> Outcome:
        async with sem:
            # A hard ceiling as well: a trickling upstream must not hold a slot forever.
            try:
                return await asyncio.wait_for(one(t), timeout + connect_timeout + 5)
            except TimeoutError:
                took = Message(gettext_noop("probe took too long"))
                return Outcome(t.channel_id, error="timeout", error_message=took, started=time.time())
            except Exception as exc:  # one channel's failure never takes the others' verdicts with it
                return _crashed(Outcome(t.channel_id, started=time.time()), exc)

    return list(await asyncio.gather(*(bounded(t) for t in targets)))


async def list_served_models(target: Target, *, connect_timeout: float, timeout: float) -> dict[str, int | None]:  # noqa: ASYNC109
    """What the upstream serves (`/v1/models`) with each model's context window where the server
    says it (vLLM `max_model_len`, llama.cpp `/props` `n_ctx`). Raises ProbeFailure."""
    async with make_client(connect_timeout=connect_timeout, timeout=timeout) as client:
        try:
            return await asyncio.wait_for(_discover(client, target, _Timer(), None), timeout + connect_timeout)
        except TimeoutError:
            raise ProbeFailure(
                "timeout", _at(MODEL_LIST, gettext_noop("%(step)s: the upstream did not answer in time"))
            ) from None
        except httpx.HTTPError as exc:
            said = f"{exc.__class__.__name__}: {exc}"
            raise ProbeFailure("connect", _at(MODEL_LIST, gettext_noop("%(step)s: %(said)s"), said=said)) from None
