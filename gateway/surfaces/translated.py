"""What the translated surfaces (Messages, Responses) share: opening a call whose body is also
translated to Chat Completions, and relaying a stream from a native channel through the surface's
own dialect or from a Chat channel through a translator of Chat chunks as they arrive."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.admission import open_call
from gateway.cache import RouteInfo, snapshot
from gateway.call import Call, UpstreamResponse
from gateway.chunks import ChunkReader, event_data
from gateway.http import GatewayError, Request
from gateway.native import ReadsNative
from gateway.relay import Dialect, ReadsChunks, model_renames, relay, renamed
from gateway.translate import TranslationError
from gateway.translate.common import ChatStreamTranslator, encode_sse
from gateway.usage import Usage, estimate_tokens


@dataclass(slots=True)
class TranslatedCall:
    """A call opened for a surface that is translated to Chat Completions for channels that do
    not speak it natively."""

    call: Call
    stream: bool
    chat: dict[str, Any] | None  # the Chat Completions request, None when the body did not translate
    problem: TranslationError | None  # why not: fatal only if a translating channel gets picked
    prompt: int  # prompt estimate reserved against the limits
    chat_headers: dict[str, str]  # client headers for translated requests (no anthropic-*)

    def chat_request(self, kind: str | None = None) -> dict[str, Any]:
        """A copy of the Chat Completions request for one route (of channel `kind`), or the
        translation's error. A conversation that ends with the assistant's words is a prefill
        (Anthropic's way to start the answer, e.g. with "{"): vLLM and SGLang continue that message
        only when asked to, else they open a new turn after it. (llama-server continues it by itself.)"""
        if self.problem is not None:
            raise self.problem
        assert self.chat is not None
        chat = dict(self.chat)
        if kind in CONTINUES_WHEN_ASKED:
            messages = chat.get("messages")
            if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
                chat.setdefault("continue_final_message", True)
                chat.setdefault("add_generation_prompt", False)
        return chat


CONTINUES_WHEN_ASKED = frozenset({"vllm", "sglang"})


def cloud_openai(route: RouteInfo) -> bool:
    """A cloud OpenAI-compatible channel: a request translated for it is held to OpenAI's rules
    before it is sent (a local server takes what its chat template takes)."""
    return route.kind == "openai" and not route.local


async def open_translated_call(
    req: Request,
    body: dict[str, Any],
    *,
    surface: str,
    to_chat: Callable[[dict[str, Any]], dict[str, Any]],
    max_tokens_field: str,
    prompt_field: str,
) -> TranslatedCall:
    """Translate, cap the output to what the model's routes allow, and open the call (auth, model,
    reserve). The translation is attempted up front so the reservation uses its token estimate."""
    stream = stream_of(body)
    max_tokens = max_tokens_of(body, max_tokens_field)
    try:
        chat: dict[str, Any] | None = to_chat(body)
        problem: TranslationError | None = None
    except TranslationError as exc:
        chat, problem = None, exc
    prompt = estimate_tokens(chat["messages"] if chat else body.get(prompt_field))
    limit = clamp(max_tokens, await output_cap(body.get("model")))
    if chat is not None and max_tokens is not None:
        chat["max_tokens"] = limit
    call = await open_call(
        req, surface=surface, model=body.get("model"), stream=stream, prompt_tokens=prompt, max_tokens=limit, body=body
    )
    return TranslatedCall(call, stream, chat, problem, prompt, without_anthropic_headers(req.headers))


def stream_of(body: dict[str, Any]) -> bool:
    """`stream`, a boolean: a sloppy `"false"` or `0` would otherwise decide the answer's format
    by its truthiness (a stream to a client that asked for none)."""
    value = body.get("stream")
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    raise GatewayError(400, "`stream` must be true or false.", code="invalid_value", param="stream")


# The most output tokens a request may ask for: no model generates more, and the reservation
# (prompt + output for each of up to 128 choices, and its price) stays far inside the 64-bit
# integers of the admission script's counters (past them it failed half-way: "Redis unreachable").
MAX_TOKENS = 2**31 - 1


def max_tokens_of(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise GatewayError(
            400, f"`{name}` must be an integer from 1 to {MAX_TOKENS}.", code="invalid_value", param=name
        )
    return value


async def output_cap(model: object) -> int | None:
    """The model's configured max output tokens (the smallest over its routes), if any."""
    if not isinstance(model, str):
        return None
    info = (await snapshot.get_catalog()).models.get(model)
    return info.max_output_tokens if info is not None else None


