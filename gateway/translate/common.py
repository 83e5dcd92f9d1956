"""Small helpers shared by the translation modules."""

from __future__ import annotations

import json
import logging
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

import orjson

logger = logging.getLogger(__name__)


class TranslationError(ValueError):
    """A request that cannot be expressed in Chat Completions: the surface answers 400 with it."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def new_id(prefix: str) -> str:
    """An opaque id in the style of the API being imitated (`msg_…`, `toolu_…`, `resp_…`)."""
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def encode_sse(event: dict[str, Any]) -> bytes:
    """One SSE frame with an `event:` line: both Anthropic's and OpenAI's SDKs dispatch on it."""
    kind: str = event["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def parse_arguments(arguments: Any) -> dict[str, Any]:
    """Tool-call arguments as an object; models sometimes emit junk, and clients send objects or
    numbers where the JSON text belongs, none of which must become a 500."""
    if not isinstance(arguments, str):
        if arguments is None or isinstance(arguments, dict):
            return arguments or {}
        return {"value": arguments}
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"raw_arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def text_of(content: Any) -> str:
    """Plain text from a string or a list of text-ish blocks/parts (other kinds are skipped)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    return str(content)


def chat_tools(tools: Any, function_of: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Chat Completions `tools` from a request's list of tool objects: `function_of` gives each
    one's `function` (see `chat_function`), or None to drop a tool Chat has no equivalent for."""
    if not tools:
        return []
    if not isinstance(tools, list):
        raise TranslationError("`tools` must be a list.", "tools")
    out = []
    for tool in tools:
        if not isinstance(tool, dict):
            raise TranslationError("Each tool must be an object.", "tools")
        function = function_of(tool)
        if function is not None:
            out.append({"type": "function", "function": function})
    return out


def chat_function(name: str, parameters: Any, description: Any) -> dict[str, Any]:
    """A Chat Completions tool's `function` (an empty object schema when `parameters` is empty)."""
    function: dict[str, Any] = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
    if description:
        function["description"] = description
    return function


def answer_usage(answer: Any) -> dict[str, Any] | None:
    """The `usage` of a Chat answer or chunk, with llama.cpp's prompt-cache hits (`timings.cache_n`,
    beside the usage) as `prompt_tokens_details.cached_tokens` where the usage does not say."""
    if not isinstance(answer, dict):
        return None
    usage = answer.get("usage")
    timings = answer.get("timings")
    if not isinstance(usage, dict) or not isinstance(timings, dict):
        return usage if isinstance(usage, dict) else None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        return usage
    cache_n = timings.get("cache_n")
    if not isinstance(cache_n, int) or isinstance(cache_n, bool) or cache_n <= 0:
        return usage
    return {**usage, "prompt_tokens_details": {**(details or {}), "cached_tokens": cache_n}}


def chat_usage(usage: dict[str, Any] | None) -> tuple[int, int, int, int]:
    """(prompt, completion, cached prompt, reasoning) tokens from a Chat Completions usage object."""
    usage = usage or {}
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
    reasoning = int(((usage.get("completion_tokens_details") or {}).get("reasoning_tokens")) or 0)
    return prompt, completion, min(cached, prompt), reasoning


def status_of(error: Any) -> int:
    """The HTTP status an OpenAI-shaped error object stands for (500 when it does not say)."""
    if isinstance(error, dict):
        for key in ("status", "code"):
            value = error.get(key)
            if isinstance(value, int) and 400 <= value < 600:
                return value
        if (
            error.get("type") in ("rate_limit_error", "rate_limit_exceeded")
            or error.get("code") == "rate_limit_exceeded"
        ):
            return 429
    return 500


async def chat_chunks(stream: AsyncIterable[bytes]) -> AsyncIterator[dict[str, Any]]:
    """Parsed `data:` payloads of a Chat Completions SSE byte stream, up to `[DONE]`.

    Bytes may split lines anywhere; comments, `event:` lines and unparsable payloads are skipped
    (an upstream's keep-alives must not break the translation).
    """
    buffer = b""
    async for piece in stream:
        buffer += piece
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            payload = _payload(line)
            if payload is None:
                continue
            if payload == b"[DONE]":
                return
            try:
                value = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, dict):
                yield value
    payload = _payload(buffer)
    if payload and payload != b"[DONE]":
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if isinstance(value, dict):
            yield value


def _payload(line: bytes) -> bytes | None:
    line = line.rstrip(b"\r")
    if not line.startswith(b"data:"):
        return None
    return line[5:].strip()


# count_tokens: what Claude Code's /context and compaction use. Exact counts need the upstream's
# own chat template; we count the flattened prompt instead (with the upstream tokenizer when it has
# /tokenize, else `text_tokens`) and add fixed costs:
MESSAGE_OVERHEAD_TOKENS = 4  # role markers and separators of a typical chat template
IMAGE_TOKENS = 1600  # Anthropic's cost of a ~1.15 megapixel image, the size images are scaled to
CHARS_PER_TOKEN = 4  # the usual figure for English and code (Qwen's tokenizer: 4.04 on our English UI strings)

