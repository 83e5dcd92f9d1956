"""Chat Completions answers -> OpenAI Responses answers: whole response objects and SSE events.

Streaming emits, each with a running `sequence_number`: `response.created`,
`response.in_progress`; per output item `response.output_item.added`, then for a message
`response.content_part.added`, `response.output_text.delta`s, `response.output_text.done`,
`response.content_part.done`, for a function call `response.function_call_arguments.delta`s and
`.done`, for reasoning `response.reasoning_text.delta`s and `.done`; `response.output_item.done`;
finally `response.completed` (or `response.incomplete` when the token limit cut the answer) with
`usage`. Codex reads items from `output_item.done` and treats a stream without
`response.completed` as failed, so every finished stream ends with it; an upstream failure
mid-stream ends with `error` then `response.failed` (whose `error.code` Codex inspects:
`rate_limit_exceeded` is retried, `server_error` reported).

Item ids are `msg_…`, `fc_…`, `rs_…`; a function call's `call_id` is the upstream tool-call id, so
the client's `function_call_output` finds its way back to the right Chat `tool_call_id`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from gateway.translate.common import (
    ChatStreamTranslator,
    answer_usage,
    chat_usage,
    drive,
    flat_name,
    mcp_functions,
    new_id,
    reasoning_of,
    tool_call_slot,
)

logger = logging.getLogger(__name__)

IdMaker = Callable[[str], str]

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


def error_code(status: int) -> str:
    """The Responses `error.code` for an upstream HTTP status."""
    if status == 429:
        return "rate_limit_exceeded"
    if status in (400, 413, 422):
        return "invalid_prompt"
    return "server_error"


def _tools_echo(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools = request.get("tools") or []
    return [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]


def response_shell(
    request: dict[str, Any], *, response_id: str, created_at: int, status: str = "in_progress"
) -> dict[str, Any]:
    """The Response object's fields that do not depend on the answer, echoed from the request."""
    reasoning = request.get("reasoning") if isinstance(request.get("reasoning"), dict) else None
    text = request.get("text") if isinstance(request.get("text"), dict) else None
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request.get("model"),
        "output": [],
        "parallel_tool_calls": bool(request.get("parallel_tool_calls", True)),
        "previous_response_id": None,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")} if reasoning else None,
        "store": False,
        "temperature": request.get("temperature"),
        "text": {"format": (text or {}).get("format") or {"type": "text"}},
        "tool_choice": request.get("tool_choice") or "auto",
        "tools": _tools_echo(request),
        "top_p": request.get("top_p"),
        "truncation": "disabled",
        "usage": None,
        "user": request.get("user") if isinstance(request.get("user"), str) else None,
        "metadata": metadata if isinstance(metadata := request.get("metadata"), dict) else {},
    }


def usage_of(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Responses usage (input includes cached tokens, unlike Anthropic's)."""
    prompt, completion, cached, reasoning = chat_usage(usage)
    details = (usage or {}).get("prompt_tokens_details")
    written = details.get("cache_write_tokens") if isinstance(details, dict) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": written if isinstance(written, int) else 0,  # an Anthropic channel's
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    content = [_text_part(text)] if status != "in_progress" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}] if text else [],
    }


def _call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str, mcp: dict[str, tuple[str, str]] | None = None
) -> dict[str, Any]:
    """A function_call item; a call to one of the request's MCP functions (`mcp`: from
    responses_request.mcp_functions) names its tool and namespace apart, as Codex expects."""
    item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name}
    if mcp and name in mcp:
        item["namespace"], item["name"] = mcp[name]
    return {**item, "arguments": arguments, "status": status}


def _finish(response: dict[str, Any], finish_reason: str | None) -> None:
    reason = INCOMPLETE_REASONS.get(finish_reason or "")
    response["status"] = "incomplete" if reason else "completed"
    response["incomplete_details"] = {"reason": reason} if reason else None


