#!/usr/bin/env python3
"""httpx vs aiohttp as the gateway's upstream client: CPU per request against the same mock.

    uv run python bench/client_compare.py [--requests 4000] [--conc 32]

Starts `bench/mock_upstream.py` on 127.0.0.1 (pinned to CPU 0 when taskset exists), then, in this
process pinned to CPU 1, sends the same non-streaming and streaming chat requests with each client
(one pooled client, `--conc` concurrent workers) and prints requests/s and client CPU ms per
request (process time / requests, the number that does not depend on the machine's noise).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def payload(stream: bool) -> bytes:
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


async def with_aiohttp(url: str, n: int, conc: int, stream: bool) -> None:
    import aiohttp

    data = payload(stream)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        left = [n]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with session.post(url, data=data, headers={"content-type": "application/json"}) as r:
                    if stream:
                        async for _chunk in r.content.iter_any():
                            pass
                    else:
                        await r.read()

        await asyncio.gather(*(worker() for _ in range(conc)))


async def with_httpx(url: str, n: int, conc: int, stream: bool) -> None:
    import httpx

    data = payload(stream)
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        left = [n]

        async def worker() -> None:
            while left[0] > 0:
                left[0] -= 1
                async with client.stream("POST", url, content=data, headers={"content-type": "application/json"}) as r:
                    async for _chunk in r.aiter_raw():
                        pass

        await asyncio.gather(*(worker() for _ in range(conc)))


def measure(fn, url: str, n: int, conc: int, stream: bool) -> tuple[float, float]:
    import uvloop

    uvloop.run(fn(url, 200, conc, stream))  # warm-up
    cpu0, t0 = time.process_time(), time.perf_counter()
    uvloop.run(fn(url, n, conc, stream))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    return n / wall, cpu * 1000 / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--conc", type=int, default=32)
    a = ap.parse_args()
    port = free_port()
    cmd = [sys.executable, str(HERE / "mock_upstream.py"), "--port", str(port)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
        os.sched_setaffinity(0, {1})
    mock = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        import httpx

        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        print(f"{a.requests} requests, {a.conc} concurrent, client pinned to CPU 1")
        print("| client | mode | req/s | client CPU ms/req |\n|---|---|--:|--:|")
        for name, fn in (("aiohttp", with_aiohttp), ("httpx", with_httpx)):
            for stream in (False, True):
                rps, cpu = measure(fn, url, a.requests, a.conc, stream)
                print(f"| {name} | {'stream' if stream else 'json'} | {rps:.0f} | {cpu:.3f} |", flush=True)
    finally:
        os.killpg(mock.pid, signal.SIGTERM)
        mock.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