def clamp(max_tokens: int | None, cap: int | None) -> int | None:
    """Claude Code asks for 32000 output tokens whatever the model; a vLLM channel refuses any
    request whose prompt + max_tokens exceeds its context, so ask for no more than the route allows."""
    if cap is None:
        return max_tokens
    return cap if max_tokens is None else min(max_tokens, cap)


def without_anthropic_headers(headers: dict[str, str]) -> dict[str, str]:
    """Client headers for a Chat upstream: Anthropic's own go only to Anthropic-native channels."""
    return {k: v for k, v in headers.items() if not k.startswith("anthropic-")}


def encode(events: list[dict[str, Any]]) -> bytes:
    return b"".join(encode_sse(e) for e in events)


async def relay_stream(
    call: Call,
    up: UpstreamResponse,
    *,
    native: Dialect | None,
    translator: Callable[[], ChatStreamTranslator],
) -> None:
    """Relay a successful stream: a native channel's through the surface's own dialect
    (`native`), a Chat channel's through a `translator()` made for it."""
    await relay(call, up, native if native is not None else TranslatedDialect(translator(), call.max_tokens))


class ReadsNativeEvents(ReadsNative):
    """A dialect relaying a native stream (Messages, Responses) to a client of the same API: events
    go out as they came but for the model's public name in place of the upstream's id (the
    cloud's dated id: `claude-sonnet-4-5-20250929` for a client that asked for `team-sonnet`),
    and the reader keeps the usage, the tokens and the cut (`ReadsNative`). Each surface adds its
    `__init__` (its reader, then `ReadsNativeEvents.__init__`) and its `error` event."""

    __slots__ = ("public", "renames")

    def __init__(self, public: str) -> None:
        self.public = public
        # Read off the first event (`message_start`'s message, `response.created`'s response).
        self.renames: tuple[tuple[bytes, bytes], ...] | None = None

    def feed(self, event: bytes) -> bytes:
        data = event_data(event)
        if data is None:
            return b""  # comments: the relay sends its own keep-alives
        read = self.reader.read(data)
        if read is None:
            return b""
        if self.renames is None:
            inner = read.get("message") or read.get("response")
            self.renames = model_renames(inner.get("model") if isinstance(inner, dict) else None, self.public)
        return renamed(event, self.renames)

    def close(self, usage: Usage) -> bytes:
        # Our closing events repeat the upstream's response, its id and all.
        return renamed(encode(self.reader.cut_events(usage)), self.renames) if self.reader.done else b""


class TranslatedDialect(ReadsChunks):
    """Chat chunks from the upstream, another API's events to the client (`translator`): the
    chunks are read (usage, tokens, the cut at the reservation) as for a Chat client, and each
    one the Chat client would get is translated. The closing events go out after the upstream's
    usage chunk, with the usage the call settles on (the upstream's, or its estimate)."""

    def __init__(self, translator: ChatStreamTranslator, limit: int | None) -> None:
        self.translator = translator
        self.reader = ChunkReader(limit, 1)

    def feed(self, event: bytes) -> bytes:
        data = event_data(event)
        if data is None:
            return b""
        chunk, closing = self.reader.read(data)
        events: list[dict[str, Any]] = []
        for part in ([chunk] if chunk is not None else []) + closing:
            events += self.translator.feed(part)
        return encode(events)

    def close(self, usage: Usage) -> bytes:
        return encode(self.translator.finish(usage.as_chat()))

    def error(self, err: GatewayError) -> bytes:
        return encode(self.translator.fail(err.status, err.message))
