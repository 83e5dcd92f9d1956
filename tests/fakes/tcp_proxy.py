"""A TCP proxy the test controls, in front of a real server (Redis here), for fault injection.

    with TcpProxy(target_url) as proxy:      # target: redis://host:port/… or unix:///path
        proxy.url                              # redis://127.0.0.1:PORT/<the target's db>
        proxy.mode = "stall"                   # pass | delay | stall | close | refuse | greet

Modes apply to new and existing connections: `pass` forwards both ways; `delay` forwards both ways,
each chunk `proxy.delay` seconds late (a slow but answering server); `stall` accepts and
forwards nothing (a hung server or a black-holing load balancer); `close` accepts and closes at
once (a proxy in front of a dead server, `maxclients` without a reply); `refuse` closes every
connection and answers new ones with an immediate close; `greet` sends
"-ERR max number of clients reached" before anything is asked, then closes. `proxy.accepted` counts
the connections accepted (who connected, whatever the mode; an HTTP target works as well).
"""

from __future__ import annotations

import asyncio
import threading
from urllib.parse import parse_qs, urlsplit


class TcpProxy:
    def __init__(self, target_url: str, port: int = 0) -> None:
        u = urlsplit(target_url)
        self.unix = u.path if u.scheme == "unix" else None
        self.target = (u.hostname or "127.0.0.1", u.port or 6379)
        # The same database as the target (redis://host/9, unix:///sock?db=9), so what a test reads
        # directly and what it reads through the proxy agree.
        db = parse_qs(u.query).get("db", ["0"])[0] if self.unix else u.path.strip("/") or "0"
        self.db = int(db) if db.isdigit() else 0
        self.mode = "pass"
        self.delay = 0.2  # seconds, in mode `delay`
        self.port = port  # 0: any free one
        self.accepted = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tcp-proxy")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{self.db}"

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop = self._loop
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)

    def set(self, mode: str) -> None:
        """Switch mode; `close`/`refuse` also drop the connections already open."""
        self.mode = mode
        if mode in ("close", "refuse") and self._loop is not None:
            self._loop.call_soon_threadsafe(self._drop_all)

    def _drop_all(self) -> None:
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._server = loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", self.port))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        self._server.close()
        # Finish the connections' tasks on this loop before closing it (no "loop is closed" noise).
        self._drop_all()
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            if self.mode in ("close", "refuse"):
                return
            if self.mode == "greet":
                writer.write(b"-ERR max number of clients reached\r\n")
                await writer.drain()
                return
            if self.unix:
                up_r, up_w = await asyncio.open_unix_connection(self.unix)
            else:
                up_r, up_w = await asyncio.open_connection(*self.target)
            self._writers.add(up_w)
            await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer), return_exceptions=True)
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(65536)
                if not data:
                    break
                while self.mode == "stall":
                    await asyncio.sleep(0.05)
                if self.mode == "delay":
                    await asyncio.sleep(self.delay)
                elif self.mode != "pass":
                    break
                dst.write(data)
                await dst.drain()
        finally:
            dst.transport.abort()


def main(argv: list[str] | None = None) -> None:
    """`python -m tests.fakes.tcp_proxy PORT TARGET_URL`: forward 127.0.0.1:PORT to the target until
    killed; a process of its own, so killing it resets every connection through it, as a server
    killed under its requests does (tests/hosts/test_ondemand_stop.py)."""
    import sys
    import time

    port, target = (argv or sys.argv[1:])[:2]
    with TcpProxy(target, int(port)):
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
