"""Reading a native Anthropic Messages or OpenAI Responses stream (a channel that speaks the
client's API): usage, output tokens, the cut at the reserved output, the non-streaming answer
assembled from the stream, and the events that end a stream cut at its reservation the way a real
one ends.

Beside `chunks` (the same for Chat chunks) and below `call` and `relay`: `call` assembles a
non-streaming answer from the stream it asked the upstream for, a surface's dialect relays one to a
streaming client; both read the events through one reader, so both paths cut at the same place.
A reader raises UpstreamStreamError for an error event or junk (our own error goes out instead).
"""

from __future__ import annotations

from typing import Any

import orjson

from .chunks import parse_event, take_events
from .errors import Failure, UpstreamStreamError
from .usage import Usage, usage_from


def _index(event: dict[str, Any], name: str = "index") -> int:
    index = event.get(name)
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def anthropic_usage(usage: dict[str, Any]) -> Usage:
    """Anthropic splits input into uncached, cache-read and cache-write tokens: all were input,
    and the cache-read and cache-write parts are recorded as such."""
    read = int(usage.get("cache_read_input_tokens") or 0)
    written = int(usage.get("cache_creation_input_tokens") or 0)
    prompt = int(usage.get("input_tokens") or 0) + read + written
    return Usage(prompt, int(usage.get("output_tokens") or 0), cached_tokens=read, cache_creation_tokens=written)


# ---------------------------------------------------------------------------- Anthropic Messages