# The scripts written without spaces, where a token holds one or two characters, not four: CJK
# ideographs (and their extensions), kana, hangul, CJK punctuation and full-width forms.
_WIDE = re.compile(
    "[\u2e80-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]+"
)


def text_tokens(text: str) -> int:
    """Tokens of `text`, estimated without a tokenizer: ≈4 characters a token, and half a token a
    character of Chinese, Japanese or Korean (at 4 characters a token a Chinese prompt was counted
    at less than half its size: routed to windows too small, quotas reserved short).

    Half a token is a floor: Qwen's tokenizer takes 0.67 a character of CJK (our zh-Hans UI strings),
    Llama 3's and GPT-4's more. An estimate must stay low: the gateway refuses a prompt whose
    estimate no route's window holds."""
    if text.isascii():  # a flag of the str object: no scan
        return (len(text) + 3) // CHARS_PER_TOKEN
    wide = sum(map(len, _WIDE.findall(text)))
    return (len(text) - wide + 3) // CHARS_PER_TOKEN + (wide + 1) // 2


def prompt_text(chat: dict[str, Any]) -> tuple[str, int, int]:
    """(flattened text, number of messages, number of images) of a Chat Completions request.
    Parts of a shape it does not know are skipped (the body is the client's, checked elsewhere)."""
    texts: list[str] = []
    images = 0
    messages = chat.get("messages")
    if not isinstance(messages, list):
        messages = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        images += _content_text(message.get("content"), texts)
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                texts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    if chat.get("tools"):
        texts.append(json.dumps(chat["tools"], ensure_ascii=False))
    return "\n".join(texts), len(messages), images


def _content_text(content: Any, texts: list[str]) -> int:
    """Append the text of one message's (or Responses item's) content to `texts`; its image count."""
    if isinstance(content, str):
        texts.append(content)
        return 0
    images = 0
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("image_url", "image", "input_image"):
            images += 1
    return images


def request_text(body: dict[str, Any]) -> tuple[str, int, int]:
    """(flattened text, messages, images) of the prompt of any request the gateway sends upstream:
    Chat and Anthropic Messages (`messages`, Anthropic's `system`), Responses (`input`,
    `instructions`), legacy Completions (`prompt`) and Embeddings (`input`). Token-id prompts count
    as no text (their estimate stands)."""
    text, messages, images = prompt_text(body)
    texts = [text] if text else []
    for field in ("system", "instructions"):
        images += _content_text(body.get(field), texts)
    for field in ("prompt", "input"):
        value = body.get(field)
        if isinstance(value, str):
            texts.append(value)
            continue
        for item in value if isinstance(value, list) else ():
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, dict):  # a Responses input item
                if item.get("type", "message") == "message":
                    messages += 1
                images += _content_text(item.get("content"), texts)
                if isinstance(item.get("arguments"), str):
                    texts.append(item["arguments"])
                if isinstance(item.get("output"), str):
                    texts.append(item["output"])
    return "\n".join(texts), messages, images


def estimate_tokens(chat: dict[str, Any], counted: int | None = None) -> int:
    """Input tokens of a Chat request: its text's tokens `counted` by a tokenizer when known, else
    estimated (`text_tokens`)."""
    text, messages, images = prompt_text(chat)
    tokens = text_tokens(text) if counted is None else counted
    return tokens + messages * MESSAGE_OVERHEAD_TOKENS + images * IMAGE_TOKENS


