#!/usr/bin/env python3
"""Instructions per request of single request-side features, counted by callgrind (load-independent).

    uv run python bench/feature_costs.py [--tree PATH] [--runs 200]

Each feature is run `--runs` times in one process (Django set up, no server, no database), with
callgrind's instrumentation on only around those runs, and reported as instructions per run; "bare"
rows are what a feature's figure is compared with. `--tree` imports the gateway of another checkout
(e.g. a `git worktree` of an older commit) with this environment. Needs valgrind and cc.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(const char *name) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(name); }
"""


def child(runs: int, helper: str) -> None:
    import ctypes
    import datetime as dt

    import django

    django.setup()
    import orjson
    import uvloop

    from gateway import limits, metrics
    from gateway.cache import generation_keys, namespace
    from gateway.call import Call
    from gateway.errors import new_request_id
    from gateway.http import Request
    from gateway.usage import Usage, UsageEvent
    from portal.body_deadline import BodyDeadline
    from portal.secrets import keyed_hash

    cg = ctypes.CDLL(helper)

    def measure(name: str, f) -> None:
        for _ in range(5):
            f()
        cg.cg_start()
        for _ in range(runs):
            f()
        cg.cg_stop(name.encode())

    def measure_async(name: str, f) -> None:
        async def main() -> None:
            for _ in range(5):
                await f()
            cg.cg_start()
            for _ in range(runs):
                await f()
            cg.cg_stop(name.encode())

        uvloop.run(main())

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", b"Bearer gp-x"),
            (b"content-type", b"application/json"),
        ],
    }

    async def send(message: object) -> None:
        pass

    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    req = Request(scope, None, send, "/chat/completions")  # type: ignore[arg-type]
    limit_values = {
        "requests_per_minute": 100000,
        "tokens_per_minute": 10**9,
        "tokens_per_day": 10**10,
        "tokens_per_month": 10**11,
        "max_parallel_requests": 1000,
    }
    scopes = [limits.Scope(f"gw:{c}:1", "key", limit_values) for c in "kut"]
    body = (
        b'{"model":"fake-model","messages":[{"role":"user","content":"Say hello to the benchmark."}],"max_tokens":16}'
    )

    class Received:
        received = body

    class Bounded:  # what Call.bounded reads of a call
        req = Received()
        prompt_estimate = 7
        max_tokens = 16
        choices = 1
        channel_id = 1

    usage = Usage(7, 16)

    def event() -> UsageEvent:
        return UsageEvent(
            created=dt.datetime.now(dt.UTC),
            request_id="abc123",
            key_id=1,
            user_id=1,
            model="fake-model",
            channel_id=1,
            surface="chat",
            stream=False,
            prompt_tokens=7,
            completion_tokens=16,
            estimated=False,
            status="ok",
            http_status=200,
            latency_ms=3.0,
            ttft_ms=2.0,
            cost_nanos=0,
            route_explanation=["Sent to channel bench (model fake-model)."],
        )

    ev = event()
    null = os.open(os.devnull, os.O_WRONLY)
    message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict:
        return message

    async def app(scope: dict, receive, send) -> None:
        await receive()

    deadline = BodyDeadline(app)
    measure("bare: a call of a lambda", lambda: None)
    measure("request id (new_request_id)", new_request_id)
    measure_async("bare: send(response start)", lambda: send(start))
    measure_async("request id header: Request.send(response start)", lambda: req.send(start))
    measure("x-ratelimit headers (rate_headers)", lambda: limits.rate_headers(scopes, [3, 50]))
    measure("bounded usage (Call.bounded)", lambda: Call.bounded(Bounded(), usage))  # type: ignore[arg-type]
    measure("usage event (UsageEvent(...) with its id)", event)
    measure("usage journal line (orjson + write(2))", lambda: os.write(null, orjson.dumps(ev) + b"\n"))
    measure("Prometheus (metrics.observe)", lambda: metrics.observe(ev))
    measure_async("bare: an ASGI app reading its body", lambda: app(scope, receive, send))
    measure_async("body deadline (BodyDeadline around that app)", lambda: deadline(scope, receive, send))
    measure("Redis namespace + generation keys", lambda: (namespace(), generation_keys()))
    measure("key hash (keyed_hash)", lambda: keyed_hash("gp-fkIYXUhXk8YtGW61eArnHI3VaINUtCofJ1dBapy3fbE"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=str(HERE.parent))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--child", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    tree = Path(a.tree).resolve()
    if a.child:
        sys.path.insert(0, str(tree))
        os.chdir(tree)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        child(a.runs, a.child)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "cg.c", Path(tmp) / "cg.so"
        src.write_text(HELPER)
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src)], check=True)
        out = Path(tmp) / "out"
        out.mkdir()
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.%p"]
        cmd += [sys.executable, __file__, "--tree", str(tree), "--runs", str(a.runs), "--child", str(lib)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(p.stderr[-3000:])
        rows = []
        for dump in out.glob("cg.*.*"):
            text = dump.read_text(errors="replace")
            name = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if name and total:
                rows.append((int(dump.name.rsplit(".", 1)[1]), name.group(1), int(total.group(1)) / a.runs))
    print(f"instructions per run, {a.runs} runs each, tree {tree}")
    print("| feature | k instructions |\n|---|--:|")
    for _n, name, per in sorted(rows):
        print(f"| {name} | {per / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    sys.exit(main())
