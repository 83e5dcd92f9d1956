#!/usr/bin/env python3
"""The gateway's Redis client against redis-py's asyncio client, on the admission script.

    uv run python bench/redis_client_compare.py [--url redis://127.0.0.1:6379/14] [--repeats 3]

Each client runs the real admission script (`gateway.limits.ADMIT_LUA`, a key and a user scope
with all five limits set) N times with 32 commands in flight, in this process pinned to one core
(`--cpu`); it prints commands/s and this process's CPU time per command, per repeat, with the
spread. Redis is the one at `--url` (run one on another core). CPU per command is the figure that
decides: the admission script runs once per gateway request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def args_for(i: int) -> list[object]:
    now = int(time.time() * 1000)
    scope = [10**9, 10**12, 10**12, 10**12, 10**6]
    return [
        now,
        f"bench-{i}",
        2,
        10,
        "20261201",
        "202612",
        60000,
        3600000,
        86400000,
        "*",
        "",
        "rcbench:k:1",
        *scope,
        "rcbench:u:1",
        *scope,
    ]


async def run_ours(url: str, n: int, conc: int) -> tuple[float, float]:
    from gateway.limits import ADMIT_LUA
    from gateway.resp import RespClient

    client = RespClient(url)
    keys = ["rcbench:gen:keys", "rcbench:gen:routes", "rcbench:epoch"]
    await client.evalsha(ADMIT_LUA, keys, args_for(0))
    sem = asyncio.Semaphore(conc)

    async def one(i: int) -> None:
        async with sem:
            await client.evalsha(ADMIT_LUA, keys, args_for(i))

    t, c = time.perf_counter(), cpu()
    await asyncio.gather(*(one(i) for i in range(n)))
    out = (time.perf_counter() - t, cpu() - c)
    await client.close()
    return out


async def run_redis_py(url: str, n: int, conc: int) -> tuple[float, float]:
    import redis.asyncio as aredis

    from gateway.limits import ADMIT_LUA

    client = aredis.Redis.from_url(url, max_connections=conc)
    script = client.register_script(ADMIT_LUA)
    keys = ["rcbench:gen:keys", "rcbench:gen:routes", "rcbench:epoch"]
    await script(keys=keys, args=args_for(0))
    sem = asyncio.Semaphore(conc)

    async def one(i: int) -> None:
        async with sem:
            await script(keys=keys, args=args_for(i))

    t, c = time.perf_counter(), cpu()
    await asyncio.gather(*(one(i) for i in range(n)))
    out = (time.perf_counter() - t, cpu() - c)
    await client.aclose()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--conc", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=1)
    a = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    rows: dict[str, list[float]] = {"ours": [], "redis-py": []}
    print(f"admission script, {a.n} commands, {a.conc} in flight, client on CPU {a.cpu}, Redis {a.url}")
    print("| repeat | client | commands/s | client CPU µs per command |\n|---|---|--:|--:|")
    for rep in range(1, a.repeats + 1):
        for name, fn in (("ours", run_ours), ("redis-py", run_redis_py)):
            wall, used = asyncio.run(fn(a.url, a.n, a.conc))
            rows[name].append(used / a.n * 1e6)
            print(f"| {rep} | {name} | {a.n / wall:.0f} | {used / a.n * 1e6:.1f} |", flush=True)
    ours, theirs = statistics.median(rows["ours"]), statistics.median(rows["redis-py"])
    for name, values in rows.items():
        v = sorted(values)
        print(f"{name:<9} CPU µs/command min / median / max: {v[0]:.1f} / {statistics.median(v):.1f} / {v[-1]:.1f}")
    print(f"redis-py / ours (median CPU per command): {theirs / ours:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
