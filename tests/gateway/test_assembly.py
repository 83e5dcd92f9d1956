"""A non-streaming Chat answer assembled from an upstream stream (`gateway.chunks.ChatAssembly`).

Servers repeat a chunk's bytes around each new piece of text; the assembly then parses only the
texts (a run of such chunks at once, `_take_run`; one by one, `_take_same`). These tests feed
such streams with something else in the text's place and check that the answer is still exactly
what the full path builds: every field kept, junk refused, the cut at the reservation, whatever
pieces the stream arrives in.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiohttp import StreamReader

from gateway.call import drain
from gateway.chunks import Assembler, ChatAssembly, ChunkReader, event_data, finish_answer, split_data, split_events
from gateway.errors import Failure, UpstreamStreamError

HEAD = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764670000,"model":"m",'
    b'"system_fingerprint":"fp_1","choices":[{"index":0,"delta":'
)
TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'


def text_event(literal: bytes) -> bytes:
    """A chunk whose delta is `{"content": <literal>}`, the literal as raw JSON text."""
    return HEAD + b'{"content":' + literal + b"}" + TAIL


def stream(*middle: bytes, finish: bytes = b"stop") -> bytes:
    return b"".join(
        [
            HEAD + b'{"role":"assistant","content":""}' + TAIL,
            *middle,
            HEAD + b'{},"logprobs":null,"finish_reason":"' + finish + b'"}]}\n\n',
            b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764670000,"model":"m",'
            b'"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}\n\n',
            b"data: [DONE]\n\n",
        ]
    )


def assemble(raw: bytes, limit: int | None = None) -> tuple[dict, ChatAssembly]:
    """The answer from the stream read at once (`call._assemble` reads what arrived in batches),
    checked against the stream read in pieces of every size and event by event."""
    assembly = ChatAssembly(limit)
    assert assembly.take(raw) is None
    answer = assembly.answer()
    for size in (1, 7, 64, 250):
        assert in_pieces(raw, size, limit) == (answer, assembly.tokens)
    assert one_by_one(raw, limit) == (answer, assembly.tokens)
    return answer, assembly


def in_pieces(raw: bytes, size: int, limit: int | None) -> tuple[dict, int]:
    assembly = ChatAssembly(limit)
    rest: bytes | None = b""
    for start in range(0, len(raw), size):
        assert rest is not None
        rest = assembly.take(rest + raw[start : start + size])
        if rest is None:
            break
    return assembly.answer(), assembly.tokens


def one_by_one(raw: bytes, limit: int | None) -> tuple[dict, int]:
    """Each event's data on its own (`feed`): the full path, no run, no repeated chunk read from its text."""
    assembly = ChatAssembly(limit)
    datas, rest = split_data(raw)
    assert rest == b""
    for data in datas:
        assembly.feed(data)
        if assembly.done:
            break
    return assembly.answer(), assembly.tokens


def test_it_assembles_repeated_chunks_from_their_text():
    answer, assembly = assemble(stream(*(text_event(orjson.dumps(w)) for w in ["Hel", "lo", ' "w\\o"', " é"])))
    assert assembly.same is not None  # the chunks after the first text were read from their text
    assert answer == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1764670000,
        "model": "m",
        "system_fingerprint": "fp_1",
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": 'Hello "w\\o" é'},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }
    assert assembly.tokens == 4


def test_it_keeps_fields_that_arrive_in_the_place_of_the_text():
    # Valid JSON as a whole, but the delta has one more field: read in full, the field is kept.
    answer, _ = assemble(stream(text_event(b'"a"'), text_event(b'"b","refusal":"no"'), text_event(b"null")))
    message = answer["choices"][0]["message"]
    assert message["content"] == "ab"
    assert message["refusal"] == "no"


def test_it_refuses_junk_in_the_place_of_the_text():
    with pytest.raises(UpstreamStreamError) as caught:
        assemble(stream(text_event(b'"a"'), text_event(b'"b')))
    assert caught.value.failure == Failure.INVALID_JSON


