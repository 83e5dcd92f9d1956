"""Reading an OpenAI stream (Chat Completions or legacy Completions chunks): usage, tokens per
choice, the cut at the reserved output, and the assembly of a non-streaming answer from it.

Below `call` and `relay` (it imports only `errors`): `call` assembles a non-streaming answer from
the stream it asked the upstream for (`ChatAssembly`), `relay` relays one to a streaming client;
both read the chunks through one `ChunkReader`, so both paths cut at the same place. (`native`
does the same for Messages and Responses streams.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol

import orjson

from .errors import Failure, UpstreamStreamError
from .usage import Usage, usage_from

DONE = b"[DONE]"
# llama.cpp writes `data: null` between the prompts of a legacy Completions request with several
# (each prompt's chunks, its finish and its usage, then null): nothing to read or relay.
NULL = b"null"
NONE: list[dict[str, Any]] = []  # no closing chunks (shared, never appended to)
# Byte searches on the hot path use `find`: CPython 3.11's `bytes in bytes` first tries the needle
# as an integer and builds (then drops) a TypeError each time.


def split_events(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (each ending in a blank line) and what is left of `buffer`."""
    if buffer.find(b"\r") >= 0:
        buffer = buffer.replace(b"\r\n", b"\n")
    events: list[bytes] = []
    start = 0
    while True:
        end = buffer.find(b"\n\n", start)
        if end < 0:
            break
        events.append(buffer[start : end + 2])
        start = end + 2
    return events, buffer[start:]


