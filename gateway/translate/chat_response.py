"""Anthropic Messages answers -> Chat Completions answers: whole responses, SSE chunks, errors.

A message becomes one choice: `text` blocks -> `content`, `thinking` blocks -> `reasoning_content`
(the field vLLM, llama.cpp and DeepSeek use), `tool_use` blocks -> `tool_calls` (input as JSON
`arguments`). `stop_reason` -> `finish_reason` (`STOP_REASONS`); a matched stop sequence is `stop`.
Usage: `prompt_tokens` counts every input token (uncached + cache read + cache write), the cache
reads are `prompt_tokens_details.cached_tokens`, the cache writes `cache_write_tokens` beside them.

Streaming (`StreamTranslator`, one upstream event in, zero or more Chat chunks out): the first
chunk carries `role`; `text_delta` -> `content`, `thinking_delta` -> `reasoning_content`, each
`tool_use` block opens `tool_calls[i]` (id, name, empty arguments) and its `input_json_delta`s
become `tool_calls[i].function.arguments` deltas, `i` counting tool calls from 0; `message_delta`
gives the chunk with `finish_reason`; `finish` adds the usage chunk (`choices: []`) only when the
client asked for it (`stream_options.include_usage`). The caller ends the stream with
`data: [DONE]` (`encode(..., done=True)`). An upstream `error` event, or a stream that ends
before `message_stop`, ends it with an OpenAI-shaped error event carrying our own message, never
the upstream's text.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from gateway.translate.common import new_id

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

# Anthropic error type -> (HTTP status, OpenAI error type) for errors in the OpenAI shape.
ERROR_TYPES = {
    "invalid_request_error": (400, "invalid_request_error"),
    "authentication_error": (401, "authentication_error"),
    "permission_error": (403, "permission_error"),
    "not_found_error": (404, "not_found_error"),
    "request_too_large": (413, "invalid_request_error"),
    "rate_limit_error": (429, "rate_limit_error"),
    "api_error": (502, "upstream_error"),
    "timeout_error": (504, "timeout_error"),
    "overloaded_error": (503, "service_unavailable"),
}


def finish_reason(stop_reason: Any) -> str:
    return STOP_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def chat_usage(usage: Any) -> dict[str, Any]:
    """A Chat usage object for an Anthropic one (all input parts counted as prompt)."""
    usage = usage if isinstance(usage, dict) else {}
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + read + written
    completion = int(usage.get("output_tokens") or 0)
    details = {"cached_tokens": read}
    if written:  # OpenRouter's name for it; `usage.usage_from` records it as cache creation
        details["cache_write_tokens"] = written
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
    }


def from_message(
    message: dict[str, Any], *, model: str, created: int | None = None, make_id: Callable[[str], str] = new_id
) -> dict[str, Any]:
    """A complete `chat.completion` for a complete (non-streamed) Messages response."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking") or ""))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": block.get("id") or make_id("call_"),
                    "type": "function",
                    "function": {
                        "name": block.get("name") or "",
                        "arguments": orjson.dumps(block.get("input") or {}).decode(),
                    },
                }
            )
    out_message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        out_message["reasoning_content"] = "".join(reasoning)
    if calls:
        out_message["tool_calls"] = calls
    return {
        "id": message.get("id") or make_id("chatcmpl-"),
        "object": "chat.completion",
        "created": created if created is not None else int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": out_message,
                "logprobs": None,
                "finish_reason": finish_reason(message.get("stop_reason")),
            }
        ],
        "usage": chat_usage(message.get("usage")),
    }