def test_it_cuts_repeated_chunks_at_the_reservation():
    answer, assembly = assemble(stream(*(text_event(orjson.dumps(str(i))) for i in range(6))), limit=3)
    assert assembly.done
    assert answer["choices"][0]["message"]["content"] == "012"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert assembly.tokens == 3


def test_a_run_of_repeated_chunks_is_read_from_its_texts_at_once():
    texts = [f" w{i}" for i in range(40)]
    raw = stream(*(text_event(orjson.dumps(w)) for w in texts))
    assembly = ChatAssembly(None)
    assert assembly.take(raw) is None
    # the role chunk through the full path (the repeated chunk is guessed from it), the 40 texts as one piece
    assert assembly.assembler.parts[0] == ["", "".join(texts)]
    assert assembly.answer()["choices"][0]["message"]["content"] == "".join(texts)
    assert assembly.tokens == 40


@pytest.mark.parametrize(
    "middle",
    [
        [b'"b","c"'],  # two values where one text was
        [b'["b"', b'"c"]'],  # one array across two chunks
        [b'"b",', b'"c"'],
        [b"null"],
        [b'"b"\n'],  # valid JSON, but the event's data line ends there
        [b'"b","c"', b'"x', b'y"'],  # as many values as texts, but not one in each
    ],
)
def test_a_run_with_something_else_in_a_text_s_place_is_read_event_by_event(middle):
    raw = stream(*(text_event(b'"a"') for _ in range(3)), *(text_event(m) for m in middle), text_event(b'"z"'))
    try:
        expected = one_by_one(raw, None)
    except UpstreamStreamError as exc:
        for read in (assemble, ChatAssembly(None).take):  # at once too
            with pytest.raises(UpstreamStreamError) as caught:
                read(raw)
            assert caught.value.failure == exc.failure
        return
    answer, assembly = assemble(raw)
    assert (answer, assembly.tokens) == expected


def test_a_run_past_the_reservation_is_cut_at_it():
    raw = stream(*(text_event(orjson.dumps(f"{i} ")) for i in range(30)))
    answer, assembly = assemble(raw, limit=12)
    assert answer["choices"][0]["message"]["content"] == "".join(f"{i} " for i in range(12))
    assert answer["choices"][0]["finish_reason"] == "length"
    assert assembly.tokens == 12 and assembly.done


def test_crlf_streams_and_comments_are_read_alike():
    raw = stream(b": keep-alive\n\n", *(text_event(orjson.dumps(w)) for w in ["x", "y", "z"]))
    answer, _ = assemble(raw.replace(b"\n", b"\r\n"))
    assert answer == assemble(raw)[0]
    assert answer["choices"][0]["message"]["content"] == "xyz"


def test_the_usage_chunk_after_the_finish_completes_the_answer_without_done():
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]))
    without_done = raw.removesuffix(b"data: [DONE]\n\n")
    assembly = ChatAssembly(None)
    assert assembly.take(without_done) is None
    assert assembly.answer() == assemble(raw)[0]
    # The finish alone is not the end: the usage chunk (asked for) is still to come.
    finish_only = without_done[: without_done.rindex(b"data: ")]
    assembly = ChatAssembly(None)
    assert assembly.take(finish_only) == b""
    assert not assembly.ended


def test_only_a_piece_of_common_chunks_is_ongoing():
    words = [text_event(orjson.dumps(w)) for w in ["a", "b", "c"]]
    raw = stream(*words)
    assembly = ChatAssembly(None)
    assert not assembly.ongoing(words[0])  # no common chunk read yet
    cut = raw.index(words[1])
    assert assembly.take(raw[:cut]) == b""
    assert assembly.ongoing(words[1]) and assembly.ongoing(words[1] + words[2])
    assert not assembly.ongoing(words[2][:-1])  # the event is not complete
    finish = raw[raw.index(words[2]) + len(words[2]) :]
    assert not assembly.ongoing(finish[:40]) and not assembly.ongoing(b"NE]\n\n")