def from_chat_completion(
    completion: dict[str, Any],
    *,
    request: dict[str, Any],
    response_id: str | None = None,
    created_at: int | None = None,
    make_id: IdMaker = new_id,
) -> dict[str, Any]:
    """A complete Response object for a complete (non-streamed) Chat Completion."""
    response = response_shell(
        request,
        response_id=response_id or make_id("resp_"),
        created_at=created_at if created_at is not None else int(time.time()),
    )
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    finish = choice.get("finish_reason")
    item_status = "incomplete" if finish == "length" else "completed"
    output: list[dict[str, Any]] = []
    reasoning = reasoning_of(message)
    if reasoning:
        output.append(_reasoning_item(make_id("rs_"), reasoning))
    text = message.get("content") or message.get("refusal") or ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    calls = message.get("tool_calls") or []
    if text or not calls:
        output.append(_message_item(make_id("msg_"), text, item_status))
    for call in calls:
        function = call.get("function") or {}
        output.append(
            _call_item(
                make_id("fc_"),
                call.get("id") or make_id("call_"),
                function.get("name") or "",
                function.get("arguments") or "",
                "completed",
                mcp_functions(request.get("tools")),
            )
        )
    response["output"] = output
    response["usage"] = usage_of(answer_usage(completion))
    _finish(response, finish)
    return response


