"""A fake OpenAI-compatible upstream (vLLM / llama.cpp flavoured) on 127.0.0.1 for tests.

It runs a real aiohttp server in a background thread, so the gateway talks to it over real TCP.
Behaviour is scripted per test:

    up = FakeUpstream().start()
    up.base_url                       # http://127.0.0.1:PORT/v1
    up.behave(mode="omit_usage")      # every following request
    up.enqueue(mode="status", status=500)   # just the next request, then back to `behave`
    up.requests                       # what arrived: method, path, headers, json
    up.stop()

A non-streaming Chat answer is sent (headers and all) only once it is generated, after `tokens`
times `token_delay` seconds, like vLLM, SGLang and llama.cpp; a stream sends its headers at once and
one token every `token_delay`. Every Chat answer has an `x-request-id` header (`up-…`).

Modes: ok, omit_usage (no usage in body or stream), stream_error / stream_junk (stream: after
`stall_after` chunks an error event carrying `error_message`, or a chunk of invalid JSON), stall
(stream: send `stall_after` chunks, then hang; non-stream: hang before answering), disconnect
(stream: send `disconnect_after` chunks, then drop the TCP connection), status (answer `status` with
an OpenAI error body), slow (sleep `delay` seconds before the first byte), tool_call (the reply is a
function call split over many chunks), ignore_stream (every endpoint answers JSON, a stream asked
for or not; `ignore_stream=True` does the same in any other mode, `omit_usage=True` leaves the usage
out in any mode: `behave(mode="tool_call", ignore_stream=True, omit_usage=True)`), no_tools (a
request with `tools` is refused with vLLM's 400 for a server started without a tool-call parser).
`tokens` sets how many completion tokens ("tok0 tok1 …") are generated; `token_delay` spaces stream
chunks; `reasoning` makes the reply start with that text as `reasoning_content`. Anthropic-native
`/v1/messages` behaves like Anthropic's API (request checks, stop sequences, tool use, thinking,
cache usage, its error shape and 529, the exact SSE event sequence; mode stream_error sends an
`error` event mid-stream). Responses-native `/v1/responses` behaves like OpenAI's (its event
sequence, reasoning and function-call items, `response.incomplete` at max_output_tokens, modes
ok/status/slow/tool_call/stall/stream_error). On both, a non-streaming answer's headers go out only
once it is generated (`token_delay`, as for Chat), and mode truncate ends a stream cleanly after
`stall_after` deltas without its last event (`message_stop`, `response.completed`; a Chat stream's
`[DONE]`). A Chat stream in mode coalesced_end sends `stall_after` deltas, then after `split_pause`
seconds the rest, its last event and the body's end in one write, each event an HTTP chunk of its
own (what a reader gets at once from a burst that a network merged), and holds the connection open
(`hold`). A Chat stream in mode split_done sends no usage chunk and its `[DONE]` event in two writes
`split_pause` seconds apart (only that event ends it), in mode no_done never sends it; both then
keep the connection open (at most `hold` seconds) and note in `holds` whether the client closed it
first; `end_pause` ends a Chat stream's body that long after its `[DONE]`. Prompt tokens are the
number of whitespace-separated words in the input. With `up.gate` (a threading.Event) every request,
once recorded, waits for it to be set before it is answered (the gate in place when it came: a test
may hold one request and let later ones through with `up.gate = None`)."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DEFAULTS: dict[str, Any] = {
    "mode": "ok",
    "status": 500,
    "tokens": 5,
    "delay": 0.0,
    "token_delay": 0.0,
    "stall_after": 1,
    "disconnect_after": 2,
    "error_message": "upstream failure",
    "tool_name": "get_weather",
    "tool_arguments": '{"city": "Paris", "unit": "celsius"}',
    "tool_index": True,  # mode tool_call, streamed: False leaves `index` out of the deltas (as some servers do)
    "ignore_stream": False,  # answer JSON to a stream request too, in any mode (as mode ignore_stream)
    "omit_usage": False,  # no usage in Chat, Completions or embeddings answers, in any mode (as mode omit_usage)
    "ignore_max_tokens": False,  # generate `tokens` whatever max_tokens says (a misbehaving server)
    "retry_after": "",  # with mode=status: a Retry-After header on the error
    "huge_bytes": 50 * 1024 * 1024,  # mode=huge: the size of the (endless-looking) answer
    "trickle_delay": 0.2,  # mode=trickle: seconds between single bytes
    "reasoning": "",  # when set, the reply starts with this as `reasoning_content` (vLLM's reasoning parser)
    "reasoning_chunk": 0,  # stream the reasoning in pieces of this many characters (default: word by word)
    # Prompt tokens reported as read from the prompt cache: vLLM's `prompt_tokens_details.cached_tokens`,
    # llama.cpp's `timings.cache_n` (flavour "llamacpp"), Anthropic's `cache_read_input_tokens`,
    # Responses' `input_tokens_details.cached_tokens`; `cache_write`: Anthropic's `cache_creation_input_tokens`.
    "cached": 0,
    "cache_write": 0,
    "usage_override": None,  # a dict merged over the usage reported (an upstream reporting absurd usage)
    "error_type": "server_error",  # with mode=status: the error's `type` (Anthropic's `overloaded_error`)
    "system_fingerprint": None,  # when set, every Chat chunk / answer carries it (vLLM, OpenAI)
    "split_pause": 0.3,  # mode=split_done: seconds between the two writes of the `[DONE]` event
    "hold": 30.0,  # modes split_done, no_done: at most this long the connection is held open
    "end_pause": 0.0,  # a Chat stream's body ends this many seconds after its `[DONE]`
    "slots_busy": False,  # flavour llamacpp: `/slots` says every slot is generating
    # with mode=status: how the error is written: "nested" `{"error": {…}}` (OpenAI, vLLM ≥ 0.10,
    # llama.cpp), "flat" `{"object": "error", "message": …}` (SGLang, vLLM before 0.10), "string"
    # `{"error": "…"}` (Ollama)
    "error_shape": "nested",
}


@dataclass
class Recorded:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    json: Any
    peer: Any = None  # the client's address and port: one per connection it opened


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k in ("content", "text", "input", "prompt"))
    return 0


@dataclass
class FakeUpstream:
    """See the module docstring. `models` is what /v1/models lists (vLLM shape)."""

    models: list[str] = field(default_factory=lambda: ["fake-model"])
    max_model_len: int = 8192
    flavour: str = "vllm"  # or "llamacpp": /props and llama.cpp-shaped /v1/models
    api_key: str | None = None  # when set, requests must carry `Authorization: Bearer api_key`
    port: int = 0
    bind: str = "127.0.0.1"  # the fake `vllm serve --host 0.0.0.0` of a multi-node test binds all
    strict_models: bool = False  # as vLLM and SGLang: 404 for a model id not in `models`
    # A model server's idle timer firing just as a request arrives, made certain: a request on a
    # connection idle this many seconds is closed unanswered (llama-server, vLLM and SGLang close
    # idle connections at 5 s; a request written at that moment is lost unread).
    idle_close: float | None = None

    def __post_init__(self) -> None:
        self.requests: list[Recorded] = []
        self._behaviour = dict(DEFAULTS)
        self._queue: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.open_streams = 0
        self.holds: list[str] = []  # how each held connection ended (modes split_done, no_done)
        self.gate: threading.Event | None = None  # when set: requests wait for it (see the docstring)
        self._last_request: dict[Any, float] = {}  # peer → when its connection last had a request
        self.closed_idle = 0  # requests closed unanswered (`idle_close`)

    # --- scripting -------------------------------------------------------------------------
    def behave(self, **kwargs: Any) -> FakeUpstream:
        with self._lock:
            self._behaviour = {**DEFAULTS, **kwargs}
        return self

    def enqueue(self, **kwargs: Any) -> FakeUpstream:
        with self._lock:
            self._queue.append({**DEFAULTS, **kwargs})
        return self

    def _next(self) -> dict[str, Any]:
        with self._lock:
            b = self._queue.pop(0) if self._queue else copy.deepcopy(self._behaviour)
        b["ignore_stream"] = b["ignore_stream"] or b["mode"] == "ignore_stream"
        b["omit_usage"] = b["omit_usage"] or b["mode"] == "omit_usage"
        return b

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeUpstream:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # surfaced to the caller of start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"fake-upstream-{id(self)}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/slots", self._slots)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_post("/v1/responses", self._responses)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.bind, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        try:
            fut.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> FakeUpstream:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- helpers -------------------------------------------------------------------------
    async def _record(self, request: web.Request) -> Any:
        body = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode(errors="replace")
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        self.requests.append(
            Recorded(request.method, request.path, request.query_string, dict(request.headers), body, peer)
        )
        return body

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.api_key is None:
            return None
        anthropic = request.headers.get("x-api-key") == self.api_key  # Anthropic's own header
        if request.headers.get("Authorization") != f"Bearer {self.api_key}" and not anthropic:
            return web.json_response(
                {"error": {"message": "Invalid API key", "type": "authentication_error", "code": 401}},
                status=401,
            )
        return None

    @staticmethod
    def _error(b: dict[str, Any]) -> web.Response:
        headers = {"Retry-After": str(b["retry_after"])} if b["retry_after"] else None
        said = {"message": b["error_message"], "type": b["error_type"], "code": b["status"]}
        body = {
            "nested": {"error": said},
            "flat": {"object": "error", **said, "param": None},
            "string": {"error": b["error_message"]},
        }[b["error_shape"]]
        return web.json_response(body, status=b["status"], headers=headers)

    async def _misbehave(self, request: web.Request, b: dict[str, Any]) -> web.StreamResponse | None:
        """The faults of tests/gateway/test_upstream_faults.py (non-streaming and streaming alike)."""
        mode = b["mode"]
        if mode == "redirect":
            raise web.HTTPFound(location="http://127.0.0.1:9/v1/chat/completions")
        if mode == "reset":  # a server that crashes on the request: the connection reset, no answer
            sock = request.transport.get_extra_info("socket") if request.transport else None
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            if request.transport is not None:
                request.transport.abort()
            return web.Response()  # never reaches the closed connection
        if mode == "invalid_json":
            return web.Response(text="<html>upstream proxy error</html>", content_type="application/json")
        if mode == "html_page":  # a captive portal's or a proxy's page, said with a 200
            return web.Response(text="<html>captive portal</html>", content_type="text/html")
        if mode == "error_200":  # an error object said with a 200
            return web.json_response({"error": {"message": b["error_message"], "type": b["error_type"]}})
        if mode in ("huge", "trickle"):
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            try:
                if mode == "huge":
                    block = b"x" * 65536
                    for _ in range(b["huge_bytes"] // len(block)):
                        await resp.write(block)
                else:
                    while True:
                        await resp.write(b" ")
                        await asyncio.sleep(b["trickle_delay"])
            except (ConnectionError, RuntimeError):
                pass
            return resp
        return None

    async def _pre(self, request: web.Request) -> tuple[Any, dict[str, Any], web.StreamResponse | None]:
        body = await self._record(request)
        if self.idle_close is not None and request.transport is not None:
            peer, now = request.transport.get_extra_info("peername"), time.monotonic()
            last, self._last_request[peer] = self._last_request.get(peer), now
            if last is not None and now - last >= self.idle_close:
                self.closed_idle += 1
                request.transport.close()
                return body, {}, web.Response(status=204)  # never reaches the client
        gate = self.gate  # the one in place when the request came: a later one does not release it
        while gate is not None and not gate.is_set():
            await asyncio.sleep(0.02)
        denied = self._unauthorized(request)
        if denied is not None:
            return body, {}, denied
        if self.strict_models and isinstance(body, dict) and body.get("model") not in self.models:
            message = f"The model `{body.get('model')}` does not exist."  # vLLM's words and shape
            error = {"message": message, "type": "NotFoundError", "param": "model", "code": 404}
            return body, {}, web.json_response({"error": error}, status=404)
        b = self._next()
        if b["mode"] == "status":
            return body, b, self._error(b)
        if b["mode"] == "slow" or b["delay"]:
            await asyncio.sleep(b["delay"])
        odd = await self._misbehave(request, b)
        if odd is not None:
            return body, b, odd
        return body, b, None

    # --- endpoints -------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, b, early = await self._pre(request)
        if early is not None:
            return early
        if not isinstance(body, dict) or "messages" not in body:
            return web.json_response(
                {"error": {"message": "messages is required", "type": "invalid_request_error"}}, status=400
            )
        if b["mode"] == "no_tools" and body.get("tools"):  # vLLM started without a tool-call parser
            return web.json_response(
                {
                    "error": {
                        "code": 400,
                        "type": "BadRequestError",
                        "message": (
                            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
                        ),
                    }
                },
                status=400,
            )
        prompt = _words(body.get("messages"))
        if prompt > self.max_model_len:  # llama.cpp's refusal, with its figures
            return web.json_response(
                {
                    "error": {
                        "code": 400,
                        "message": f"request ({prompt} tokens) exceeds the available context size "
                        f"({self.max_model_len} tokens), try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": prompt,
                        "n_ctx": self.max_model_len,
                    }
                },
                status=400,
            )
        model = body.get("model", "fake-model")
        if body.get("stream") and not b["ignore_stream"]:  # (a server that always answers JSON)
            return await self._stream_chat(request, body, b, model, prompt)
        if b["mode"] == "stall":
            await asyncio.sleep(3600)
        n = int(body.get("max_tokens") or b["tokens"]) if b["mode"] != "tool_call" else 0
        n = min(n, b["tokens"]) if b["mode"] != "tool_call" else 0
        if b["ignore_max_tokens"] and b["mode"] != "tool_call":
            n = b["tokens"]
        if b["token_delay"]:  # the headers go out only when the whole answer is generated
            await asyncio.sleep(max(n, 1) * b["token_delay"])
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(f"tok{i}" for i in range(n))}
        finish = "stop" if n < int(body.get("max_tokens") or 10**9) else "length"
        n, matched = self._stop_at(body, n)
        if matched is not None:
            message["content"], finish = " ".join(f"tok{i}" for i in range(n)), "stop"
        if b["mode"] == "tool_call":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_" + uuid.uuid4().hex[:12],
                        "type": "function",
                        "function": {"name": b["tool_name"], "arguments": b["tool_arguments"]},
                    }
                ],
            }
            finish, n = "tool_calls", len(b["tool_arguments"].split())
        if b["reasoning"]:
            message["reasoning_content"] = b["reasoning"]
            n += len(b["reasoning"].split())
        out: dict[str, Any] = {
            "id": "chatcmpl-" + uuid.uuid4().hex,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if matched is not None and self.flavour == "vllm":
            out["choices"][0]["stop_reason"] = matched  # vLLM names the stop string that matched
        if not b["omit_usage"]:
            out.update(self._chat_usage(b, prompt, n))
        if b["system_fingerprint"]:
            out["system_fingerprint"] = b["system_fingerprint"]
        return web.json_response(out, headers={"x-request-id": "up-" + uuid.uuid4().hex[:16]})

    @staticmethod
    def _stop_at(body: dict[str, Any], n: int) -> tuple[int, str | None]:
        """`stop` as vLLM and llama.cpp apply it: the words before the first stop string that the
        answer "tok0 tok1 …" contains, and that string (None when none matched)."""
        stops = body.get("stop")
        stops = [stops] if isinstance(stops, str) else stops if isinstance(stops, list) else []
        text = " ".join(f"tok{i}" for i in range(n))
        found = [(text.find(s), s) for s in stops if isinstance(s, str) and s and s in text]
        if not found:
            return n, None
        at, matched = min(found)
        return len(text[:at].split()), matched

    def _chat_usage(self, b: dict[str, Any], prompt: int, n: int) -> dict[str, Any]:
        """`usage` (and llama.cpp's `timings`) of a Chat answer or its last chunk."""
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        if b["usage_override"]:
            usage.update(b["usage_override"])
        cached = min(int(b["cached"]), prompt)
        if self.flavour == "llamacpp":
            timings = {"cache_n": cached, "prompt_n": prompt - cached, "predicted_n": n, "prompt_ms": 1.0}
            return {"usage": usage, "timings": timings}
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return {"usage": usage}

    async def _stream_chat(self, request, body, b, model, prompt) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "x-request-id": "up-" + uuid.uuid4().hex[:16],
            }
        )
        await resp.prepare(request)
        self.open_streams += 1
        logprobs = bool(body.get("logprobs"))
        cid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        choices = int(body.get("n") or 1)  # vLLM streams each choice in chunks of its own

        def chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> bytes:
            data = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
            }
            if b["system_fingerprint"]:
                data["system_fingerprint"] = b["system_fingerprint"]
            if logprobs and delta.get("content"):
                token = {"token": delta["content"], "logprob": -0.5, "bytes": list(delta["content"].encode())}
                data["choices"][0]["logprobs"] = {"content": [{**token, "top_logprobs": []}]}
            if include_usage:
                data["usage"] = None
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        matched: str | None = None
        try:
            pieces: list[dict[str, Any]]
            if b["mode"] == "tool_call":
                args = b["tool_arguments"]
                parts = [args[i : i + 4] for i in range(0, len(args), 4)]
                pieces = [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_" + uuid.uuid4().hex[:12],
                                "type": "function",
                                "function": {"name": b["tool_name"], "arguments": ""},
                            }
                        ],
                    }
                ]
                pieces += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in parts]
                if not b["tool_index"]:
                    for piece in pieces:
                        del piece["tool_calls"][0]["index"]
                n, finish = len(args.split()), "tool_calls"
            else:
                limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 10**9)
                if b["ignore_max_tokens"]:
                    limit = 10**9
                n = min(b["tokens"], limit)
                finish = "length" if n >= limit else "stop"
                n, matched = self._stop_at(body, n)
                if matched is not None:
                    finish = "stop"
                pieces = [{"role": "assistant", "content": ""}]
                pieces += [{"content": (" " if i else "") + f"tok{i}"} for i in range(n)]
            if b["reasoning"]:
                words = b["reasoning"].split()
                thoughts = [{"reasoning_content": (" " if i else "") + w} for i, w in enumerate(words)]
                if b["reasoning_chunk"]:
                    size, text = b["reasoning_chunk"], b["reasoning"]
                    thoughts = [{"reasoning_content": text[i : i + size]} for i in range(0, len(text), size)]
                thoughts[0]["role"] = "assistant"
                pieces = thoughts + pieces
                n += len(words)
            for i, delta in enumerate(pieces):
                if b["mode"] == "stall" and i == b["stall_after"]:
                    await asyncio.sleep(3600)
                if b["mode"] == "coalesced_error" and i == 0:  # the first events and an error in one write
                    error = {"error": {"message": b["error_message"], "type": "server_error", "code": 500}}
                    events = [chunk(d) for d in pieces[: b["stall_after"]]]
                    await resp.write(b"".join(events) + b"data: " + json.dumps(error).encode() + b"\n\n")
                    await resp.write_eof()
                    return resp
                if b["mode"] == "stream_error" and i == b["stall_after"]:
                    error = {"error": {"message": b["error_message"], "type": "server_error", "code": 500}}
                    await resp.write(b"data: " + json.dumps(error).encode() + b"\n\n")
                    await resp.write_eof()
                    return resp
                if b["mode"] == "stream_junk" and i == b["stall_after"]:
                    await resp.write(b'data: {"id": "chatcmpl-x", "choices": [{"index": 0, "delta": \n\n')
                    await resp.write_eof()
                    return resp
                if b["mode"] == "disconnect" and i == b["disconnect_after"]:
                    request.transport.close()
                    return resp
                if b["mode"] == "truncate" and i == b["stall_after"]:
                    await resp.write_eof()  # a clean end of the body, without a finish or [DONE]
                    return resp
                if b["mode"] == "coalesced_end" and i == b["stall_after"]:
                    await asyncio.sleep(b["split_pause"])
                    events = [chunk(rest) for rest in pieces[i:]] + [chunk({}, finish)]
                    if include_usage:
                        usage = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
                        usage.update(choices=[], **self._chat_usage(b, prompt, n))
                        events.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
                    events.append(b"data: [DONE]\n\n")
                    # Each event an HTTP chunk of its own, the body's end with them, in one write.
                    framed = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
                    request.transport.write(framed)
                    await self._hold(b["hold"])  # (aiohttp would end the body again on return)
                    return resp
                for index in range(choices):
                    await resp.write(chunk(delta, index=index))
                if b["token_delay"]:
                    await asyncio.sleep(b["token_delay"])
            # llama.cpp runs each of n choices as a task of its own: each ends with its finish and,
            # asked for usage, a usage chunk of its own (the prompt's tokens and that choice's).
            per_choice = self.flavour == "llamacpp" and choices > 1 and include_usage and b["mode"] == "ok"
            for index in range(choices):
                last = json.loads(chunk({}, finish, index=index)[6:])
                if matched is not None and self.flavour == "vllm":
                    last["choices"][0]["stop_reason"] = matched
                await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
                if per_choice:
                    own = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
                    own.update(choices=[], **self._chat_usage(b, prompt, n))
                    await resp.write(b"data: " + json.dumps(own).encode() + b"\n\n")
            if include_usage and not b["omit_usage"] and b["mode"] != "split_done" and not per_choice:
                data = {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    **self._chat_usage(b, prompt, n),
                }
                await resp.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            if b["mode"] == "split_done":
                await resp.write(b"data: [DO")
                await asyncio.sleep(b["split_pause"])
                await resp.write(b"NE]\n\n")
            elif b["mode"] != "no_done":
                await resp.write(b"data: [DONE]\n\n")
            if b["mode"] in ("split_done", "no_done"):
                await self._hold(b["hold"])
            if b["end_pause"]:
                await asyncio.sleep(b["end_pause"])
            await resp.write_eof()
        finally:
            self.open_streams -= 1
        return resp

    async def _hold(self, seconds: float) -> None:
        """Keep the connection open after the last byte: until the client closes it, or `seconds`."""
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:  # the client closed the connection (handler cancellation)
            self.holds.append("closed by the client")
            raise
        self.holds.append("held to the end")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body, b, early = await self._pre(request)
        if early is not None:
            return early
        prompt = _words((body or {}).get("prompt"))
        n = min(b["tokens"], int((body or {}).get("max_tokens") or 16))
        model = (body or {}).get("model", "fake-model")
        # vLLM's choices: `n` for each prompt of a prompt list (strings or token-id lists), numbered in turn
        prompts = (body or {}).get("prompt")
        many = isinstance(prompts, list) and prompts and all(isinstance(p, (str, list)) for p in prompts)
        choices = (len(prompts) if many else 1) * int((body or {}).get("n") or 1)
        if (body or {}).get("stream") and not b["ignore_stream"]:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            include_usage = bool(((body or {}).get("stream_options") or {}).get("include_usage"))
            for i in range(n):
                for index in range(choices):
                    data = {
                        "id": "cmpl-1",
                        "object": "text_completion",
                        "model": model,
                        "choices": [{"index": index, "text": (" " if i else "") + f"tok{i}", "finish_reason": None}],
                    }
                    await resp.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            if include_usage and not b["omit_usage"]:
                spent = n * choices
                data = {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "model": model,
                    "choices": [],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": spent, "total_tokens": prompt + spent},
                }
                await resp.write(b"data: " + json.dumps(data).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        out = {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "text": " ".join(f"tok{i}" for i in range(n)), "finish_reason": "stop"}],
        }
        if not b["omit_usage"]:
            out["usage"] = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        return web.json_response(out)

    async def _embeddings(self, request: web.Request) -> web.StreamResponse:
        body, b, early = await self._pre(request)
        if early is not None:
            return early
        inputs = (body or {}).get("input")
        inputs = inputs if isinstance(inputs, list) else [inputs]
        prompt = _words(inputs)
        out = {
            "object": "list",
            "model": (body or {}).get("model"),
            "data": [
                {"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3, float(i)]} for i in range(len(inputs))
            ],
        }
        if not b["omit_usage"]:
            out["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt}
        return web.json_response(out)

    async def _models(self, request: web.Request) -> web.Response:
        await self._record(request)
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        b = self._next()
        if b["mode"] == "status":
            return self._error(b)
        if self.flavour == "llamacpp":
            data = [
                {
                    "id": m,
                    "object": "model",
                    "owned_by": "llamacpp",
                    "created": 0,
                    "meta": {"n_ctx_train": self.max_model_len * 4, "n_params": 1000, "n_vocab": 256},
                }
                for m in self.models
            ]
        else:
            data = [
                {
                    "id": m,
                    "object": "model",
                    "owned_by": "vllm",
                    "created": 0,
                    "root": m,
                    "max_model_len": self.max_model_len,
                }
                for m in self.models
            ]
        return web.json_response({"object": "list", "data": data})

    async def _health(self, request: web.Request) -> web.Response:
        await self._record(request)
        b = self._next()
        if b["mode"] == "status":
            return self._error(b)
        return web.json_response({"status": "ok"})

    async def _props(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response(
            {
                "default_generation_settings": {"n_ctx": self.max_model_len, "params": {"n_predict": -1}},
                "total_slots": 1,
                "model_path": f"/models/{self.models[0]}.gguf",
            }
        )

    async def _slots(self, request: web.Request) -> web.Response:
        """llama.cpp's slot monitor (on unless `--no-slots`); `slots_busy`: every slot generating."""
        await self._record(request)
        if self.flavour != "llamacpp":
            raise web.HTTPNotFound()
        busy = bool(self._behaviour.get("slots_busy"))
        return web.json_response([{"id": i, "n_ctx": self.max_model_len, "is_processing": busy} for i in range(2)])

    async def _tokenize(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        body = body if isinstance(body, dict) else {}
        text = body.get("content") or body.get("prompt") or ""  # llama.cpp's field, vLLM's field
        return web.json_response({"tokens": list(range(len(text.split())))})

    # --- native Anthropic Messages and OpenAI Responses (pass-through channels) ----------------
    @staticmethod
    def _sse(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    @staticmethod
    def _anthropic_error(status: int, kind: str, message: str, retry_after: str = "") -> web.Response:
        headers = {"retry-after": retry_after} if retry_after else None
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return web.json_response(body, status=status, headers=headers)

    @staticmethod
    def _messages_problem(body: dict[str, Any]) -> str | None:
        """What the real Messages API refuses with 400 invalid_request_error (the checks a translation
        can get wrong), else None."""
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: at least one message is required"
        for name in ("n", "stop", "tool_calls", "reasoning_effort", "response_format", "max_completion_tokens"):
            if name in body:
                return f"{name}: Extra inputs are not permitted"
        if not isinstance(body.get("system", ""), (str, list)):
            return "system: Input should be a valid string or list"
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024 or budget >= body["max_tokens"]:
                return "thinking.budget_tokens: must be >= 1024 and less than max_tokens"
            if "temperature" in body and body["temperature"] != 1:
                return "temperature may only be set to 1 when thinking is enabled"
        if isinstance(body.get("temperature"), (int, float)) and not 0 <= body["temperature"] <= 1:
            return "temperature: Input should be less than or equal to 1"
        tool_ids: set[str] = set()
        previous = None
        for i, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role not in ("user", "assistant"):
                return f"messages.{i}.role: Input should be 'user' or 'assistant'"
            content = message.get("content")
            if isinstance(content, str):
                blocks = [{"type": "text", "text": content}] if content else []
            else:
                blocks = content
            if not isinstance(blocks, list):
                return f"messages.{i}.content: Input should be a valid string or list"
            if not blocks and not (role == "assistant" and i == len(messages) - 1):  # a prefill may be empty
                return (
                    f"messages.{i}: all messages must have non-empty content except for the optional final "
                    "assistant message"
                )
            for place, block in enumerate(blocks):
                kind = block.get("type")
                if kind == "text" and not str(block.get("text") or "").strip():
                    return f"messages.{i}: text content blocks must contain non-whitespace text"
                if kind == "image":
                    source = block.get("source") or {}
                    if source.get("type") not in ("base64", "url") or not (source.get("data") or source.get("url")):
                        return f"messages.{i}: image source must be base64 or url"
                if kind == "tool_use":
                    if role != "assistant":
                        return f"messages.{i}: tool_use blocks belong to assistant messages"
                    tool_ids.add(block.get("id"))
                field = {"tool_use": "id", "tool_result": "tool_use_id"}.get(kind)
                if field and not re.fullmatch(r"[a-zA-Z0-9_-]+", str(block.get(field))):
                    return (
                        f"messages.{i}.content.{place}.{kind}.{field}: String should match pattern '^[a-zA-Z0-9_-]+$'"
                    )
                if kind == "tool_result":
                    if previous != "assistant" or block.get("tool_use_id") not in tool_ids:
                        return (
                            f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message."
                        )
                if kind not in ("text", "image", "tool_use", "tool_result", "thinking", "document"):
                    return f"messages.{i}: unknown content block type {kind!r}"
            if role == previous:
                return f"messages.{i}: roles must alternate between user and assistant"
            previous = role
        return None

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        """A Messages API that behaves like Anthropic's: request checks, `stop_sequences` (the
        text is cut before a matched one), `max_tokens`, tool use (mode tool_call), thinking,
        cache usage, errors in its own shape (mode status; 529 is `overloaded_error`), and the
        stream's exact event sequence (mode stream_error: an `error` event after two deltas; mode
        stall: silence after `stall_after` deltas; `ignore_max_tokens`: more deltas than asked)."""
        body = await self._record(request)
        if self.api_key is not None and self.api_key not in (
            request.headers.get("x-api-key"),
            request.headers.get("Authorization", "").removeprefix("Bearer "),
        ):
            return self._anthropic_error(401, "authentication_error", "invalid x-api-key")
        b = self._next()
        if b["mode"] == "status":
            kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
            kind = "overloaded_error" if b["status"] in (503, 529) else kinds.get(b["status"], "api_error")
            return self._anthropic_error(b["status"], kind, b["error_message"], str(b["retry_after"] or ""))
        if b["mode"] == "slow" or b["delay"]:
            await asyncio.sleep(b["delay"])
        body = body if isinstance(body, dict) else {}
        problem = self._messages_problem(body)
        if problem is not None:
            return self._anthropic_error(400, "invalid_request_error", problem)
        prompt = _words(body.get("messages")) + _words(body.get("system"))
        max_tokens = int(body["max_tokens"])
        n = b["tokens"] if b["ignore_max_tokens"] else min(b["tokens"], max_tokens)
        words = [f"tok{i}" for i in range(n)]
        stop_reason, stop_sequence = ("max_tokens" if n >= max_tokens else "end_turn"), None
        text = " ".join(words)
        for sequence in body.get("stop_sequences") or []:
            at = text.find(sequence)
            if at >= 0:
                text, stop_reason, stop_sequence = text[:at], "stop_sequence", sequence
                n = len(text.split())
                break
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == "enabled"
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": "Let me think.", "signature": "sig-" + uuid.uuid4().hex})
        if b["mode"] == "tool_call":
            arguments = b["tool_arguments"]
            tool = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": b["tool_name"]}
            content.append({**tool, "input": json.loads(arguments)})
            stop_reason, stop_sequence, n = "tool_use", None, len(arguments.split())
        elif text:
            content.append({"type": "text", "text": text})
        mid = "msg_" + uuid.uuid4().hex[:24]
        read = min(int(b["cached"]), prompt)
        written = min(int(b["cache_write"]), prompt - read)
        usage = {
            "input_tokens": prompt - read - written,
            "output_tokens": n,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": usage,
        }
        if not body.get("stream") or b["ignore_stream"]:
            if b["token_delay"]:  # the headers go out only when the whole answer is generated
                await asyncio.sleep(max(n, 1) * b["token_delay"])
            return web.json_response(message)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.open_streams += 1
        try:
            start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
            start["usage"] = {**usage, "output_tokens": 1}
            await resp.write(self._sse("message_start", {"type": "message_start", "message": start}))
            await resp.write(self._sse("ping", {"type": "ping"}))
            sent = 0
            for index, block in enumerate(content):
                opening = {**block, "input": {}} if block["type"] == "tool_use" else {**block}
                if block["type"] in ("text", "thinking"):
                    opening[block["type"]] = ""
                if block["type"] == "thinking":
                    opening["signature"] = ""
                await resp.write(
                    self._sse(
                        "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
                    )
                )
                if block["type"] == "text":
                    pieces = [{"type": "text_delta", "text": w} for w in re.split(r"(?<= )", block["text"])]
                elif block["type"] == "thinking":
                    pieces = [
                        {"type": "thinking_delta", "thinking": block["thinking"]},
                        {"type": "signature_delta", "signature": block["signature"]},
                    ]
                else:  # tool_use: the JSON arrives in small pieces, as Anthropic streams it
                    raw = b["tool_arguments"]
                    pieces = [
                        {"type": "input_json_delta", "partial_json": raw[i : i + 7]} for i in range(0, len(raw), 7)
                    ]
                for delta in pieces:
                    if b["mode"] == "stall" and sent == b["stall_after"]:
                        await asyncio.sleep(3600)
                    if b["mode"] == "truncate" and sent == b["stall_after"]:
                        await resp.write_eof()  # a clean end of the body, without `message_stop`
                        return resp
                    if b["mode"] == "stream_error" and sent == 2:
                        error = {"type": "error", "error": {"type": "overloaded_error", "message": b["error_message"]}}
                        await resp.write(self._sse("error", error))
                        await resp.write_eof()
                        return resp
                    await resp.write(
                        self._sse(
                            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                        )
                    )
                    sent += 1
                    if b["token_delay"]:
                        await asyncio.sleep(b["token_delay"])
                await resp.write(self._sse("content_block_stop", {"type": "content_block_stop", "index": index}))
            end = {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": {"output_tokens": n},
            }
            await resp.write(self._sse("message_delta", end))
            await resp.write(self._sse("message_stop", {"type": "message_stop"}))
            await resp.write_eof()
        finally:
            self.open_streams -= 1
        return resp

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        body = body if isinstance(body, dict) else {}
        return web.json_response({"input_tokens": _words(body.get("messages")) + _words(body.get("system"))})

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """A Responses API that behaves like OpenAI's: output items (a reasoning item when
        `reasoning` is set; a function call in mode tool_call; else a message), `response.incomplete`
        with reason max_output_tokens when the limit ends the answer, and the stream's exact event
        sequence (created, in_progress, per item added / deltas / done, completed)."""
        body, b, early = await self._pre(request)
        if early is not None:
            return early
        body = body if isinstance(body, dict) else {}
        prompt = _words(body.get("input")) + _words(body.get("instructions"))
        limit = int(body.get("max_output_tokens") or 10**9)
        n = b["tokens"] if b["ignore_max_tokens"] else min(b["tokens"], limit)
        rid = "resp_" + uuid.uuid4().hex[:24]
        items: list[dict[str, Any]] = []
        pieces: list[list[str]] = []  # the deltas of each item
        if b["reasoning"]:
            words = b["reasoning"].split()
            thought = {"type": "reasoning_text", "text": b["reasoning"]}
            items.append(
                {"type": "reasoning", "id": "rs_" + uuid.uuid4().hex[:24], "summary": [], "content": [thought]}
            )
            pieces.append([(" " if i else "") + w for i, w in enumerate(words)])
        if b["mode"] == "tool_call":
            args = b["tool_arguments"]
            call = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:24], "call_id": "call_" + uuid.uuid4().hex}
            items.append({**call, "name": b["tool_name"], "arguments": args, "status": "completed"})
            pieces.append([args[i : i + 4] for i in range(0, len(args), 4)])
            n = len(args.split())
        else:
            text = " ".join(f"tok{i}" for i in range(n))
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            mid = "msg_" + uuid.uuid4().hex[:24]
            items.append({"type": "message", "id": mid, "status": "completed", "role": "assistant", "content": [part]})
            pieces.append([(" " if i else "") + f"tok{i}" for i in range(n)])
        reasoning = len(b["reasoning"].split())
        incomplete = n >= limit and b["mode"] != "tool_call"
        if incomplete and items[-1]["type"] == "message":
            items[-1]["status"] = "incomplete"
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": min(int(b["cached"]), prompt)},
            "output_tokens": n + reasoning,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": prompt + n + reasoning,
        }
        done = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "model": body.get("model"),
            "output": items,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "max_output_tokens": body.get("max_output_tokens"),
            "usage": usage,
        }
        if not body.get("stream") or b["ignore_stream"]:
            if b["mode"] == "stall":
                await asyncio.sleep(3600)
            if b["token_delay"]:  # the headers go out only when the whole answer is generated
                await asyncio.sleep(max(n, 1) * b["token_delay"])
            return web.json_response(done)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        self.open_streams += 1
        seq = iter(range(10**6))

        async def send(kind: str, **fields: Any) -> None:
            await resp.write(self._sse(kind, {"type": kind, "sequence_number": next(seq), **fields}))

        try:
            started = {**done, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
            await send("response.created", response=started)
            await send("response.in_progress", response=started)
            sent = 0
            for index, (item, deltas) in enumerate(zip(items, pieces, strict=True)):
                kind = item["type"]
                opening = {**item}
                if kind == "message":
                    opening.update(status="in_progress", content=[])
                elif kind == "function_call":
                    opening.update(status="in_progress", arguments="")
                else:
                    opening.update(content=[])
                await send("response.output_item.added", output_index=index, item=opening)
                where = {"item_id": item["id"], "output_index": index}
                if kind == "message":
                    await send(
                        "response.content_part.added", **where, content_index=0, part={**item["content"][0], "text": ""}
                    )
                delta_kind = {
                    "message": "response.output_text.delta",
                    "function_call": "response.function_call_arguments.delta",
                    "reasoning": "response.reasoning_text.delta",
                }[kind]
                for piece in deltas:
                    if b["mode"] == "stall" and sent == b["stall_after"]:
                        await asyncio.sleep(3600)
                    if b["mode"] == "truncate" and sent == b["stall_after"]:
                        await resp.write_eof()  # a clean end of the body, without `response.completed`
                        return resp
                    if b["mode"] == "stream_error" and sent == b["stall_after"]:
                        await send("error", code="server_error", message=b["error_message"], param=None)
                        await resp.write_eof()
                        return resp
                    extra = {"content_index": 0} if kind != "function_call" else {}
                    if kind == "message":
                        extra["logprobs"] = []
                    await send(delta_kind, **where, **extra, delta=piece)
                    sent += 1
                    if b["token_delay"]:
                        await asyncio.sleep(b["token_delay"])
                if kind == "message":
                    part = item["content"][0]
                    await send("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=[])
                    await send("response.content_part.done", **where, content_index=0, part=part)
                elif kind == "function_call":
                    await send("response.function_call_arguments.done", **where, arguments=item["arguments"])
                else:
                    await send("response.reasoning_text.done", **where, content_index=0, text=b["reasoning"])
                await send("response.output_item.done", output_index=index, item=item)
            await send("response.incomplete" if incomplete else "response.completed", response=done)
            await resp.write_eof()
        finally:
            self.open_streams -= 1
        return resp
