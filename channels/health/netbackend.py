"""A plain-asyncio network backend for httpcore, used by the probe's httpx clients.

httpcore talks to sockets through anyio by default; in a probe round (thousands of short requests)
anyio's per-call cancel scopes were the largest single CPU cost (~30 % of the prober's CPU, see
`bench/probe_bench.py`). This backend does the same job with asyncio streams and
`asyncio.timeout`, mapping errors to httpcore's exception classes so httpx behaves exactly as
with its default backend (ConnectError, ReadTimeout, …).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import httpcore
from httpcore._utils import is_socket_readable

if TYPE_CHECKING:
    from httpcore._backends.base import SOCKET_OPTION

_CHUNK = 64 * 1024


class AsyncioStream(httpcore.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("timed out reading") from None
        except (OSError, ConnectionError) as exc:
            raise httpcore.ReadError(str(exc) or exc.__class__.__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        if not buffer:
            return
        try:
            async with asyncio.timeout(timeout):
                self._writer.write(buffer)
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("timed out writing") from None
        except (OSError, ConnectionError) as exc:
            raise httpcore.WriteError(str(exc) or exc.__class__.__name__) from exc

    async def aclose(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError, ssl.SSLError):
            pass  # the peer went away first; closed is closed

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            await self.aclose()
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ConnectionError, ssl.SSLError) as exc:
            await self.aclose()
            raise httpcore.ConnectError(str(exc) or exc.__class__.__name__) from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info == "client_addr":
            return self._writer.get_extra_info("sockname")
        if info == "server_addr":
            return self._writer.get_extra_info("peername")
        if info == "socket":
            return self._writer.get_extra_info("socket")
        if info == "is_readable":
            sock = self._writer.get_extra_info("socket")
            return self._reader.at_eof() or (sock is not None and is_socket_readable(sock))
        return None


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, local_addr=(local_address, 0) if local_address else None, limit=_CHUNK
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout("connect timed out") from None
        except (OSError, ConnectionError) as exc:
            raise httpcore.ConnectError(str(exc) or exc.__class__.__name__) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return AsyncioStream(reader, writer)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used by the probe")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