def tool_call_slot(tools: dict[int, dict[str, Any]], call: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
    """Place one Chat Completions `tool_calls` delta: its slot key, the slot's accumulated state
    (id, name, pending arguments, state) and the argument text this delta adds.

    Servers that omit `index` send one call per run of chunks, so a new id opens a new slot."""
    key = call.get("index")
    if key is None:
        known = {t["id"] for t in tools.values()}
        key = len(tools) if (call.get("id") and call["id"] not in known) or not tools else max(tools)
    tool = tools.setdefault(key, {"id": None, "name": None, "pending": "", "state": "waiting"})
    function = call.get("function") or {}
    if call.get("id") and not tool["id"]:
        tool["id"] = call["id"]
    if function.get("name") and not tool["name"]:
        tool["name"] = function["name"]
    return key, tool, function.get("arguments") or ""


def reasoning_of(message: dict[str, Any]) -> str:
    """The reasoning text of a Chat message or delta (`reasoning_content` / `reasoning` from vLLM,
    llama.cpp, DeepSeek…), empty when there is none."""
    value = message.get("reasoning_content") or message.get("reasoning") or ""
    return value if isinstance(value, str) else ""


class ChatStreamTranslator(ABC):
    """One streamed translation of Chat Completion chunks, driven chunk by chunk (by `drive` or the
    gateway relay).

    `feed(chunk)` returns the events for one parsed upstream chunk, `finish()` the closing events
    once the upstream stream ended, `fail()` the error events for an upstream failure. After either
    ending, `done` is true and every method returns nothing more. `feed` does what every
    translation does with a chunk (an `error` chunk fails the stream; the first chunk opens it; the
    latest `usage` is kept; only choice 0 counts, n > 1 has no equivalent) and hands each delta to
    `_feed_choice`.
    """

    done: bool
    usage: dict[str, Any] | None

    @abstractmethod
    def start(self) -> list[dict[str, Any]]:
        """The opening events, once."""

    @abstractmethod
    def fail(self, status: int, message: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _feed_choice(self, choice: dict[str, Any], delta: dict[str, Any], events: list[dict[str, Any]]) -> None:
        """Append to `events` what one choice-0 `delta` (of `choice`) becomes."""

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if self.done or not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            return self.fail(status_of(error), message or "Upstream error.")
        events = self.start()
        if chunk.get("usage"):
            self.usage = answer_usage(chunk)
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) == 0:
                self._feed_choice(choice, choice.get("delta") or {}, events)
        return events


async def drive(
    state: ChatStreamTranslator, chunks: AsyncIterable[dict[str, Any]], direction: str
) -> AsyncIterator[dict[str, Any]]:
    """Run a ChatStreamTranslator over parsed chunks.

    An exception raised by `chunks` (the upstream died) ends the stream with the translator's own
    error events instead of propagating, so the client always gets a well-formed ending."""
    try:
        async for chunk in chunks:
            for event in state.feed(chunk):
                yield event
            if state.done:
                return
    except Exception:
        logger.warning("%s: upstream stream failed", direction, exc_info=True)
        for event in state.fail(502, "The upstream connection failed during the response."):
            yield event
        return
    for event in state.finish():
        yield event


# Codex (0.169) sends each MCP server's tools as one Responses `namespace` tool, `mcp__<server>`:
# Chat has no namespaces, so the Responses translators flatten them and split calls back.
MCP_NAMESPACE = "mcp__"


def flat_name(namespace: str, name: str) -> str:
    return f"{namespace}__{name}"


def _mcp_namespace(tool: Any) -> list[tuple[int, dict[str, Any]]] | None:
    """The function tools of one MCP namespace tool with their places in it, or None for any other tool."""
    if not (
        isinstance(tool, dict) and tool.get("type") == "namespace" and str(tool.get("name")).startswith(MCP_NAMESPACE)
    ):
        return None
    inner = tool.get("tools")
    return [
        (place, t)
        for place, t in enumerate(inner if isinstance(inner, list) else [])
        if isinstance(t, dict) and t.get("type") == "function" and t.get("name")
    ]


def mcp_functions(tools: Any) -> dict[str, tuple[str, str]]:
    """{flat name: (namespace, tool)} for the function tools of the request's MCP namespaces."""
    out = {}
    for tool in tools if isinstance(tools, list) else []:
        for _, inner in _mcp_namespace(tool) or []:
            out[flat_name(tool["name"], inner["name"])] = (tool["name"], inner["name"])
    return out


def flat_tools(tools: Any) -> Any:
    """The request's tools with each MCP namespace replaced by its functions under their flat names."""
    if not isinstance(tools, list):
        return tools
    out: list[Any] = []
    for tool in tools:
        inner = _mcp_namespace(tool)
        out += [tool] if inner is None else [{**t, "name": flat_name(tool["name"], t["name"])} for _, t in inner]
    return out


def flat_function_fields(tools: Any) -> list[str]:
    """The field each function tool of `flat_tools(tools)` was named by, in order: `tools[2].name`,
    or `tools[3].tools[0].name` in an MCP namespace."""
    out: list[str] = []
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        inner = _mcp_namespace(tool)
        if inner is not None:
            out += [f"tools[{index}].tools[{place}].name" for place, _ in inner]
        elif isinstance(tool, dict) and tool.get("type") == "function":
            out.append(f"tools[{index}].name")
    return out


# Tool names the cloud APIs take (their 400 otherwise): letters, digits, `_` and `-`, at most 128 of
# them for an Anthropic custom tool, 64 for an OpenAI function. Local servers take any name.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]+")
ANTHROPIC_TOOL_NAME_MAX = 128
OPENAI_TOOL_NAME_MAX = 64


def refuse_tool_name(name: Any, where: str, *, channel: str, longest: int) -> None:
    """Refuse, by the client's own field, a tool name a translated request's cloud API would refuse:
    its 400 would name a field of the translation (`tools.0.custom.name`) the client never sent."""
    if isinstance(name, str) and len(name) <= longest and TOOL_NAME.fullmatch(name):
        return
    raise TranslationError(
        f"`{where}` is not a tool name this model's channel ({channel}) accepts: use letters, digits, "
        f"underscores and dashes, at most {longest} of them.",
        where,
    )


def refuse_openai_function_names(chat: dict[str, Any]) -> None:
    """A translated Chat request's function names, as a cloud OpenAI-compatible channel takes them."""
    for index, tool in enumerate(chat.get("tools") or []):
        refuse_tool_name(
            tool["function"]["name"],
            f"tools[{index}].function.name",
            channel="OpenAI-compatible cloud",
            longest=OPENAI_TOOL_NAME_MAX,
        )
