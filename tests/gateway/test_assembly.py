"""A non-streaming Chat answer assembled from an upstream stream (`gateway.chunks.ChatAssembly`).

Servers repeat a chunk's bytes around each new piece of text; the assembly then parses only the
text (`_add_same`). These tests feed such streams with something else in the text's place and
check that the answer is still exactly what the full path builds: every field kept, junk
refused, the cut at the reservation.
"""

from __future__ import annotations

import orjson
import pytest

from gateway.chunks import ChatAssembly, split_data
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
    assembly = ChatAssembly(limit)
    datas, rest = split_data(raw)
    assert rest == b""
    for data in datas:
        assembly.feed(data)
        if assembly.done:
            break
    return assembly.answer(), assembly


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