# The text each delta type adds to its block (`signature_delta` replaces, `input_json_delta` is
# parsed at the block's end, `citations_delta` appends a citation).
TEXT_DELTAS = {"text_delta": "text", "thinking_delta": "thinking"}
TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class MessagesReader:
    """Reads a Messages stream: `message_start`, blocks (`content_block_start`, `_delta`s,
    `_stop`), `message_delta` (stop reason, cumulative usage), `message_stop`. Every
    `content_block_delta` but a signature is one output token: the one past `limit` is dropped
    and the reader is `done`. With `assemble`, the message is built as Anthropic's own
    non-streaming answer has it (every block kind and field the upstream sent)."""

    __slots__ = ("assemble", "blocks", "done", "ended", "limit", "message", "open", "parts", "reported", "tokens")
    room = 0  # `call.Assembly.room`: given each piece of the stream as it comes

    def __init__(self, limit: int | None, *, assemble: bool = False) -> None:
        self.limit = limit
        self.assemble = assemble
        self.tokens = 0
        self.done = False  # cut at the reservation
        self.ended = False  # `message_stop` seen
        self.reported: dict[str, Any] | None = None  # the upstream's usage, merged over the stream
        self.message: dict[str, Any] | None = None  # `message_start`'s message (with `assemble`)
        self.open: list[int] = []  # blocks started and not stopped
        self.blocks: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, list[str]] = {}  # each block's text / JSON pieces, joined at its end

    @property
    def usage(self) -> Usage | None:
        """The upstream's usage; `message_start` says 1 output token and only `message_delta` the
        rest, so a stream cut or broken before it is charged the deltas seen (estimated)."""
        if self.reported is None:
            return None
        usage = anthropic_usage(self.reported)
        if usage.completion_tokens < self.tokens:
            return Usage(
                usage.prompt_tokens,
                self.tokens,
                estimated=True,
                cached_tokens=usage.cached_tokens,
                cache_creation_tokens=usage.cache_creation_tokens,
            )
        return usage

    def read(self, data: bytes) -> dict[str, Any] | None:
        """One event's data: the parsed event, or None for the delta past the reservation."""
        event = parse_event(data)
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            dkind = delta.get("type") if isinstance(delta, dict) else None
            if dkind != "signature_delta":
                if self.limit is not None and self.tokens >= self.limit:
                    self.done = True
                    return None
                self.tokens += 1
            if self.assemble and isinstance(delta, dict):
                self._delta(_index(event), dkind, delta)
        elif kind == "content_block_start":
            index = _index(event)
            self.open.append(index)
            if self.assemble:
                block = event.get("content_block")
                self.blocks[index] = dict(block) if isinstance(block, dict) else {}
                self.parts[index] = []
        elif kind == "content_block_stop":
            index = _index(event)
            if index in self.open:
                self.open.remove(index)
            if self.assemble:
                self._end_block(index)
        elif kind == "message_delta":
            self._merge_usage(event.get("usage"))
            delta = event.get("delta")
            if self.assemble and self.message is not None and isinstance(delta, dict):
                self.message.update(delta)  # stop_reason, stop_sequence, container, …
        elif kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._merge_usage(message.get("usage"))
                if self.assemble:
                    self.message = dict(message)
        elif kind == "message_stop":
            self.ended = True
        elif kind == "error":
            raise UpstreamStreamError(Failure.STREAM_ERROR)
        return event

    def feed(self, data: bytes) -> None:
        """`read` for `take_events`."""
        self.read(data)

    def take(self, buffer: bytes) -> bytes | None:
        """`call.Assembly.take` (a non-streaming answer assembled from the stream)."""
        return take_events(self, buffer)

    def ongoing(self, piece: bytes) -> bool:
        """`call.Assembly.ongoing`: never assumed (each piece is read as it comes, `room` 0)."""
        return False

    def _merge_usage(self, usage: Any) -> None:
        # message_delta's usage is cumulative; a part it leaves out (or null) keeps message_start's
        if isinstance(usage, dict):
            self.reported = {**(self.reported or {}), **{k: v for k, v in usage.items() if v is not None}}

    def _delta(self, index: int, kind: Any, delta: dict[str, Any]) -> None:
        block = self.blocks.get(index)
        if block is None:
            return
        if kind in TEXT_DELTAS:
            piece = delta.get(TEXT_DELTAS[kind])
            if isinstance(piece, str):
                self.parts[index].append(piece)
        elif kind == "input_json_delta":
            piece = delta.get("partial_json")
            if isinstance(piece, str):
                self.parts[index].append(piece)
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            citations = block.get("citations")
            block["citations"] = [*(citations if isinstance(citations, list) else []), delta.get("citation")]

    def _end_block(self, index: int) -> None:
        block, parts = self.blocks.get(index), self.parts.pop(index, None)
        if block is None or not parts:
            return
        kind = block.get("type")
        if kind in TOOL_BLOCKS:
            try:  # cut mid-arguments: the input stays what the block started with
                block["input"] = orjson.loads("".join(parts))
            except orjson.JSONDecodeError:
                pass
        elif kind in ("text", "thinking"):
            had = block.get(kind)
            block[kind] = (had if isinstance(had, str) else "") + "".join(parts)

    def answer(self) -> dict[str, Any]:
        """The whole message, as a non-streaming request gets it; a stream that ended before
        `message_stop` (and was not cut by us) raises."""
        if self.message is None or not (self.ended or self.done):
            raise UpstreamStreamError(Failure.TRUNCATED)
        for index in list(self.parts):
            self._end_block(index)
        message = self.message
        message["content"] = [self.blocks[i] for i in sorted(self.blocks)]
        usage = dict(self.reported or {})
        if self.done:  # ended by us at the reservation, as the upstream would end it
            message["stop_reason"], message["stop_sequence"] = "max_tokens", None
            usage["output_tokens"] = max(int(usage.get("output_tokens") or 0), self.tokens)
        message["usage"] = usage
        return message

    def cut_events(self, usage: Usage) -> list[dict[str, Any]]:
        """How a stream cut at its reservation ends, as one the upstream stops at max_tokens:
        the open block's `content_block_stop`, `message_delta` (stop reason `max_tokens`, the
        output charged), `message_stop`."""
        events: list[dict[str, Any]] = [{"type": "content_block_stop", "index": i} for i in self.open]
        self.open = []
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": usage.completion_tokens},
            }
        )
        events.append({"type": "message_stop"})
        return events


# ------------------------------------------------------------------------------ OpenAI Responses

DONE_EVENTS = frozenset({"response.completed", "response.incomplete"})
START_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})


