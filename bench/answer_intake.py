"""What the gateway's process spends to take in an upstream's answer, without the network: a
non-streaming answer as a JSON body, against the same answer asked for as a stream (issue 24's
design) and assembled.

    uv run python bench/answer_intake.py [--responses 20000] [--repeats 5]

1. aiohttp's client by how the body is framed: the same bytes as 19 HTTP chunks (an event stream as
   model servers send it, one event a chunk), as one chunk, and with a Content-Length. Each response
   is given to the protocol of the gateway's upstream client (`aiohttp.client_proto.ResponseHandler`)
   as one read, as at c=32 in `gateway_cpu.py` (one read a request: its `--syscalls`).

   Each body is read as aiohttp reads it (`read_nowait`: chunk by chunk) and as the gateway does
   (`gateway.call.drain`: all at once).
2. The answer made from what was read: `gateway_cpu.py`'s mock stream (role, 16 texts, finish, usage,
   `[DONE]`) through `ChatAssembly` and `orjson.dumps`, against `orjson.loads` of the mock's JSON
   answer (what 1b1e1f8 read of it; both then relay or dump one body).

It prints the CPU time (`time.process_time`) per response, median and spread of the repeats (the
cases alternate), and each against its baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mock_upstream import WORDS  # (the mock's own words, so the answer is the bench's)

WORD_JSON = [orjson.dumps(word) for word in WORDS]

EVENT = (
    b'data: {"id":"chatcmpl-1234567890","object":"chat.completion.chunk","created":1764800000,'
    b'"model":"fake-model","system_fingerprint":"fp_mock","choices":[{"index":0,"delta":'
    b'{"content":" hello"},"logprobs":null,"finish_reason":null}]}\n\n'
)
EVENTS = 19
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
FRAMINGS = {
    "content-length": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    % (len(EVENT) * EVENTS)
    + EVENT * EVENTS,
    "one chunk": HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(EVENT) * EVENTS, EVENT * EVENTS),
    f"{EVENTS} chunks": HEAD + b"".join(b"%x\r\n%s\r\n" % (len(EVENT), EVENT) for _ in range(EVENTS)) + b"0\r\n\r\n",
}


class _Transport:
    """What the protocol asks of its transport while it reads."""

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, *_args: Any, **_kwargs: Any) -> None:
        return None


async def per_response(data: bytes, responses: int, read: Callable[[StreamReader], bytes]) -> float:
    """µs of CPU to parse `responses` responses of `data` and `read` each one's body."""
    proto = ResponseHandler(asyncio.get_running_loop())
    proto.connection_made(_Transport())  # type: ignore[arg-type]
    started = time.process_time()
    for _ in range(responses):
        proto.set_response_params(read_until_eof=False, auto_decompress=False, read_bufsize=2**16)
        proto.data_received(data)
        _message, payload = await proto.read()  # what the client's response takes (ready: no wait)
        if read(payload) != EVENT * EVENTS:
            raise SystemExit("the body read is not the body sent")
    return (time.process_time() - started) / responses * 1e6


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--responses", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from gateway.call import drain

    readers: dict[str, Callable[[StreamReader], bytes]] = {
        "aiohttp's `read_nowait`": StreamReader.read_nowait,
        "the gateway's `drain`": drain,
    }
    cases = [(framing, reader) for reader in readers for framing in FRAMINGS]
    results: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    for r in range(a.repeats):
        for framing, reader in cases if r % 2 == 0 else cases[::-1]:
            results[framing, reader].append(await per_response(FRAMINGS[framing], a.responses, readers[reader]))
    print_table(results, "content-length")
    print()
    answers = {"JSON answer: `orjson.loads`": json_answer, "stream: `ChatAssembly` + `orjson.dumps`": assembled}
    made: dict[tuple[str, str], list[float]] = {(name, ""): [] for name in answers}
    for r in range(a.repeats):
        for name in list(answers) if r % 2 == 0 else list(answers)[::-1]:
            made[name, ""].append(timed(answers[name], a.responses))
    print_table(made, "JSON answer: `orjson.loads`", head="answer made from", second="")
    return 0


HEAD_OF_EVENT = (
    b'data: {"id":"chatcmpl-4f1c2b","object":"chat.completion.chunk","created":1764800000,"model":"fake-model",'
    b'"system_fingerprint":"fp_mock","choices":[{"index":0,"delta":'
)
TAIL_OF_EVENT = b',"logprobs":null,"finish_reason":null}]}\n\n'
STREAM = (
    HEAD_OF_EVENT
    + b'{"role":"assistant","content":""}'
    + TAIL_OF_EVENT
    + b"".join(HEAD_OF_EVENT + b'{"content":' + WORD_JSON[i % len(WORD_JSON)] + b"}" + TAIL_OF_EVENT for i in range(16))
    + HEAD_OF_EVENT
    + b'{},"logprobs":null,"finish_reason":"length"}]}\n\n'
    + b'data: {"id":"chatcmpl-4f1c2b","object":"chat.completion.chunk","created":1764800000,"model":"fake-model",'
    + b'"system_fingerprint":"fp_mock","choices":[],"usage":{"prompt_tokens":6,"completion_tokens":16,'
    + b'"total_tokens":22}}\n\ndata: [DONE]\n\n'
)
JSON_ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-4f1c2b",
        "object": "chat.completion",
        "created": 1764800000,
        "model": "fake-model",
        "system_fingerprint": "fp_mock",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(WORDS[i % len(WORDS)] for i in range(16))},
                "logprobs": None,
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 6, "completion_tokens": 16, "total_tokens": 22},
    }
)


def json_answer() -> object:
    return orjson.loads(JSON_ANSWER)


def assembled() -> object:
    from gateway.chunks import ChatAssembly

    assembly = ChatAssembly(16)
    if assembly.take(STREAM) is not None:
        raise SystemExit("the stream did not complete its answer")
    return orjson.dumps(assembly.answer())


def timed(make: Callable[[], object], times: int) -> float:
    started = time.process_time()
    for _ in range(times):
        make()
    return (time.process_time() - started) / times * 1e6


def print_table(
    results: dict[tuple[str, str], list[float]], base_name: str, *, head: str = "", second: str = "body read by"
) -> None:
    size = len(EVENT) * EVENTS
    head = head or f"framing ({size} bytes of body)"
    columns = f"| {head} | {second} |" if second else f"| {head} |"
    print(columns + " µs CPU a response (median, min–max) | × baseline |")
    print("|---|" + ("---|" if second else "") + "--:|--:|")
    for (name, other), values in results.items():
        med = statistics.median(values)
        base = statistics.median(results[base_name, other])
        cells = f"| {name} | {other} |" if second else f"| {name} |"
        print(f"{cells} {med:.2f} ({min(values):.2f}–{max(values):.2f}) | {med / base:.2f} |")


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