@pytest.mark.parametrize(
    "finish",
    [
        b'{},"logprobs":null,"finish_reason":"stop"}]}\n\n',  # read in one step
        b'{},"logprobs":null,"finish_reason":"stop","stop_reason":"</s>"}]}\n\n',  # vLLM's stop_reason: in full
        b'{"content":""},"logprobs":null,"finish_reason":"length"}]}\n\n',
    ],
)
def test_the_finish_chunk_is_added_as_the_full_path_adds_it(finish):
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]))
    at = raw.rindex(HEAD, 0, raw.index(b'"finish_reason":"stop"'))
    raw = raw[:at] + HEAD + finish + raw[raw.index(b"\n\n", at) + 2 :]
    reader, assembler = ChunkReader(None), Assembler(legacy=False)
    for data in split_data(raw)[0][:-1]:  # all but [DONE], each through the full path
        passed, closing = reader.take(orjson.loads(data))
        for chunk in ([passed] if passed else []) + closing:
            assembler.add(chunk)
    expected = finish_answer(assembler.answer())
    assert assemble(raw)[0] == expected
    assert expected["choices"][0]["finish_reason"] in ("stop", "length")


class Protocol:
    """What aiohttp's StreamReader asks of its protocol: flow control."""

    connected = True

    def __init__(self) -> None:
        self._reading_paused = False
        self.resumed = 0

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self, resume_parser: bool = True) -> None:
        self._reading_paused = False
        self.resumed += 1