class StreamTranslator(ChatStreamTranslator):
    """Chat chunks -> Responses events, chunk by chunk (by `stream_from_chat` or the gateway relay);
    `fail()` gives the `error` + `response.failed` pair for an upstream failure."""

    def __init__(
        self,
        request: dict[str, Any],
        *,
        response_id: str | None = None,
        created_at: int | None = None,
        make_id: IdMaker = new_id,
    ) -> None:
        self.make_id = make_id
        self.response = response_shell(
            request,
            response_id=response_id or make_id("resp_"),
            created_at=created_at if created_at is not None else int(time.time()),
        )
        self.sequence = 0
        self.started = False
        self.items: list[dict[str, Any]] = []  # finished items, by output_index
        self.current: dict[str, Any] | None = None  # {"kind", "index", "item", "text"| "args"}
        self.tools: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.finished = False  # a finish_reason arrived
        self.done = False  # the closing (or failing) events went out
        self.usage: dict[str, Any] | None = None
        self.mcp = mcp_functions(request.get("tools"))

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self.response, "output": list(self.items)}

    def start(self) -> list[dict[str, Any]]:
        if self.started:
            return []
        self.started = True
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    @property
    def _index(self) -> int:
        return len(self.items)

    def _close(self) -> list[dict[str, Any]]:
        current, self.current = self.current, None
        if current is None:
            return []
        index, item_id = current["index"], current["item"]["id"]
        events: list[dict[str, Any]] = []
        if current["kind"] == "message":
            text = "".join(current["parts"])
            status = "incomplete" if self.finish_reason == "length" else "completed"
            events.append(
                self._event(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            events.append(
                self._event(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=_text_part(text),
                )
            )
            item = _message_item(item_id, text, status)
        elif current["kind"] == "reasoning":
            text = "".join(current["parts"])
            events.append(
                self._event(
                    "response.reasoning_text.done", item_id=item_id, output_index=index, content_index=0, text=text
                )
            )
            item = _reasoning_item(item_id, text)
        else:
            base = current["item"]
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    name=base["name"],
                    arguments="".join(current["parts"]),
                )
            )
            name = flat_name(base["namespace"], base["name"]) if base.get("namespace") else base["name"]
            item = _call_item(item_id, base["call_id"], name, "".join(current["parts"]), "completed", self.mcp)
        events.append(self._event("response.output_item.done", output_index=index, item=item))
        self.items.append(item)
        return events

    def _open(self, kind: str, item: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close()
        index = self._index
        # Deltas are kept as parts and joined once at the end (no quadratic string building).
        self.current = {"kind": kind, "index": index, "item": item, "parts": []}
        events.append(self._event("response.output_item.added", output_index=index, item=item))
        if kind == "message":
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=_text_part(""),
                )
            )
        return events

    def _feed_choice(self, choice: dict[str, Any], delta: dict[str, Any], events: list[dict[str, Any]]) -> None:
        reasoning = reasoning_of(delta)
        if reasoning:
            if self.current is None or self.current["kind"] != "reasoning":
                events += self._open("reasoning", _reasoning_item(self.make_id("rs_"), ""))
            events.append(self._text_delta("response.reasoning_text.delta", reasoning))
        text = delta.get("content")
        if text:
            if self.current is None or self.current["kind"] != "message":
                events += self._open("message", _message_item(self.make_id("msg_"), "", "in_progress"))
            event = self._text_delta("response.output_text.delta", text)
            event["logprobs"] = []
            events.append(event)
        for call in delta.get("tool_calls") or []:
            events += self._tool(call)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            self.finished = True

    def _text_delta(self, kind: str, text: str) -> dict[str, Any]:
        """Add `text` to the open reasoning or message item and return its `kind` delta event."""
        current = self.current
        assert current is not None
        current["parts"].append(text)
        return self._event(
            kind, item_id=current["item"]["id"], output_index=current["index"], content_index=0, delta=text
        )

    def _tool(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        key, tool, arguments = tool_call_slot(self.tools, call)
        events: list[dict[str, Any]] = []
        if tool["state"] == "waiting":
            tool["pending"] += arguments
            # Calls may interleave (parallel calls' pieces by turns): one whose item would close
            # another's still open (whose arguments may go on) waits, its arguments kept, until
            # the end (`finish`).
            if tool["name"] and (self.current is None or "key" not in self.current):
                events += self._open_tool(key, tool)
        elif tool["state"] == "open" and self.current is not None and self.current.get("key") == key:
            if arguments:
                events.append(self._args_delta(arguments))
        elif arguments:
            logger.warning("chat->responses: dropped arguments for tool call %s after its item closed", key)
        return events

    def _args_delta(self, arguments: str) -> dict[str, Any]:
        current = self.current
        assert current is not None
        current["parts"].append(arguments)
        return self._event(
            "response.function_call_arguments.delta",
            item_id=current["item"]["id"],
            output_index=current["index"],
            delta=arguments,
        )

    def _open_tool(self, key: int, tool: dict[str, Any]) -> list[dict[str, Any]]:
        tool["state"] = "open"
        call_id = tool["id"] or self.make_id("call_")
        item = _call_item(self.make_id("fc_"), call_id, tool["name"] or "", "", "in_progress", self.mcp)
        events = self._open("function_call", item)
        assert self.current is not None
        self.current["key"] = key
        if tool["pending"]:
            events.append(self._args_delta(tool["pending"]))
            tool["pending"] = ""
        return events

    def finish(self, usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Closing events once the upstream stream ended. `usage` (Chat shape) stands in when the
        upstream sent none (the gateway's estimate); a stream without `finish_reason` was cut."""
        if self.done:
            return []
        if not self.finished:
            return self.fail(502, "The upstream ended the response before it was complete.")
        self.done = True
        events = self.start()
        for key, tool in sorted(self.tools.items()):
            if tool["state"] == "waiting":
                events += self._open_tool(key, tool)
        if not self.items and self.current is None:  # an empty answer is still an assistant message
            events += self._open("message", _message_item(self.make_id("msg_"), "", "in_progress"))
        events += self._close()
        final = self._snapshot()
        final["usage"] = usage_of(self.usage or usage)
        _finish(final, self.finish_reason)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        events.append(self._event(kind, response=final))
        return events

    def fail(self, status: int, message: str) -> list[dict[str, Any]]:
        """`error` then `response.failed`, whose `error.code` tells Codex whether to retry."""
        if self.done:
            return []
        self.done = True
        events = self.start()
        code = error_code(status)
        events.append(self._event("error", code=code, message=message, param=None))
        failed = self._snapshot()
        failed["status"] = "failed"
        failed["error"] = {"code": code, "message": message}
        events.append(self._event("response.failed", response=failed))
        return events


async def stream_from_chat(
    chunks: AsyncIterable[dict[str, Any]],
    *,
    request: dict[str, Any],
    response_id: str | None = None,
    created_at: int | None = None,
    make_id: IdMaker = new_id,
) -> AsyncIterator[dict[str, Any]]:
    """Responses SSE events (as dicts, see common.encode_sse) for parsed Chat Completion chunks.

    An upstream failure mid-stream (a chunk carrying `error`, or an exception raised by `chunks`)
    and a stream that stops before any `finish_reason` end with `error` + `response.failed`.
    """
    state = StreamTranslator(request, response_id=response_id, created_at=created_at, make_id=make_id)
    async for event in drive(state, chunks, "chat->responses"):
        yield event


def failure_events(status: int, message: str, *, response_id: str | None = None) -> list[dict[str, Any]]:
    """`error` + `response.failed` for a stream that is not ours to number (a pass-through relay
    whose upstream died): Codex reads `response.failed`, the SDK both."""
    code = error_code(status)
    failed = response_shell({}, response_id=response_id or new_id("resp_"), created_at=int(time.time()))
    failed["status"] = "failed"
    failed["error"] = {"code": code, "message": message}
    return [
        {"type": "error", "sequence_number": 0, "code": code, "message": message, "param": None},
        {"type": "response.failed", "sequence_number": 1, "response": failed},
    ]