def split_data(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The `data:` payloads of the complete SSE events in `buffer` (comments and events without
    data left out) and what is left of it: `split_events` + `event_data` in one pass, for a reader
    that needs only the data."""
    if buffer.find(b"\r") >= 0:
        buffer = buffer.replace(b"\r\n", b"\n")
    parts = buffer.split(b"\n\n")
    rest = parts.pop()
    out: list[bytes] = []
    for part in parts:
        if part.startswith(b"data: ") and part.find(b"\n") < 0:  # the common event: one data line
            out.append(part[6:])
        else:
            lines = [line[5:].strip() for line in part.split(b"\n") if line.startswith(b"data:")]
            if lines:
                out.append(b"\n".join(lines))
    return out, rest


class Feeds(Protocol):
    """Reads a stream one event's data at a time (`ChatAssembly`, `native.MessagesReader`, …)."""

    @property
    def done(self) -> bool:
        """Cut at the reservation."""

    @property
    def ended(self) -> bool:
        """The stream's own last event was seen."""

    def feed(self, data: bytes) -> None:
        """One event's data; raises UpstreamStreamError for an error event or junk."""


def take_events(reader: Feeds, buffer: bytes) -> bytes | None:
    """Feeds `reader` the complete events at the start of `buffer` (a stream's bytes as they came)
    and returns what is left of it, or None once the reader is done or the stream ended
    (`call.Assembly.take`)."""
    datas, rest = split_data(buffer)
    for data in datas:
        reader.feed(data)
        if reader.ended or reader.done:
            return None
    return rest


def event_data(event: bytes) -> bytes | None:
    """The `data:` payload of one SSE event (ending in its blank line); None for a comment or an
    event without data. Lines of other fields (`id:`, `event:`, a broken line) are not data, as in
    `split_data`: both readers of a stream see the same payloads."""
    if event.startswith(b"data: ") and event.find(b"\n") == len(event) - 2:  # the common event: one data line
        return event[6:-2]
    lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def delta_has_output(choice: dict[str, Any]) -> bool:
    """Does this choice of a chunk carry generated text, reasoning or tool arguments (≈ one token)?"""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            return True
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            return any(
                isinstance(c, dict) and isinstance(c.get("function"), dict) and _text(c["function"].get("arguments"))
                for c in calls
            )
        return False
    return _text(choice.get("text"))  # legacy Completions


def parse_event(data: bytes) -> dict[str, Any]:
    """One SSE event's data as a JSON object (a chunk, a Messages or Responses event);
    UpstreamStreamError for junk."""
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise UpstreamStreamError(Failure.INVALID_JSON) from None
    if not isinstance(chunk, dict):
        raise UpstreamStreamError(Failure.INVALID_JSON)
    return chunk


class ChunkReader:
    """Reads the chunks of one upstream stream. `limit` is the output reserved per choice: the
    chunk that would pass it is dropped and the choice ends there with finish reason `length`
    (an upstream that ignores max_tokens gets no further). `done` once every choice is cut."""

    __slots__ = ("changed", "choices", "counts", "cut", "ended", "first", "limit", "summed", "usage", "usage_chunk")

    def __init__(self, limit: int | None, choices: int = 1) -> None:
        self.limit = limit
        self.choices = max(1, choices)
        self.counts: dict[int, int] = {}
        self.cut: set[int] = set()
        self.usage: dict[str, Any] | None = None  # the upstream's usage object (llama.cpp cache hits folded in)
        self.usage_chunk: dict[str, Any] | None = None  # the chunk that carried it (timings and all)
        self.summed = False  # `usage` adds up several prompts' (`_summed`): no one chunk carried it
        self.first: dict[str, Any] | None = None  # the first chunk (id, created, model, fingerprint)
        self.ended = False  # `[DONE]` seen
        self.changed = False  # the last chunk read was changed (a choice dropped by the cut)

    @property
    def done(self) -> bool:
        return len(self.cut) >= self.choices

    @property
    def tokens(self) -> int:
        """Output chunks seen (the completion estimate when the upstream reports no usage)."""
        return sum(self.counts.values())

    def read(self, data: bytes) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """One event's data: (the chunk to pass on, or None to drop it; the closing chunks of
        choices cut by this event). Raises UpstreamStreamError for an error event or invalid JSON."""
        self.changed = False
        if data == DONE:
            self.ended = True
            return None, NONE
        if data == NULL:
            return None, NONE
        return self.take(parse_event(data))

    def take(self, chunk: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """`read` for a chunk already parsed (or made by a translation)."""
        self.changed = False
        if "error" in chunk and not chunk.get("choices"):
            raise UpstreamStreamError("stream_error")
        if self.first is None:
            self.first = chunk
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            usage = _with_cache_hits(usage, chunk.get("timings"))
            if self.usage is not None and self.choices > 1:
                now, before = _finishing(chunk), _finishing(self.usage_chunk)
                if now is not None and before is not None and now != before:
                    usage = _summed(self.usage, usage)  # llama.cpp: each prompt's own, on its finish
                    self.summed = True
                elif now is None and before is None and _usage_only(chunk) and _usage_only(self.usage_chunk):
                    # llama.cpp's Chat: each choice's own on a chunk after its finish, one prompt for all
                    usage = _summed(self.usage, usage, one_prompt=True)
                    self.summed = True
            self.usage_chunk = chunk
            self.usage = usage
        choices = chunk.get("choices")
        if not choices or not isinstance(choices, list):
            return chunk, NONE
        if self.choices == 1 and len(choices) == 1 and not self.cut:  # the common case, kept cheap
            choice = choices[0]
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                if not delta_has_output(choice):
                    return chunk, NONE
                seen = self.counts.get(0, 0) + 1
                if self.limit is None or seen <= self.limit:
                    self.counts[0] = seen
                    return chunk, NONE
        closing: list[dict[str, Any]] = []
        kept: list[Any] = []
        for choice in choices:
            if not isinstance(choice, dict):
                kept.append(choice)
                continue
            index = choice.get("index", 0)
            index = index if isinstance(index, int) else 0
            if index in self.cut:
                continue  # the choice already ended at its reservation
            if delta_has_output(choice):
                seen = self.counts.get(index, 0) + 1
                if self.limit is not None and seen > self.limit:
                    self.cut.add(index)
                    closing.append(self._closing(chunk, choice, index))
                    continue
                self.counts[index] = seen
            kept.append(choice)
        if len(kept) == len(choices):
            return chunk, closing
        self.changed = True
        return ({**chunk, "choices": kept} if kept else None), closing

    def _closing(self, chunk: dict[str, Any], choice: dict[str, Any], index: int) -> dict[str, Any]:
        """The chunk that ends a choice cut at the reservation: finish reason `length`."""
        ended: dict[str, Any] = {"index": index, "finish_reason": "length"}
        if "delta" in choice:
            ended["delta"] = {}
        else:
            ended["text"] = ""
        out = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        out["choices"] = [ended]
        return out


def _finishing(chunk: dict[str, Any] | None) -> int | None:
    """The index of the choice a chunk finishes (None: it finishes none, as OpenAI's usage chunk)."""
    choices = chunk.get("choices") if chunk is not None else None
    if type(choices) is list and len(choices) == 1 and type(choices[0]) is dict and choices[0].get("finish_reason"):
        index = choices[0].get("index", 0)
        return index if type(index) is int else 0
    return None


def _usage_only(chunk: dict[str, Any] | None) -> bool:
    return chunk is not None and not chunk.get("choices")


def _summed(before: dict[str, Any], usage: dict[str, Any], *, one_prompt: bool = False) -> dict[str, Any]:
    """A legacy Completions request of several prompts on llama.cpp: each prompt's finish carries
    that prompt's usage only (and its answer without a stream the first prompt's), so the request's
    is their sum. A Chat request of n choices on llama.cpp: each choice's usage comes on a usage
    chunk of its own, the prompt the same in each (`one_prompt`: counted once, as OpenAI counts
    it). On OpenAI and vLLM one usage chunk, the whole request's, finishes no choice: it replaces
    what came before (`ChunkReader.take` sums finishes of two choices, or two usage chunks)."""
    out = dict(usage)
    for name in ("prompt_tokens", "completion_tokens"):
        a, b = before.get(name), usage.get(name)
        if type(a) is int and type(b) is int:
            out[name] = max(a, b) if one_prompt and name == "prompt_tokens" else a + b
    prompt, completion = out.get("prompt_tokens"), out.get("completion_tokens")
    if type(prompt) is int and type(completion) is int and type(out.get("total_tokens")) is int:
        out["total_tokens"] = prompt + completion
    details = before.get("prompt_tokens_details"), usage.get("prompt_tokens_details")
    if one_prompt:
        return out
    if type(details[0]) is dict and type(details[1]) is dict:
        cached = details[0].get("cached_tokens"), details[1].get("cached_tokens")
        if type(cached[0]) is int and type(cached[1]) is int:
            out["prompt_tokens_details"] = {**details[1], "cached_tokens": cached[0] + cached[1]}
    return out


def _with_cache_hits(usage: dict[str, Any], timings: Any) -> dict[str, Any]:
    """llama.cpp reports its prompt-cache hits as `timings.cache_n` beside the usage."""
    if not isinstance(timings, dict):
        return usage
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and details.get("cached_tokens") is not None:
        return usage
    cache_n = timings.get("cache_n")
    if not isinstance(cache_n, int) or isinstance(cache_n, bool) or cache_n <= 0:
        return usage
    return {**usage, "prompt_tokens_details": {**(details or {}), "cached_tokens": cache_n}}


FINISH_KEYS = frozenset({"index", "delta", "logprobs", "finish_reason"})  # a finish chunk's choice, nothing more
ROLE = {"role": "assistant", "content": ""}  # the first chunk's delta as most servers send it
ROLE_DELTA = b':{"role":"assistant","content":""}'  # … and as its bytes then read, after `"delta"`
RUN_PARTS: tuple[bytes, Callable[[bytes], bytes], bytes] = (b"", bytes, b"")  # no `same` yet
FIRST_ONLY = frozenset({"id", "created", "model", "object", "choices"})  # kept from the first chunk


class Assembler:
    """Builds the non-streaming answer from the chunks of a stream, keeping every field the
    upstream sent: content, reasoning, tool calls, logprobs, `system_fingerprint`, usage,
    llama.cpp's `timings` and whatever else a server adds."""

    def __init__(self, *, legacy: bool) -> None:
        self.legacy = legacy  # Completions (`text`) rather than Chat (`delta` → `message`)
        self.top: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}
        self.parts: dict[Any, list[str]] = {}  # a Chat choice's content pieces, joined once at the end

    def add(self, chunk: dict[str, Any]) -> None:
        self.add_top(chunk)
        for choice in chunk.get("choices") or ():
            if isinstance(choice, dict):
                part = self.parts.get(choice.get("index", 0))
                delta = choice.get("delta")
                # The common chunk: one more piece of text and nothing else.
                if (
                    part is not None
                    and type(delta) is dict
                    and len(delta) == 1
                    and type(delta.get("content")) is str
                    and choice.get("finish_reason") is None
                    and choice.get("logprobs") is None
                ):
                    part.append(delta["content"])
                else:
                    self._choice(choice)

    def add_top(self, chunk: dict[str, Any]) -> None:
        """The answer's fields outside its choices: the first chunk's, then whatever later ones add."""
        top = self.top
        if not top:
            top.update((k, v) for k, v in chunk.items() if k != "choices" and k != "object")
        else:
            for key in chunk.keys() - FIRST_ONLY:  # usually one key (`usage`, null), or none
                value = chunk[key]
                if value is not None:
                    top[key] = value

    def _choice(self, part: dict[str, Any]) -> None:
        index = part.get("index", 0)
        index = index if isinstance(index, int) else 0
        choice = self.choices.get(index)
        if choice is None:
            choice = self.choices[index] = {"index": index}
            if not self.legacy:
                choice["message"] = {"role": "assistant", "content": None}
                self.parts[index] = []
            else:
                choice["text"] = ""
            choice["logprobs"] = None
            choice["finish_reason"] = None
        for key, value in part.items():
            if key == "index":
                continue
            if key == "delta" and isinstance(value, dict):
                if isinstance(value.get("content"), str):
                    self.parts[index].append(value["content"])
                    value = {k: v for k, v in value.items() if k != "content"}
                _merge_delta(choice["message"], value)
            elif key == "text" and isinstance(value, str):
                choice["text"] += value
            elif key == "logprobs":
                choice["logprobs"] = _merge_logprobs(choice["logprobs"], value)
            elif value is not None or key not in choice:
                choice[key] = value

    def answer(self) -> dict[str, Any]:
        out = dict(self.top)
        out["object"] = "text_completion" if self.legacy else "chat.completion"
        for index, pieces in self.parts.items():
            if pieces:
                self.choices[index]["message"]["content"] = "".join(pieces)
        choices = self.choices
        out["choices"] = list(choices.values()) if len(choices) == 1 else [choices[i] for i in sorted(choices)]
        return out


def _merge_delta(message: dict[str, Any], delta: dict[str, Any]) -> None:
    for key, value in delta.items():
        if key == "tool_calls" and isinstance(value, list):
            calls = message.setdefault("tool_calls", [])
            for part in value:
                if isinstance(part, dict):
                    _merge_tool_call(calls, part)
        elif isinstance(value, str) and key != "role":
            had = message.get(key)
            message[key] = (had if isinstance(had, str) else "") + value
        elif value is not None or key not in message:
            message[key] = value


def _merge_tool_call(calls: list[dict[str, Any]], part: dict[str, Any]) -> None:
    index = part.get("index")
    if index is None:  # servers that omit it send one call per run of chunks: a new id opens the next
        fresh = not calls or (part.get("id") and all(call["id"] != part["id"] for call in calls))
        index = len(calls) if fresh else calls[-1]["_index"]
    for call in calls:
        if call["_index"] == index:
            break
    else:
        call = {"_index": index, "id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        calls.append(call)
    for key, value in part.items():
        if key == "index":
            continue
        if key == "function" and isinstance(value, dict):
            for fk, fv in value.items():
                if fk == "name" and isinstance(fv, str):  # whole in its first chunk; some servers repeat it
                    call["function"]["name"] = call["function"].get("name") or fv
                elif isinstance(fv, str):
                    call["function"][fk] = call["function"].get(fk, "") + fv
                elif fv is not None:
                    call["function"][fk] = fv
        elif value is not None:
            call[key] = value


def _merge_logprobs(had: Any, part: Any) -> Any:
    """Chat `{"content": [...]}` lists and legacy `tokens`/`token_logprobs`/… lists are appended."""
    if not isinstance(part, dict):
        return had if part is None else part
    if not isinstance(had, dict):
        return {k: list(v) if isinstance(v, list) else v for k, v in part.items()}
    for key, value in part.items():
        if isinstance(value, list) and isinstance(had.get(key), list):
            had[key].extend(value)
        elif value is not None:
            had[key] = list(value) if isinstance(value, list) else value
    return had


class ChatEvents(Protocol):
    """Reads another API's stream as Chat Completions chunks (Chat on an Anthropic channel)."""

    def chunks(self, data: bytes) -> list[dict[str, Any]]:
        """The Chat chunks for one event's data; raises UpstreamStreamError for an error event or junk."""

    def end(self) -> list[dict[str, Any]]:
        """The closing chunks (the usage chunk) once the stream ended; raises UpstreamStreamError
        when it ended before the answer was complete."""


class ChatAssembly:
    """A non-streaming Chat (or legacy Completions) answer from the events of a stream: read by a
    `ChunkReader` (cut at `limit` output tokens per choice), built by an `Assembler`. Another
    API's stream is read as Chat chunks through `as_chat`. (`call.Assembly`)"""

    __slots__ = ("as_chat", "assembler", "ends", "guessed", "reader", "run_parts", "same")

    def __init__(
        self, limit: int | None, *, choices: int = 1, legacy: bool = False, as_chat: ChatEvents | None = None
    ) -> None:
        self.reader = ChunkReader(limit, choices)
        self.assembler = Assembler(legacy=legacy)
        self.as_chat = as_chat
        self.same: tuple[bytes, bytes] | None = None  # the bytes of an event around a common chunk's text
        self.guessed = False  # `same` was made from the first chunk's bytes, before any text (`_add_role`)
        self.ends: tuple[bytes, bytes, bytes] | None = None  # the finish and usage chunks' bytes (`_take_end`)
        self.run_parts: tuple[bytes, Callable[[bytes], bytes], bytes] = RUN_PARTS  # `same` as `_take_run` reads it

    def _set_same(self, same: tuple[bytes, bytes] | None) -> None:
        """`same`, and how `_take_run` reads a run of it: split at the last bytes of its tail (at
        most 5: `}]}` and the blank line, bytes that a search can skip past), the inner bytes of
        each text sliced out of the pieces, put together again with what lies between two texts."""
        self.same = same
        if same is not None:
            head, tail = same
            k = min(5, len(tail))
            self.run_parts = (tail[-k:], itemgetter(slice(len(head) + 1, k - len(tail) - 1)), b'"' + tail + head + b'"')

    @property
    def done(self) -> bool:
        return self.reader.done

    @property
    def ended(self) -> bool:
        return self.reader.ended

    @property
    def tokens(self) -> int:
        return self.reader.tokens

    @property
    def usage(self) -> Usage | None:
        return usage_from(self.reader.usage)

    @property
    def room(self) -> int | None:
        """`call.Assembly.room`: another API's stream is given piece by piece (one of its events
        may carry more than one chunk)."""
        reader = self.reader
        if self.as_chat is not None:
            return 0
        if reader.limit is None:
            return None
        return reader.limit - max(reader.counts.values(), default=0)

    def take(self, buffer: bytes) -> bytes | None:
        """Reads the complete events at the start of `buffer` (the stream's bytes as they came) and
        returns what is left of it, or None once the answer is complete (`[DONE]`, or every choice
        cut at the reservation). Once a common chunk was read (`feed`), the runs of chunks that
        repeat it with another text are read from their texts alone (`_take_run`, `_take_same`);
        any other event is read on its own (`feed`)."""
        if buffer.find(b"\r") >= 0:
            buffer = buffer.replace(b"\r\n", b"\n")
        reader = self.reader
        pos = 0
        while True:
            same = self.same
            if same is not None and buffer.startswith(same[0], pos):
                after = self._take_run(buffer, pos, *same)
                # (after a run no complete event ends as its events do: nothing for `_take_same`)
                pos = self._take_same(buffer, pos, *same) if after == pos else after
            ends = self.ends
            if ends is not None:
                # (the finish and usage chunks follow each other: no text chunk looked for between)
                while (after := self._take_end(buffer, pos, *ends)) != pos:
                    if reader.ended:
                        return None
                    pos = after
            # `event_data`'s common event (one data line) by its first line feed, followed by another
            end = buffer.find(b"\n", pos)
            if end < 0:
                return buffer[pos:] if pos else buffer
            if end + 1 < len(buffer) and buffer[end + 1] == 10 and buffer.startswith(b"data: ", pos):
                data: bytes | None = buffer[pos + 6 : end]
            else:
                end = buffer.find(b"\n\n", pos)
                if end < 0:
                    return buffer[pos:] if pos else buffer
                data = event_data(buffer[pos : end + 2])
            pos = end + 2
            if data is not None:
                self.feed(data)
                if reader.ended or reader.done:
                    return None

    def ongoing(self, piece: bytes) -> bool:
        """`call.Assembly.ongoing`: `piece` starts and ends as the last common chunk's event does
        (a text chunk must be followed by its choice's finish, so the answer is not complete)."""
        same = self.same
        return same is not None and piece.startswith(same[0]) and piece.endswith(same[1])

    def feed(self, data: bytes) -> None:
        """One event's data."""
        if self.as_chat is None:
            if data == DONE:
                self.reader.ended = True
                return
            if data == NULL:
                return
            chunk = parse_event(data)
            reader = self.reader
            choice = self._sole_choice(chunk)
            if choice is not None and reader.first is not None and self._add_text(chunk, choice):
                if self.same is None or self.guessed:  # (a guess that did not fit this server's chunks)
                    self._set_same(_around_text(data, choice["delta"]["content"]))
                    self.guessed = False
                return
            if choice is None:
                added = not chunk.get("choices") and self._add_usage(chunk)
            elif reader.first is None:
                added = self._add_role(chunk, choice, data)
            else:
                added = self._add_finish(chunk, choice)
            if not added:
                self._add(*reader.take(chunk))
            if reader.usage is not None and type(chunk.get("usage")) is dict and self._finished():
                # The usage chunk after every choice's finish is the stream's last (OpenAI's
                # `include_usage`, which `call` asks for): the answer is complete without
                # waiting for a `[DONE]` an upstream may never send. (llama.cpp's n choices
                # each have theirs, after their finish: the last one's ends the answer.)
                reader.ended = True
            return
        for chunk in self.as_chat.chunks(data):
            self._add(*self.reader.take(chunk))
            if self.reader.done:
                return

    def _finished(self) -> bool:
        """Has every choice its finish reason?"""
        choices = self.assembler.choices
        if len(choices) == 1 == self.reader.choices:
            (choice,) = choices.values()
            return choice.get("finish_reason") is not None
        return len(choices) >= self.reader.choices and all(
            choice.get("finish_reason") is not None for choice in choices.values()
        )

    def _sole_choice(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        """The chunk's only choice, when the answer has one choice, is not cut and the chunk carries
        no usage: what the one-step paths below need before looking at the choice itself (`feed`
        finds it once for them)."""
        choices = chunk.get("choices")
        if self.reader.choices != 1 or self.reader.cut or type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("index", 0) != 0 or isinstance(chunk.get("usage"), dict):
            return None
        return choice

    def _add_text(self, chunk: dict[str, Any], choice: dict[str, Any]) -> bool:
        """The common chunk (one more piece of text of the only choice, nothing else) counted and
        added in one step, as `ChunkReader.take` and `Assembler.add` would (half their cost per
        event); False for anything else, and for the piece that passes the reservation."""
        reader = self.reader
        if reader.first is None:
            return False
        delta = choice.get("delta")
        part = self.assembler.parts.get(0)
        if part is None or type(delta) is not dict or len(delta) != 1 or type(text := delta.get("content")) is not str:
            return False
        if choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
            return False
        if text:
            seen = reader.counts.get(0, 0) + 1
            if reader.limit is not None and seen > reader.limit:
                return False
            reader.counts[0] = seen
        self.assembler.add_top(chunk)
        part.append(text)
        return True

    def _add_role(self, chunk: dict[str, Any], choice: dict[str, Any], data: bytes) -> bool:
        """The stream's first chunk when it is the only choice's role and nothing else (`ROLE`, no
        logprobs, no finish, no usage) added in one step, as `ChunkReader.take` and `Assembler.add`
        would; False for anything else. When its bytes are plain (no escapes, one line, one
        `"delta"`), the common text chunk's bytes are guessed from them (`same`: the same bytes with
        `{"content":<text>}` in the delta's place; `feed` makes them again from the first text
        chunk that does not fit), so the first text is read with the run that follows it."""
        assembler = self.assembler
        if assembler.legacy or assembler.top or assembler.choices or choice.get("delta") != ROLE:
            return False
        if choice.get("finish_reason") is not None or choice.get("logprobs") is not None:
            return False
        if not choice.keys() <= FINISH_KEYS:
            return False
        self.reader.first = chunk
        top = dict(chunk)
        del top["choices"]
        top.pop("object", None)
        assembler.top = top
        assembler.choices[0] = {
            "index": 0,
            "message": {"role": "assistant", "content": None},
            "logprobs": None,
            "finish_reason": None,
        }
        assembler.parts[0] = [""]
        # Without a backslash every quote delimits a string, so the one `"delta":` is the choice's
        # key and the literal after it is its whole value.
        if data.find(b"\\") < 0 and data.find(b"\n") < 0:
            parts = data.split(b'"delta"')
            if len(parts) == 2 and parts[1].startswith(ROLE_DELTA):
                at = len(parts[0]) + 8
                after = parts[1][len(ROLE_DELTA) :]
                self._set_same((b"data: " + parts[0] + b'"delta":{"content":', b"}" + after + b"\n\n"))
                self.guessed = True
                self._guess_ends(chunk, choice, data, at, after)
        return True

    def _guess_ends(self, chunk: dict[str, Any], choice: dict[str, Any], data: bytes, at: int, after: bytes) -> None:
        """The finish and usage chunks' bytes guessed from the role chunk's (`data`, plain: see
        `_add_role`; its delta's value starts at `at`, `after` follows it), for `_take_end`: the
        finish chunk is the same bytes with `{}` as the delta and a string in place of the one
        `"finish_reason":null` (which follows the delta); the usage chunk the same bytes up to
        `"choices":`, then `[],"usage":<object>}`, when the choices are the role chunk's last key
        (the one `]` after the delta ends the role chunk but for its `}`) and the chunk has no
        `error` or `timings` (which `ChunkReader.take` reads from a usage chunk)."""
        pre, found, post = after.partition(b'"finish_reason":null')
        if not found or "finish_reason" not in choice or "error" in chunk or "timings" in chunk:
            return
        if data.count(b'"finish_reason"') != 1 or data.count(b'"choices"') != 1:
            return
        if not after.endswith(b"]}") or after.find(b"]") != len(after) - 2:  # one `]`
            return
        cq = data.find(b'"choices":') + 10
        if cq < 10:  # `"choices"` and its colon apart
            return
        self.ends = (
            b"".join((b"data: ", data[:at], b"{}", pre, b'"finish_reason":')),
            post + b"\n\n",
            b"".join((b"data: ", data[:cq], b'[],"usage":')),
        )

    def _take_end(self, buffer: bytes, pos: int, finish_head: bytes, finish_tail: bytes, usage_head: bytes) -> int:
        """Reads the event at `pos` when it is, byte for byte, the finish or the usage chunk guessed
        from the role chunk (`_guess_ends`) with a string as the finish reason or an object as the
        usage: only that value is parsed, and added as `_add_finish` or `_add_usage` would add the
        whole chunk. Returns where the next event starts; `pos` for anything else (`feed` reads it)."""
        reader = self.reader
        if buffer.startswith(finish_head, pos):
            start = pos + len(finish_head)
            line_end = buffer.find(b"\n", start)
            back = len(finish_tail) - 2
            if line_end < 0 or line_end - back <= start or not buffer.startswith(finish_tail, line_end - back):
                return pos
            try:
                finish = orjson.loads(buffer[start : line_end - back])
            except orjson.JSONDecodeError:
                return pos
            had = self.assembler.choices.get(0)
            if type(finish) is not str or had is None or reader.cut:
                return pos
            had["finish_reason"] = finish
        elif buffer.startswith(usage_head, pos):
            start = pos + len(usage_head)
            line_end = buffer.find(b"\n", start)
            if line_end < 0 or line_end - 1 <= start or not buffer.startswith(b"}\n\n", line_end - 1):
                return pos
            try:
                usage = orjson.loads(buffer[start : line_end - 1])
            except orjson.JSONDecodeError:
                return pos
            if type(usage) is not dict or reader.choices > 1:  # (n choices: `ChunkReader.take` sums theirs)
                return pos
            reader.changed = False
            reader.usage = usage
            self.assembler.top["usage"] = usage
        else:
            return pos
        if reader.usage is not None and self._finished():
            reader.ended = True  # as `feed` ends it
        return line_end + 2

    def _add_usage(self, chunk: dict[str, Any]) -> bool:
        """A chunk without choices that carries the usage (the stream's last but `[DONE]`) added in
        one step, as `ChunkReader.take` and `Assembler.add` would; False for anything else."""
        reader = self.reader
        usage = chunk.get("usage")
        if not isinstance(usage, dict) or reader.first is None or "error" in chunk or reader.choices > 1:
            return False
        reader.changed = False
        reader.usage_chunk = chunk
        reader.usage = _with_cache_hits(usage, chunk.get("timings"))
        self.assembler.add_top(chunk)
        return True

    def _add_finish(self, chunk: dict[str, Any], choice: dict[str, Any]) -> bool:
        """The only choice's finish (an empty delta, no logprobs, nothing else in the choice, no
        usage) added in one step, as `ChunkReader.take` and `Assembler.add` would; False for
        anything else."""
        finish = choice.get("finish_reason")
        had = self.assembler.choices.get(0)
        if finish is None or had is None or choice.get("delta") != {} or choice.get("logprobs") is not None:
            return False
        if not choice.keys() <= FINISH_KEYS:
            return False
        self.assembler.add_top(chunk)
        had["finish_reason"] = finish
        return True

    def _take_run(self, buffer: bytes, pos: int, head: bytes, tail: bytes) -> int:
        """Reads the run of events from `pos` that are, byte for byte, the last common chunk
        (`head`, `tail`: `_around_text`) with another text in its place, at once: their texts
        parsed together, counted, added as one piece. Returns where the run ends; `pos` when the
        run is not that (a text that is not one JSON string on one line, or that would pass the
        reservation): `_take_same` and `feed` then read it event by event.

        The run is split at the last bytes of `tail` (rare bytes: the search skips ahead; a split
        at the ~200 bytes between two texts costs more, CPython prepares a long needle again for
        each occurrence), each text's inner bytes (`inner`: between the quotes) sliced out, and
        the run checked by putting it together again: the events are then exactly `head`, a
        quoted text and `tail` each."""
        last = buffer.rfind(tail, pos)  # the end of the last event that could be in the run
        if last < pos:
            return pos
        run = buffer[pos : last + len(tail)]
        needle, inner, between = self.run_parts
        pieces = run.split(needle)
        pieces.pop()  # b"": the run ends with `tail`, so with `needle`
        texts = list(map(inner, pieces))
        mid = between.join(texts)
        skip = len(head) + 1
        if skip + len(mid) + len(tail) + 1 != len(run) or not run.startswith(mid, skip) or run[skip - 1] != 34:
            return pos  # not a run of the common chunk (`_take_same` reads what it can)
        if run[-len(tail) - 1] != 34:
            return pos
        count = len(texts)
        joined = b"".join(texts)
        if joined.find(b'"') < 0 and joined.find(b"\\") < 0 and joined.isascii():
            # Plain texts: no escape nor quote, so the texts are one JSON string each, and the
            # whole is one (UTF-8 cannot be cut between two: ASCII) if each is.
            try:
                text = orjson.loads(b'"' + joined + b'"')
            except orjson.JSONDecodeError:
                return pos
            empty = texts.count(b"")
        else:
            # A line break after each text's closing quote: no JSON string spans two texts, so
            # `count` strings are one string each.
            try:
                parsed = orjson.loads(b'["' + b'",\n"'.join(texts) + b'"]')
                text = "".join(parsed)  # TypeError for anything but strings
            except (orjson.JSONDecodeError, TypeError):
                return pos
            if len(parsed) != count:  # a text that is more than one JSON value
                return pos
            empty = parsed.count("")
        reader = self.reader
        seen = reader.counts.get(0, 0) + count - empty
        if reader.limit is not None and seen > reader.limit:
            return pos
        reader.counts[0] = seen
        self.assembler.parts[0].append(text)
        return pos + len(run)

    def _take_same(self, buffer: bytes, pos: int, head: bytes, tail: bytes) -> int:
        """Reads the events from `pos` that are, byte for byte, the last common chunk with
        another text in its place (servers repeat id, created, model and the rest on every
        chunk), one by one: only the text is parsed. Each is then the same common chunk, valid
        JSON (a JSON string in place of a JSON string, on one line), so it is counted and added
        as `_add_text` would. Returns where the first event that is not one starts (or is not
        complete, or would pass the reservation: `feed` ends the choice there)."""
        skip, back = len(head), len(tail) - 2
        reader = self.reader
        limit = reader.limit
        seen = reader.counts.get(0, 0)
        pieces = self.assembler.parts[0]
        start = pos
        while buffer.startswith(head, pos):
            line_end = buffer.find(b"\n", pos + skip)  # the event's first line break ends its only line
            if line_end < 0 or not buffer.startswith(tail, line_end - back):
                break
            try:
                text = orjson.loads(buffer[pos + skip : line_end - back])
            except orjson.JSONDecodeError:
                break
            if type(text) is not str:
                break
            if text:
                if limit is not None and seen >= limit:
                    break
                seen += 1
            pieces.append(text)
            pos = line_end + 2
        if pos != start:
            reader.counts[0] = seen
        return pos

    def _add(self, passed: dict[str, Any] | None, closing: list[dict[str, Any]]) -> None:
        if passed is not None:
            self.assembler.add(passed)
        for ended in closing:
            self.assembler.add(ended)

    def answer(self) -> dict[str, Any]:
        reader = self.reader
        if self.as_chat is not None and not reader.done:
            for chunk in self.as_chat.end():
                self._add(*reader.take(chunk))
        elif not reader.ended and not reader.done:
            raise UpstreamStreamError(Failure.TRUNCATED)  # closed before its `[DONE]`: incomplete
        answer = self.assembler.answer()
        if reader.usage is None and reader.done:
            answer.pop("usage", None)
        elif reader.summed:
            answer["usage"] = reader.usage
        return finish_answer(answer)


def _around_text(data: bytes, text: str) -> tuple[bytes, bytes] | None:
    """The bytes of a common chunk's event before and after its `text` (`ChatAssembly._take_same`):
    `data: ` and the data up to the text, the rest and the blank line; when its one `"content"` is
    the delta's key followed by `text` as orjson writes it, on one line; else None."""
    at = data.find(b'"content":') + 10
    literal = orjson.dumps(text)
    if at < 10 or not data.startswith(literal, at) or data.count(b'"content"') != 1 or data.find(b"\n") >= 0:
        return None
    return b"data: " + data[:at], data[at + len(literal) :] + b"\n\n"


def finish_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """Drop the assembler's bookkeeping (tool-call indexes) before the answer leaves."""
    for choice in answer.get("choices") or ():
        message = choice.get("message")
        if isinstance(message, dict):
            for call in message.get("tool_calls") or ():
                call.pop("_index", None)
    return answer


# A word and the whitespace before it, as servers stream them (trailing whitespace alone last):
# the pieces join to the text.
_WORDS = re.compile(r"\s*\S+|\s+")
# What a streamed choice says in its deltas, in the order a server streams it.
_DELTA_TEXTS = ("reasoning_content", "reasoning", "content")


def replayed(answer: dict[str, Any]) -> bytes:
    """A Chat (or legacy Completions) JSON answer, from a server that ignores `stream`, as the
    stream it would have sent: for each choice its role, its reasoning and text a word a chunk,
    its tool calls (their arguments a word a chunk), its finish; then its usage chunk (when it
    reported one) and `[DONE]`. A word a chunk, so the output is counted, estimated and cut at the
    reservation as a stream's is."""
    legacy = answer.get("object") == "text_completion"
    base: dict[str, Any] = {k: answer[k] for k in ("id", "created", "model", "system_fingerprint") if k in answer}
    base["object"] = "text_completion" if legacy else "chat.completion.chunk"
    events: list[bytes] = []

    def emit(choice: dict[str, Any] | None, **extra: Any) -> None:
        chunk = {**base, "choices": [] if choice is None else [choice], **extra}
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")

    for choice in answer.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0)
        finish = {"finish_reason": choice.get("finish_reason") or "stop"}
        if "stop_reason" in choice:  # vLLM names the stop string that matched
            finish["stop_reason"] = choice["stop_reason"]
        if legacy:
            for word in _pieces(choice.get("text")):
                emit({"index": index, "text": word, "logprobs": None, "finish_reason": None})
            emit({"index": index, "text": "", "logprobs": None, **finish})
            continue
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        role = message.get("role") or "assistant"
        emit({"index": index, "delta": {"role": role, "content": ""}, "finish_reason": None})
        for name in _DELTA_TEXTS:
            for word in _pieces(message.get(name)):
                emit({"index": index, "delta": {name: word}, "finish_reason": None})
        for at, call in enumerate(message.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            function = call.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
                emit({"index": index, "delta": {"tool_calls": [{"index": at, **call}]}, "finish_reason": None})
                continue
            # its id, type and name, then its arguments a word a chunk (counted as a stream's are)
            head = {"index": at, **call, "function": {**function, "arguments": ""}}
            emit({"index": index, "delta": {"tool_calls": [head]}, "finish_reason": None})
            for word in _pieces(function["arguments"]):
                piece = {"index": at, "function": {"arguments": word}}
                emit({"index": index, "delta": {"tool_calls": [piece]}, "finish_reason": None})
        emit({"index": index, "delta": {}, **finish})
    if isinstance(answer.get("usage"), dict):  # (llama.cpp's prompt-cache hits in its `timings`)
        emit(None, usage=answer["usage"], **({"timings": answer["timings"]} if "timings" in answer else {}))
    events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def _pieces(text: Any) -> list[str]:
    return _WORDS.findall(text) if isinstance(text, str) else []