def responses_usage(usage: Usage) -> dict[str, Any]:
    """A Responses `usage` object for what the call settles on."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total,
    }


class ResponsesReader:
    """Reads a Responses stream: `response.created` (the response's id and shell), output items
    (`response.output_item.added`, their deltas, `response.output_item.done`), and the final
    `response.completed` / `response.incomplete`, which carries the whole response and its usage.
    Every `*.delta` event is one output token: the one past `limit` is dropped and the reader is
    `done`. The items are built from the deltas as they come, so an answer cut by us still has
    them."""

    __slots__ = ("done", "ended", "final", "items", "limit", "parts", "sequence", "shell", "tokens")
    room = 0  # `call.Assembly.room`: given each piece of the stream as it comes

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.tokens = 0
        self.done = False  # cut at the reservation
        self.ended = False  # `response.completed` / `response.incomplete` seen
        self.sequence = -1  # the last sequence number seen
        self.shell: dict[str, Any] | None = None  # the response as `response.created` had it
        self.final: dict[str, Any] | None = None  # the response as the final event has it
        self.items: dict[int, dict[str, Any]] = {}  # output items by output_index
        self.parts: dict[tuple[int, int], list[str]] = {}  # text / arguments pieces by (item, part)

    @property
    def usage(self) -> Usage | None:
        if self.final is None:
            return None
        return usage_from(self.final.get("usage"))

    def read(self, data: bytes) -> dict[str, Any] | None:
        """One event's data: the parsed event, or None for the delta past the reservation."""
        event = parse_event(data)
        kind = event.get("type")
        if not isinstance(kind, str):
            if "error" in event:
                raise UpstreamStreamError(Failure.STREAM_ERROR)
            return event
        if kind.endswith(".delta"):
            if self.limit is not None and self.tokens >= self.limit:
                self.done = True
                return None
            self.tokens += 1
            self._delta(kind, event)
        elif kind == "response.output_item.added" or kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                index = _index(event, "output_index")
                self.items[index] = dict(item)
                if kind == "response.output_item.done":
                    for key in [k for k in self.parts if k[0] == index]:
                        del self.parts[key]
        elif kind == "response.content_part.added":
            item, part = self.items.get(_index(event, "output_index")), event.get("part")
            if item is not None and isinstance(part, dict):
                item["content"] = [*(item.get("content") or []), dict(part)]
        elif kind in DONE_EVENTS:
            self.ended = True
            response = event.get("response")
            self.final = response if isinstance(response, dict) else {}
        elif kind in START_EVENTS:
            response = event.get("response")
            if isinstance(response, dict):
                self.shell = response
        elif kind == "error" or kind == "response.failed":
            raise UpstreamStreamError(Failure.STREAM_ERROR)
        sequence = event.get("sequence_number")
        if isinstance(sequence, int):
            self.sequence = sequence
        return event

    def feed(self, data: bytes) -> None:
        """`read` for `take_events`."""
        self.read(data)

    def take(self, buffer: bytes) -> bytes | None:
        """`call.Assembly.take` (a non-streaming answer assembled from the stream)."""
        return take_events(self, buffer)

    def ongoing(self, piece: bytes) -> bool:
        """`call.Assembly.ongoing`: never assumed (each piece is read as it comes, `room` 0)."""
        return False

    def _delta(self, kind: str, event: dict[str, Any]) -> None:
        piece = event.get("delta")
        if not isinstance(piece, str):
            return
        index = _index(event, "output_index")
        self.parts.setdefault((index, _index(event, "content_index")), []).append(piece)

    def _open_items(self) -> list[tuple[int, dict[str, Any]]]:
        """The items not done yet (by output index), with their text so far, status `incomplete`."""
        for (index, part), pieces in sorted(self.parts.items()):
            item = self.items.get(index)
            if item is None:
                continue
            text = "".join(pieces)
            if item.get("type") == "function_call":
                item["arguments"] = str(item.get("arguments") or "") + text
            else:
                content = item.get("content")
                if isinstance(content, list) and part < len(content) and isinstance(content[part], dict):
                    had = content[part].get("text")
                    content[part] = {**content[part], "text": (had if isinstance(had, str) else "") + text}
                elif item.get("type") == "reasoning":
                    item["content"] = [{"type": "reasoning_text", "text": text}]
        self.parts.clear()
        cut = [(index, item) for index, item in sorted(self.items.items()) if item.get("status") == "in_progress"]
        for _, item in cut:
            item["status"] = "incomplete"
        return cut

    def _response(self, usage: dict[str, Any] | None) -> dict[str, Any]:
        """The response cut at the reservation: `incomplete`, reason `max_output_tokens`."""
        response = dict(self.shell or {})
        self._open_items()
        response["status"] = "incomplete"
        response["incomplete_details"] = {"reason": "max_output_tokens"}
        response["output"] = [self.items[i] for i in sorted(self.items)]
        response["usage"] = usage
        return response

    def answer(self) -> dict[str, Any]:
        """The whole response, as a non-streaming request gets it (its `usage` None when we cut
        it: the caller puts in what the call settles on); a stream that ended before its final
        event (and was not cut by us) raises."""
        if self.done:
            return self._response(None)
        if self.final is None:
            raise UpstreamStreamError(Failure.TRUNCATED)
        final = self.final
        if not final.get("output") and self.items:  # a server that leaves the items to the events
            final = {**final, "output": [self.items[i] for i in sorted(self.items)]}
        return final

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    def cut_events(self, usage: Usage) -> list[dict[str, Any]]:
        """How a stream cut at its reservation ends, as one the upstream stops at
        max_output_tokens: the open items' `.done` events, then `response.incomplete`."""
        events: list[dict[str, Any]] = []
        for index, item in self._open_items():
            item_id = item.get("id")
            if item.get("type") == "message":
                for number, part in enumerate(item.get("content") or []):
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        text = part.get("text") or ""
                        events.append(
                            {
                                "type": "response.output_text.done",
                                "sequence_number": self._next(),
                                "item_id": item_id,
                                "output_index": index,
                                "content_index": number,
                                "text": text,
                                "logprobs": [],
                            }
                        )
                        events.append(
                            {
                                "type": "response.content_part.done",
                                "sequence_number": self._next(),
                                "item_id": item_id,
                                "output_index": index,
                                "content_index": number,
                                "part": part,
                            }
                        )
            elif item.get("type") == "function_call":
                events.append(
                    {
                        "type": "response.function_call_arguments.done",
                        "sequence_number": self._next(),
                        "item_id": item_id,
                        "output_index": index,
                        "arguments": item.get("arguments") or "",
                    }
                )
            events.append(
                {
                    "type": "response.output_item.done",
                    "sequence_number": self._next(),
                    "output_index": index,
                    "item": item,
                }
            )
        response = self._response(responses_usage(usage))
        events.append({"type": "response.incomplete", "sequence_number": self._next(), "response": response})
        return events

    def fail_events(self, code: str, message: str) -> list[dict[str, Any]] | None:
        """`error` + `response.failed` numbered after the upstream's events, for the response it
        started (None before `response.created`: the caller makes a response of its own)."""
        if self.shell is None:
            return None
        failed = {**self.shell, "status": "failed", "error": {"code": code, "message": message}}
        failed["output"] = [self.items[i] for i in sorted(self.items)]
        return [
            {"type": "error", "sequence_number": self._next(), "code": code, "message": message, "param": None},
            {"type": "response.failed", "sequence_number": self._next(), "response": failed},
        ]


class ReadsNative:
    """A dialect whose upstream speaks a native stream (Messages, Responses), read by its reader:
    the usage, the output tokens, the cut at the reservation and whether the stream reached its
    last event (`relay.Dialect`'s attributes) come from the reader."""

    __slots__ = ()
    reader: MessagesReader | ResponsesReader

    @property
    def usage(self) -> Usage | None:
        return self.reader.usage

    @property
    def tokens(self) -> int:
        return self.reader.tokens

    @property
    def done(self) -> bool:
        return self.reader.done

    @property
    def complete(self) -> bool:
        return self.reader.ended