def test_drain_leaves_aiohttps_reader_as_its_own_reads_do():
    """`call.drain` reads aiohttp's buffer at once through its private fields: the same bytes and
    the same state after it as `read_nowait`, the protocol resumed once when the reader paused it."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = (StreamReader(Protocol(), 16, loop=loop) for _ in range(2))
        for reader in (ours, theirs):
            reader.begin_http_chunk_receiving()
            for piece in (b"data: a\n\n", b": ping\n\n", b"data: b\n\n", b"data: [DO", b"NE]\n\n"):  # 40 > 2 x 16
                reader.feed_data(piece)
                reader.end_http_chunk_receiving()
            assert reader.read_nowait(3) == b"dat"
        assert ours._protocol._reading_paused  # aiohttp paused its protocol past the high water
        assert drain(ours) == theirs.read_nowait() == b"a: a\n\n: ping\n\ndata: b\n\ndata: [DONE]\n\n"
        assert not ours._protocol._reading_paused
        fields = ("_size", "_cursor", "_buffer_offset", "total_bytes")
        assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]
        assert list(ours._http_chunk_splits or ()) == list(theirs._http_chunk_splits or ())
        assert drain(ours) == b""
        for reader in (ours, theirs):
            reader.feed_data(b"data: c\n\n")
            reader.end_http_chunk_receiving()
            reader.feed_eof()
        assert await ours.readany() == await theirs.readany() == b"data: c\n\n"
        assert ours.at_eof() and theirs.at_eof()

    asyncio.run(run())


@pytest.mark.parametrize(
    "role",
    [
        b'{"role":"assistant","content":""}',  # the text chunk is guessed from it
        b'{"role":"assistant","content":"","refusal":null}',  # OpenAI's: read in full, no guess
        b'{"content":"","role":"assistant"}',
        b'{"role":"assistant"}',
    ],
)
@pytest.mark.parametrize("texts_fit", [True, False])
def test_the_role_chunk_is_added_as_the_full_path_adds_it(role, texts_fit):
    def text(literal: bytes) -> bytes:  # when they do not fit: one more field after the choices
        event = text_event(literal)
        return event if texts_fit else event[:-3] + b',"o":"x"}\n\n'

    raw = stream(*(text(orjson.dumps(w)) for w in ["a", "b", "c"]))
    first = raw.index(b"\n\n") + 2
    raw = HEAD + role + TAIL + raw[first:]
    assembly = ChatAssembly(None)
    assert assembly.take(raw) is None
    assert (assembly.answer(), assembly.tokens) == one_by_one(raw, None)
    assert assemble(raw)[0]["choices"][0]["message"]["content"] == "abc"
    # a text chunk that does not fit the guess replaces it: the text chunks after it are read from their text
    assert assembly.same is not None
    assert assembly.guessed == (texts_fit and role == b'{"role":"assistant","content":""}')
    assert assembly.same[1].endswith(TAIL if texts_fit else b',"o":"x"}\n\n')


def test_a_role_chunk_with_escapes_is_not_guessed_from():
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]))
    raw = raw.replace(b'"model":"m"', b'"model":"m\\"x"', 1)  # the role chunk's only
    assembly = ChatAssembly(None)
    assert assembly.take(raw[: raw.index(b"\n\n") + 2]) == b""
    assert assembly.same is None
    assert assemble(raw)[0]["model"] == 'm"x'


USAGE_HEAD = HEAD[: HEAD.index(b'"choices":') + 10] + b'[],"usage":'


@pytest.mark.parametrize(
    "usage",
    [
        b'{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}',  # read from its object
        b"null",  # no usage: the answer waits for [DONE]
        b'{"prompt_tokens":5},"x":1',  # one more field: read in full
        b'{"prompt_tokens":5} ',
        b'{"prompt_tokens":5',  # junk
    ],
)
@pytest.mark.parametrize("done", [True, False])
def test_the_finish_and_usage_chunks_are_added_as_the_full_path_adds_them(usage, done):
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]))
    at = raw.index(b"data: ", raw.index(b'"finish_reason":"stop"'))
    raw = raw[:at] + USAGE_HEAD + usage + b"}\n\n" + (b"data: [DONE]\n\n" if done else b"")
    if usage == b"null" and not done:  # no usage and no [DONE]: the answer is not complete
        assembly = ChatAssembly(None)
        assert assembly.take(raw) == b""
        assert not assembly.ended and assembly.ends is not None
        return
    try:
        expected = one_by_one(raw, None)
    except UpstreamStreamError as exc:
        with pytest.raises(UpstreamStreamError) as caught:
            assemble(raw)
        assert caught.value.failure == exc.failure
        return
    assembly = ChatAssembly(None)
    assert assembly.take(raw) is None
    assert assembly.ends is not None
    assert (assembly.answer(), assembly.tokens) == expected
    assert assemble(raw)[0] == expected[0]


@pytest.mark.parametrize(
    "event",
    [
        b'data: {"a":1}\n\n',
        b'data: {"a":1}\nid: 7\n\n',  # a data line, then another field: the id is not data
        b'id: 7\ndata: {"a":1}\n\n',
        b'event: message\ndata: {"a":1}\nretry: 10\n\n',
        b'data: {"a":\ndata: 1}\n\n',  # one payload over two data lines
        b'data: {"a":"b"\n},"c":1}\n\n',  # a data line broken in two: the rest is not data
        b"data:[DONE]\n\n",
        b": keep-alive\n\n",
        b"id: 7\n\n",
    ],
)
def test_the_relay_and_the_assembly_read_the_same_payload_from_an_event(event):
    """`event_data` (the relay, the first event, the assembly's odd events) and `split_data` (a
    batch of events) must agree, or one path relays what the other refuses."""
    (whole,), rest = split_events(event + b"data: x")
    datas, rest_too = split_data(event + b"data: x")
    assert rest == rest_too == b"data: x"
    assert [event_data(whole)] == (datas or [None])


@pytest.mark.parametrize(
    "literals",
    [
        [b'"plain"', b'" text"', b'""', b'" more"'],  # plain texts (read as one JSON string) and an empty one
        [b'"a\\nb"', b'"\\"q\\""', b'"back\\\\"', b'"\\u00e9"', b'"\\t"'],  # escapes
        ['"é"'.encode(), '" 😀"'.encode(), b'"x"'],  # raw UTF-8 beside ASCII
        [b'"\\ud83d\\ude00"', b'"x"'],  # a surrogate pair within one text
        [b'"\\ud83d"', b'"\\ude00"'],  # … split over two events: junk in each
        ['"\xc3'.encode("latin-1") + b'"', b'"\xa9"'],  # UTF-8 cut between two texts: junk in each
        [b'"a\tb"', b'"c"'],  # a raw control character: junk
        [b'"x', b'y"'],  # one string over two texts
        [b'"b","c"', b'"d"'],
        [b'"b" ', b'"c"'],  # valid JSON in the event, but not a quoted text alone
        [b'"b\\"', b'"c"'],  # a backslash that escapes the closing quote
        [b'""', b'""', b'"a"'],
    ],
)
@pytest.mark.parametrize("limit", [None, 2])
def test_a_run_is_read_as_event_by_event_reads_it(literals, limit):
    """`_take_run` (plain texts as one JSON string, others as an array of strings) against the
    full path, event by event, for texts that are tricky as JSON or cut at the reservation."""
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]), *(text_event(lit) for lit in literals))
    for read in (raw, raw.replace(b"\n", b"\r\n")):
        try:
            expected = one_by_one(read, limit)
        except UpstreamStreamError as exc:
            with pytest.raises(UpstreamStreamError) as caught:
                assemble(read, limit)
            assert caught.value.failure == exc.failure
            with pytest.raises(UpstreamStreamError) as caught:
                ChatAssembly(limit).take(read)
            assert caught.value.failure == exc.failure
            continue
        answer, assembly = assemble(read, limit)
        assert (answer, assembly.tokens) == expected


def test_a_run_of_plain_texts_is_one_piece_and_one_with_escapes_too():
    for words in (["x", " y", "", " z"], ["x\n", ' "y"', "é", "\\"]):
        raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", *words]))
        assembly = ChatAssembly(None)
        assert assembly.take(raw) is None
        assert assembly.assembler.parts[0] == ["", "a" + "".join(words)]  # the first text too, by the guess
        assert assembly.tokens == 1 + len([w for w in words if w])


def test_a_role_chunk_whose_choices_key_is_spaced_guesses_no_usage_chunk():
    raw = stream(*(text_event(orjson.dumps(w)) for w in ["a", "b"]))
    first = raw.index(b"\n\n") + 2
    raw = raw[:first].replace(b'"choices":', b'"choices" :') + raw[first:]
    first += 1
    assembly = ChatAssembly(None)
    assert assembly.take(raw[:first]) == b""
    assert assembly.same is not None and assembly.ends is None
    # junk in the place such a guess would have read as a usage chunk
    junk = raw[: raw.rindex(b"data: ", 0, raw.index(b'"choices":[]'))]
    junk += b'data: {"id":"ch[],"usage":{"prompt_tokens":5}}\n\n'
    with pytest.raises(UpstreamStreamError):
        one_by_one(junk, None)
    with pytest.raises(UpstreamStreamError):
        ChatAssembly(None).take(junk)
    assert assemble(raw)[0] == one_by_one(raw, None)[0]


def test_a_tool_calls_name_repeated_in_every_chunk_is_kept_once():
    """Some servers repeat a call's id and name in each of its chunks; the arguments are the ones
    that come in pieces (the streamed translations keep the name once as well)."""

    def piece(arguments: str) -> bytes:
        call = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
        chunk = {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    end = {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    stream = piece('{"city":') + piece(' "Paris"}') + b"data: " + orjson.dumps(end) + b"\n\ndata: [DONE]\n\n"
    assembly = ChatAssembly(None)
    assert assembly.take(stream) is None
    (call,) = assembly.answer()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
