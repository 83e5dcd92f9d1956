#!/usr/bin/env python3
"""Fast OpenAI-compatible mock upstream for gateway benchmarks.

A raw ASGI app (no framework) served by uvicorn (uvloop + httptools) or granian.
It only ever binds to a loopback address.

Endpoints
  POST /v1/chat/completions   (also /chat/completions)
      non-streaming: one chat.completion JSON with usage
      streaming ("stream": true): SSE chunks
          role chunk, N content chunks (optional per-token delay), finish chunk,
          usage chunk when stream_options.include_usage is true, then "data: [DONE]"
  GET  /v1/models             (also /models)
  GET  /health                (also /healthz, /v1/health)

Knobs (CLI flags, also read from the environment so that worker processes inherit them)
  MOCK_TOKENS          default completion tokens when the request has no max_tokens (16)
  MOCK_MAX_TOKENS      hard cap on tokens per response (4096)
  MOCK_TOKEN_DELAY_MS  sleep between streamed content chunks, ms (0 = no sleep)
  MOCK_LATENCY_MS      sleep before the response starts (both modes), ms (0)
  MOCK_ONE_WRITE       when set, a stream's events go out in one write after its headers, so the
                       reader gets them in one piece however fast it reads (gateway_cpu.py: the same
                       arrival natively and under valgrind)
  MOCK_REQUIRE_KEY     when set, requests must carry "Authorization: Bearer <value>"

A request's max_tokens (or max_completion_tokens) sets the number of tokens returned
(capped by MOCK_MAX_TOKENS), so a client can pick the response size through any gateway.

Run:  python mock_upstream.py --port 18000 [--server uvicorn|granian] [--workers 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

try:
    import orjson

    def _dumps(obj) -> bytes:
        return orjson.dumps(obj)

    _loads = orjson.loads
except ImportError:  # pragma: no cover - fallback when orjson is missing
    import json

    def _dumps(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    _loads = json.loads


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


TOKENS = _env_int("MOCK_TOKENS", 16)
MAX_TOKENS = _env_int("MOCK_MAX_TOKENS", 4096)
TOKEN_DELAY = _env_float("MOCK_TOKEN_DELAY_MS", 0.0) / 1000.0
LATENCY = _env_float("MOCK_LATENCY_MS", 0.0) / 1000.0
ONE_WRITE = bool(os.environ.get("MOCK_ONE_WRITE"))
REQUIRE_KEY = os.environ.get("MOCK_REQUIRE_KEY") or None
_REQUIRED_AUTH = ("Bearer " + REQUIRE_KEY).encode() if REQUIRE_KEY else None

WORDS = [
    "The",
    " quick",
    " brown",
    " fox",
    " jumps",
    " over",
    " the",
    " lazy",
    " dog",
    ".",
    " Lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    ",",
]
# Pre-encoded JSON string fragments for each word (content deltas).
_WORD_JSON = [_dumps(w) for w in WORDS]

_JSON_HEADERS = [
    (b"content-type", b"application/json"),
]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
]

_MODELS_BODY = _dumps(
    {
        "object": "list",
        "data": [
            {"id": "fake-model", "object": "model", "created": 1700000000, "owned_by": "mock"},
            {"id": "gpt-4o-mini", "object": "model", "created": 1700000000, "owned_by": "mock"},
        ],
    }
)
_HEALTH_BODY = b'{"status":"ok"}'

_counter = 0


def _next_id() -> str:
    global _counter
    _counter += 1
    return f"chatcmpl-mock{os.getpid()}x{_counter}"


async def _read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # http.disconnect
            return b""
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


async def _send_simple(send, status: int, body: bytes, headers=None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": (headers or _JSON_HEADERS) + [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _error_body(message: str, etype: str = "invalid_request_error") -> bytes:
    return _dumps({"error": {"message": message, "type": etype, "param": None, "code": None}})


def _prompt_tokens(req: dict) -> int:
    total = 0
    for m in req.get("messages") or ():
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            total += len(c)
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += len(part["text"])
    return max(1, total // 4)


def _n_tokens(req: dict) -> int:
    n = req.get("max_tokens")
    if n is None:
        n = req.get("max_completion_tokens")
    if not isinstance(n, int) or n <= 0:
        n = TOKENS
    return min(n, MAX_TOKENS)


async def _chat(scope, receive, send) -> None:
    if scope["method"] != "POST":
        await _send_simple(send, 405, _error_body("method not allowed"))
        return
    if _REQUIRED_AUTH is not None:
        auth = None
        for k, v in scope["headers"]:
            if k == b"authorization":
                auth = v
                break
        if auth != _REQUIRED_AUTH:
            await _send_simple(send, 401, _error_body("bad upstream key", "authentication_error"))
            return
    raw = await _read_body(receive)
    try:
        req = _loads(raw) if raw else {}
        if not isinstance(req, dict):
            raise ValueError("body must be an object")
    except Exception:
        await _send_simple(send, 400, _error_body("invalid JSON body"))
        return

    model = req.get("model") or "fake-model"
    if not isinstance(model, str):
        model = "fake-model"
    n = _n_tokens(req)
    ptok = _prompt_tokens(req)
    cid = _next_id()
    created = int(time.time())
    if LATENCY > 0:
        await asyncio.sleep(LATENCY)

    if not req.get("stream"):
        content = "".join(WORDS[i % len(WORDS)] for i in range(n))
        body = _dumps(
            {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_mock",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "length"
                        if req.get("max_tokens") or req.get("max_completion_tokens")
                        else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": ptok,
                    "completion_tokens": n,
                    "total_tokens": ptok + n,
                },
            }
        )
        await _send_simple(send, 200, body)
        return

    so = req.get("stream_options")
    include_usage = isinstance(so, dict) and bool(so.get("include_usage"))
    # Build the common prefix/suffix of each chunk once; only the delta changes.
    head = (
        b'data: {"id":"'
        + cid.encode()
        + b'","object":"chat.completion.chunk","created":'
        + str(created).encode()
        + b',"model":'
        + _dumps(model)
        + b',"system_fingerprint":"fp_mock","choices":[{"index":0,"delta":'
    )
    tail_nofinish = b',"logprobs":null,"finish_reason":null}]}\n\n'
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    held: list[bytes] = []  # MOCK_ONE_WRITE: the events kept for one write at the end

    async def event(data: bytes) -> None:
        if ONE_WRITE:
            held.append(data)
        else:
            await send({"type": "http.response.body", "body": data, "more_body": True})

    await event(head + b'{"role":"assistant","content":""}' + tail_nofinish)
    nw = len(_WORD_JSON)
    for i in range(n):
        if TOKEN_DELAY > 0:
            await asyncio.sleep(TOKEN_DELAY)
        await event(head + b'{"content":' + _WORD_JSON[i % nw] + b"}" + tail_nofinish)
    finish = b"length" if req.get("max_tokens") or req.get("max_completion_tokens") else b"stop"
    last = head + b'{},"logprobs":null,"finish_reason":"' + finish + b'"}]}\n\n'
    if include_usage:
        last += (
            b'data: {"id":"'
            + cid.encode()
            + b'","object":"chat.completion.chunk","created":'
            + str(created).encode()
            + b',"model":'
            + _dumps(model)
            + b',"system_fingerprint":"fp_mock","choices":[],"usage":'
            + _dumps({"prompt_tokens": ptok, "completion_tokens": n, "total_tokens": ptok + n})
            + b"}\n\n"
        )
    last += b"data: [DONE]\n\n"
    await send({"type": "http.response.body", "body": b"".join(held) + last, "more_body": False})


async def app(scope, receive, send):
    t = scope["type"]
    if t == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if t != "http":
        return
    path = scope["path"]
    if path in ("/v1/chat/completions", "/chat/completions", "/openai/v1/chat/completions"):
        await _chat(scope, receive, send)
    elif path in ("/v1/models", "/models"):
        await _send_simple(send, 200, _MODELS_BODY)
    elif path in ("/health", "/healthz", "/v1/health"):
        await _send_simple(send, 200, _HEALTH_BODY)
    else:
        await _send_simple(send, 404, _error_body("not found: " + path))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=18000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--server", choices=["uvicorn", "granian"], default="uvicorn")
    p.add_argument("--tokens", type=int, default=None, help="default completion tokens (MOCK_TOKENS)")
    p.add_argument("--token-delay-ms", type=float, default=None, help="per streamed token delay (MOCK_TOKEN_DELAY_MS)")
    p.add_argument("--latency-ms", type=float, default=None, help="delay before the response (MOCK_LATENCY_MS)")
    p.add_argument("--require-key", default=None, help="upstream key the mock demands (MOCK_REQUIRE_KEY)")
    p.add_argument("--keep-alive", type=int, default=5, help="seconds an idle connection is kept (uvicorn)")
    a = p.parse_args(argv)
    if not (a.host.startswith("127.") or a.host in ("localhost", "::1")):
        print("refusing to bind a non-loopback address: " + a.host, file=sys.stderr)
        return 2
    # Export knobs so worker processes (which re-import this module) see them.
    if a.tokens is not None:
        os.environ["MOCK_TOKENS"] = str(a.tokens)
    if a.token_delay_ms is not None:
        os.environ["MOCK_TOKEN_DELAY_MS"] = str(a.token_delay_ms)
    if a.latency_ms is not None:
        os.environ["MOCK_LATENCY_MS"] = str(a.latency_ms)
    if a.require_key is not None:
        os.environ["MOCK_REQUIRE_KEY"] = a.require_key
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if a.server == "granian":
        from granian import Granian

        try:
            from granian.constants import Interfaces, Loops
        except ImportError:  # older layouts
            from granian.constants import Interfaces  # type: ignore

            Loops = None  # type: ignore
        kwargs = dict(
            target="mock_upstream:app",
            address=a.host,
            port=a.port,
            interface=Interfaces.ASGI,
            workers=a.workers,
            log_enabled=False,
        )
        if Loops is not None:
            kwargs["loop"] = Loops.uvloop
        Granian(**kwargs).serve()
    else:
        import uvicorn

        uvicorn.run(
            "mock_upstream:app",
            host=a.host,
            port=a.port,
            workers=a.workers,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level="warning",
            lifespan="on",
            server_header=False,
            date_header=False,
            timeout_keep_alive=a.keep_alive,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