def error_from_anthropic(status: int, body: Any) -> tuple[int, dict[str, Any]]:
    """(status, OpenAI error body) for an Anthropic error answer (`{"type": "error", "error": …}`).
    Messages' 529 `overloaded_error` becomes 503: the OpenAI surface has no 529."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str) or not message:
        message = f"The upstream failed with HTTP {status}."
    if status == 529:
        status = 503
    openai_type = ERROR_TYPES.get(kind, (status, "upstream_error"))[1] if isinstance(kind, str) else "upstream_error"
    return status, {"error": {"message": message, "type": openai_type, "code": kind or "upstream_error", "param": None}}


def stream_error(status: int, message: str, code: str) -> dict[str, Any]:
    """The `data:` error event that ends a Chat stream after it started."""
    kind = ERROR_TYPES.get(code, (status, "upstream_error"))[1]
    return {"error": {"message": message, "type": kind, "code": code, "param": None}}


def encode(chunks: list[dict[str, Any]], *, done: bool = False) -> bytes:
    """Chat SSE frames (`data: …`, no `event:` line), with the closing `data: [DONE]` if `done`."""
    out = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return out + b"data: [DONE]\n\n" if done else out


class StreamTranslator:
    """Messages SSE events -> `chat.completion.chunk`s, one parsed upstream event at a time.

    `feed(event)` returns the chunks for one event, `finish(usage)` the closing ones once the
    upstream stream ended (`usage`, Chat-shaped, stands in when the upstream sent none), `fail()`
    the error event for an upstream failure. After either ending `done` is true."""

    def __init__(
        self,
        *,
        model: str,
        include_usage: bool = False,
        created: int | None = None,
        make_id: Callable[[str], str] = new_id,
    ) -> None:
        self.model = model
        self.include_usage = include_usage
        self.created = created if created is not None else int(time.time())
        self.make_id = make_id
        self.id = make_id("chatcmpl-")
        self.started = False
        self.tools: dict[int, int] = {}  # content block index -> tool_calls index
        self.finish_reason: str | None = None
        self.stopped = False  # message_stop seen
        self.usage: dict[str, Any] | None = None  # Anthropic-shaped, merged over the stream
        self.cut_short = False  # ended by the gateway at the reservation (`cut`)
        self.done = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    def _start(self) -> list[dict[str, Any]]:
        if self.started:
            return []
        self.started = True
        return [self._chunk({"role": "assistant", "content": ""})]

    def _merge_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            # message_delta's usage is cumulative; a part it leaves out (or null) keeps message_start's
            self.usage = {**(self.usage or {}), **{k: v for k, v in usage.items() if v is not None}}

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.done or not isinstance(event, dict):
            return []
        kind = event.get("type")
        if kind == "error":
            error = event.get("error")
            code = error.get("type") if isinstance(error, dict) else None
            code = code if code in ERROR_TYPES else "api_error"
            status = ERROR_TYPES[code][0]
            return self.fail(status, f"The upstream failed while streaming ({code}); the answer is incomplete.", code)
        out = self._start()
        if kind == "message_start":
            message = event.get("message") or {}
            if isinstance(message, dict):
                self._merge_usage(message.get("usage"))
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self.tools[event.get("index", -1)] = len(self.tools)
                call = {
                    "index": index,
                    "id": block.get("id") or self.make_id("call_"),
                    "type": "function",
                    "function": {"name": block.get("name") or "", "arguments": ""},
                }
                out.append(self._chunk({"tool_calls": [call]}))
            elif block.get("type") == "text" and block.get("text"):
                out.append(self._chunk({"content": block["text"]}))
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            dkind = delta.get("type")
            if dkind == "text_delta" and delta.get("text"):
                out.append(self._chunk({"content": delta["text"]}))
            elif dkind == "thinking_delta" and delta.get("thinking"):
                out.append(self._chunk({"reasoning_content": delta["thinking"]}))
            elif dkind == "input_json_delta" and delta.get("partial_json"):
                slot = self.tools.get(event.get("index", -1))
                if slot is not None:
                    call = {"index": slot, "function": {"arguments": delta["partial_json"]}}
                    out.append(self._chunk({"tool_calls": [call]}))
        elif kind == "message_delta":
            self._merge_usage(event.get("usage"))
            stop = (event.get("delta") or {}).get("stop_reason")
            if stop is not None and self.finish_reason is None:
                self.finish_reason = finish_reason(stop)
                out.append(self._chunk({}, self.finish_reason))
        elif kind == "message_stop":
            self.stopped = True
        return out

    def cut(self) -> list[dict[str, Any]]:
        """The chunk ending an answer the gateway cut at its reservation (finish reason `length`);
        `finish` then reports the usage it is given, the one the call settles on."""
        if self.done or self.finish_reason is not None:
            return []
        self.finish_reason, self.stopped, self.cut_short = "length", True, True
        return [*self._start(), self._chunk({}, "length")]

    def fail(self, status: int, message: str, code: str = "api_error") -> list[dict[str, Any]]:
        if self.done:
            return []
        self.done = True
        return [stream_error(status, message, code)]

    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The closing chunks: the usage chunk when asked for. A stream cut before `message_stop`
        ends with an error event instead (the answer is incomplete)."""
        if self.done:
            return []
        if not self.stopped or self.finish_reason is None:
            return self.fail(502, "The upstream ended the response before it was complete.", "api_error")
        self.done = True
        if not self.include_usage:
            return []
        chunk = self._chunk({})
        chunk["choices"] = []
        if self.cut_short and usage is not None:
            chunk["usage"] = usage
        else:
            chunk["usage"] = chat_usage(self.usage) if self.usage else (usage or chat_usage(None))
        return [chunk]
