"""Chat Completions answers -> Anthropic Messages answers: whole responses, SSE events, errors.

Streaming emits Anthropic's exact sequence: `message_start`, then per content block
`content_block_start`, `content_block_delta`s (`text_delta`, `input_json_delta`, `thinking_delta`)
and `content_block_stop`, one `ping` after the first block opens, then `message_delta` (stop
reason and cumulative usage) and `message_stop`. Blocks never interleave: a new block closes the
previous one, as Anthropic's own stream does. Chat streams put usage in a chunk after the one with
`finish_reason`, so the closing events wait for the end of the upstream stream (no other buffering).

A tool call's arguments become `input_json_delta`s through an `ArgumentsGuard`: unchanged while
they are JSON, and closed into one object (the rest as `raw_arguments`) where the model wrote
something else, so the SDKs' parse as the deltas come never fails (`arguments.py`).

`message_start` carries the input tokens the caller knows in advance (0 when unknown); the real
count arrives in `message_delta.usage.input_tokens`, which the SDKs treat as the cumulative total.

Reasoning text (`reasoning_content` / `reasoning` from vLLM, llama.cpp, DeepSeek…) becomes a
`thinking` block only when the client asked for thinking; its `signature` is empty, and
anthropic_request drops thinking blocks on the way back, so the empty signature never matters.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from gateway.translate.arguments import ArgumentsGuard
from gateway.translate.common import (
    ChatStreamTranslator,
    answer_usage,
    chat_usage,
    drive,
    new_id,
    parse_arguments,
    reasoning_of,
    tool_call_slot,
)

logger = logging.getLogger(__name__)

STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    504: "timeout_error",
    413: "invalid_request_error",  # Anthropic's docs say request_too_large; the SDK's types do not
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status (5xx other than 503/529 is `api_error`)."""
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(status: int, message: str) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}` for an HTTP error of `status`."""
    return {"type": "error", "error": {"type": error_type(status), "message": message}}


def error_from_openai(status: int, body: Any) -> dict[str, Any]:
    """Re-shape an OpenAI-style error body (ours or an upstream's) for an Anthropic client."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
    elif isinstance(error, str):
        message = error
    else:
        message = ""
    return error_body(status, message or f"Upstream error (HTTP {status}).")


def _stop(choice: dict[str, Any]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence) of a Chat choice. Which stop string ended the answer is known
    where the server says it: vLLM's `stop_reason`, SGLang's `matched_stop` (a number there is a
    stop token, not one of the client's sequences). llama.cpp does not say, so there a stop
    sequence cannot be told from the end of the turn."""
    finish = choice.get("finish_reason")
    for field in ("stop_reason", "matched_stop"):
        matched = choice.get(field)
        if finish == "stop" and isinstance(matched, str) and matched:
            return "stop_sequence", matched
    return STOP_REASONS.get(finish or "stop", "end_turn"), None


def _usage(usage: dict[str, Any] | None) -> dict[str, int]:
    prompt, completion, cached, _ = chat_usage(usage)
    return {
        "input_tokens": prompt - cached,
        "output_tokens": completion,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def from_chat_completion(
    completion: dict[str, Any],
    *,
    model: str,
    thinking: bool = False,
    message_id: str | None = None,
    make_id: Callable[[str], str] = new_id,
) -> dict[str, Any]:
    """A complete Messages response for a complete (non-streamed) Chat Completion."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if thinking and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    text = message.get("content")
    if not text and message.get("refusal"):
        text = message["refusal"]
    if isinstance(text, list):  # some servers answer with parts
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    if text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or make_id("toolu_"),
                "name": function.get("name") or "",
                "input": parse_arguments(function.get("arguments")),
            }
        )
    stop_reason, stop_sequence = _stop(choice)
    if message.get("tool_calls") and stop_reason == "end_turn":
        stop_reason = "tool_use"  # some servers say "stop" after a tool call
    return {
        "id": message_id or make_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": _usage(answer_usage(completion)),
    }


def stream_error_event(message: str, status: int = 500) -> dict[str, Any]:
    """The `error` event sent when a stream fails after it started."""
    return error_body(status, message)


class StreamTranslator(ChatStreamTranslator):
    """Chat chunks -> Messages events, chunk by chunk (by `stream_from_chat` or the gateway relay);
    `fail()` gives the `error` event for an upstream failure."""

    def __init__(
        self,
        *,
        model: str,
        thinking: bool = False,
        message_id: str | None = None,
        input_tokens: int = 0,
        make_id: Callable[[str], str] = new_id,
    ) -> None:
        self.model = model
        self.thinking = thinking
        self.make_id = make_id
        self.message_id = message_id or make_id("msg_")
        self.input_tokens = input_tokens
        self.started = False
        self.pinged = False
        self.index = -1  # index of the last block opened
        self.open: str | None = None  # kind of the open block ("text", "thinking", "tool:<n>")
        self.open_tool: dict[str, Any] | None = None  # the open block's tool call, if it is one
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish_choice: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False

    def start(self) -> list[dict[str, Any]]:
        if self.started:
            return []
        self.started = True
        usage = {
            "input_tokens": self.input_tokens,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        return [{"type": "message_start", "message": message}]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        events = []
        if self.open_tool is not None:
            rest = self.open_tool["guard"].close()  # what makes the arguments sent one object
            if rest:
                events.append(self._delta({"type": "input_json_delta", "partial_json": rest}))
            self.open_tool = None
        self.open = None
        events.append({"type": "content_block_stop", "index": self.index})
        return events

    def _begin(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        self.index += 1
        self.open = kind
        events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        if not self.pinged:
            self.pinged = True
            events.append({"type": "ping"})
        return events

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _feed_choice(self, choice: dict[str, Any], delta: dict[str, Any], events: list[dict[str, Any]]) -> None:
        reasoning = reasoning_of(delta)
        if reasoning and self.thinking:
            if self.open != "thinking":
                events += self._begin("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            events.append(self._delta({"type": "thinking_delta", "thinking": reasoning}))
        text = delta.get("content")
        if text:
            if self.open != "text":
                events += self._begin("text", {"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": text}))
        for call in delta.get("tool_calls") or []:
            events += self._tool(call)
        if choice.get("finish_reason"):
            self.finish_choice = choice

    def _tool(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        key, tool, arguments = tool_call_slot(self.tools, call)
        events: list[dict[str, Any]] = []
        if tool["state"] == "waiting":
            tool["pending"] += arguments
            # Calls may interleave (parallel calls' pieces by turns): one whose block would close
            # another's still open (whose arguments may go on) waits, its arguments kept, until
            # the end (`finish`).
            if tool["name"] and not (self.open or "").startswith("tool:"):
                events += self._open_tool(key, tool)
        elif tool["state"] == "open" and self.open == f"tool:{key}":
            arguments = tool["guard"].feed(arguments)
            if arguments:
                events.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        elif arguments:
            logger.warning("chat->messages: dropped arguments for tool call %s after its block closed", key)
        return events

    def _open_tool(self, key: int, tool: dict[str, Any]) -> list[dict[str, Any]]:
        tool["state"] = "open"
        tool["id"] = tool["id"] or self.make_id("toolu_")
        block = {"type": "tool_use", "id": tool["id"], "name": tool["name"] or "", "input": {}}
        events = self._begin(f"tool:{key}", block)
        tool["guard"] = guard = ArgumentsGuard()
        self.open_tool = tool
        pending = guard.feed(tool["pending"])
        tool["pending"] = ""
        if pending:
            events.append(self._delta({"type": "input_json_delta", "partial_json": pending}))
        return events

    def fail(self, status: int, message: str) -> list[dict[str, Any]]:
        """The `error` event that ends a stream the upstream broke (`status` picks its type)."""
        if self.done:
            return []
        self.done = True
        return [*self.start(), stream_error_event(message, status)]

    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Closing events once the upstream stream ended. `usage` (Chat shape) stands in when the
        upstream sent none (the gateway's estimate); a stream without `finish_reason` was cut."""
        if self.done:
            return []
        if self.finish_choice is None:
            return self.fail(502, "The upstream ended the response before it was complete.")
        self.done = True
        events = self.start()
        for key, tool in sorted(self.tools.items()):
            if tool["state"] == "waiting":  # a call whose name never came: still the model's answer
                events += self._open_tool(key, tool)
        events += self._close()
        if not self.pinged:
            self.pinged = True
            events.append({"type": "ping"})
        stop_reason, stop_sequence = _stop(self.finish_choice)
        if self.tools and stop_reason == "end_turn":
            stop_reason = "tool_use"
        usage = _usage(self.usage or usage)
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": usage,
            }
        )
        events.append({"type": "message_stop"})
        return events


async def stream_from_chat(
    chunks: AsyncIterable[dict[str, Any]],
    *,
    model: str,
    thinking: bool = False,
    message_id: str | None = None,
    input_tokens: int = 0,
    make_id: Callable[[str], str] = new_id,
) -> AsyncIterator[dict[str, Any]]:
    """Anthropic SSE events (as dicts, see common.encode_sse) for parsed Chat Completion chunks.

    An upstream failure mid-stream, either a chunk carrying `error` or an exception raised by
    `chunks`, ends the stream with an Anthropic `error` event; so does a stream that stops
    before any `finish_reason`, since the answer is then truncated.
    """
    state = StreamTranslator(
        model=model, thinking=thinking, message_id=message_id, input_tokens=input_tokens, make_id=make_id
    )
    async for event in drive(state, chunks, "chat->messages"):
        yield event
