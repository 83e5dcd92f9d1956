"""`call.EventsReader`: aiohttp's body reader without the ends of HTTP chunks, for event streams.

The gateway turns the reader of a streamed answer into one after its headers (`events_reader`).
These tests feed a chunked stream through aiohttp's own response parser (the one its client
uses) to a reader of each kind: what is read and the reader's state must be the same, and the
parser must still tell the reader about chunks by the methods `EventsReader` replaces (else the
saving is gone and this test says so).
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import StreamReader
from aiohttp.client_proto import ResponseHandler
from aiohttp.http_parser import HttpResponseParser

from gateway.call import EventsReader, drain, events_reader, read_any

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(6)] + [b": ping\n\n", b"data: [DO", b"NE]\n\n"]


def chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


class Transport:
    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


def parsed(loop: asyncio.AbstractEventLoop, *, ours: bool, first: int) -> tuple[HttpResponseParser, StreamReader]:
    """A parser that has read the headers and the first `first` events' chunks, and its reader
    (turned into an EventsReader there when `ours`, as `call.forward` does)."""
    protocol = ResponseHandler(loop)
    protocol.connection_made(Transport())  # type: ignore[arg-type]
    parser = HttpResponseParser(protocol, loop, 2**16, max_line_size=8190, max_field_size=8190)
    messages, _, _ = parser.feed_data(HEAD + b"".join(chunk(e) for e in EVENTS[:first]))
    reader = messages[0][1]
    assert type(reader) is StreamReader
    if ours:
        events_reader(reader)
        assert type(reader) is EventsReader
    return parser, reader


@pytest.mark.parametrize("first", [0, 2])
def test_an_events_reader_reads_what_aiohttps_own_reads(first):
    async def run() -> None:
        loop = asyncio.get_running_loop()
        (p1, ours), (p2, theirs) = parsed(loop, ours=True, first=first), parsed(loop, ours=False, first=first)
        got: dict[bool, list[bytes]] = {True: [], False: []}
        for i, event in enumerate(EVENTS[first:]):
            for parser, reader, mine in ((p1, ours, True), (p2, theirs, False)):
                parser.feed_data(chunk(event))
                if i % 3 == 0:  # sometimes read, sometimes let the chunks gather
                    got[mine].append(drain(reader) if mine else reader.read_nowait())
        # aiohttp's parser still reports chunks by these methods: its own reader kept their ends.
        assert theirs._http_chunk_splits
        assert ours._http_chunk_splits is None
        fields = ("_size", "_cursor", "_buffer_offset", "total_bytes", "_eof")
        assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]
        for parser in (p1, p2):
            parser.feed_data(b"0\r\n\r\n")
        got[True].append(await read_any(ours))
        got[False].append(await theirs.readany())
        assert got[True] == got[False]
        assert b"".join(got[True]) == b"".join(EVENTS)  # (the chunks before the change too)
        assert ours.at_eof() and theirs.at_eof()

    asyncio.run(run())


def test_only_aiohttps_own_reader_is_changed():
    class Other(StreamReader):
        __slots__ = ()

    async def run() -> None:
        other = Other(ResponseHandler(asyncio.get_running_loop()), 16)
        events_reader(other)
        assert type(other) is Other

    asyncio.run(run())


def test_drain_of_nothing_is_what_read_nowait_reads():
    """`drain` answers an empty reader itself (after each piece of a stream read as it comes); a
    reader with an error or a waiting reader still goes to aiohttp's `read_nowait`."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ours, theirs = (StreamReader(ResponseHandler(loop), 16, loop=loop) for _ in range(2))
        for reader in (ours, theirs):
            reader.feed_data(b"data: a\n\n")
        assert drain(ours) == theirs.read_nowait() == b"data: a\n\n"
        assert drain(ours) == theirs.read_nowait() == b""
        fields = ("_size", "_cursor", "_buffer_offset", "total_bytes", "_eof")
        assert [getattr(ours, f) for f in fields] == [getattr(theirs, f) for f in fields]
        for reader in (ours, theirs):
            reader.set_exception(ValueError("upstream broke"))
        for read in (drain, StreamReader.read_nowait):
            with pytest.raises(ValueError):
                read(ours)

    asyncio.run(run())
