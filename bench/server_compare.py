#!/usr/bin/env python3
"""ASGI servers for the gateway, side by side in one run: uvicorn (what we ship) against granian.

    uv run python bench/server_compare.py [--repeats 3] [--duration 8] [--granian-site DIR]

The harness is `bench/gateway_bench.py`'s (its functions, imported): the mock upstream pinned to
`--mock-cpus` with wrk, one gateway per server pinned to `--proxy-cpus`, the embedded configuration
(SQLite in a fresh data folder and the embedded Redis), a key with all five limits and usage
records on. Per repeat each phase runs direct, then through each server (only one under load at a
time): ns_c1 (non-streaming, c=1), ns (non-streaming, c=32), stream (SSE, 16 tokens, c=32). It
prints each row, then the spread (min / median / max) of req/s, the ratio to direct, p99/p50, CPU
ms per request and granian ÷ uvicorn, and each gateway's RSS (of granian's worker process, which
serves; its supervisor only waits).

granian is not a dependency of the project: it is read from `--granian-site` (a site-packages
folder, e.g. a throwaway `uv venv /tmp/g && uv pip install --python /tmp/g/bin/python granian`),
appended to the gateway's PYTHONPATH, so the gateway runs on the project's own packages.
Both run one worker with uvloop; granian's ASGI interface with lifespan, HTTP/1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_bench import (  # noqa: E402 - the harness lives beside this script
    PHASES,
    Group,
    embedded_env,
    fmt_row,
    free_port,
    prepare_portal,
    rss_mib,
    run_wrk,
    smoke,
    start_mock,
    uvicorn_argv,
    wait_http,
)


def server_argv(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return uvicorn_argv(port)
    return [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        "uvloop",
        "--http",
        "1",
        "--no-access-log",
        "--log-level",
        "warning",
        "portal.asgi:application",
    ]


def serving_pid(proc: subprocess.Popen, timeout: float = 30) -> int:
    """The process that serves: uvicorn's own, granian's one worker (its supervisor only waits),
    so the CPU per request and the RSS are the worker's."""
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.2)
    return proc.pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8, help="seconds per c=32 phase")
    ap.add_argument("--duration-c1", type=int, default=5, help="seconds per c=1 phase")
    ap.add_argument("--conc", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--mock-cpus", default="0", help="CPUs for the mock and wrk")
    ap.add_argument("--proxy-cpus", default="1", help="CPUs for the gateway")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--granian-site", default="/tmp/granian-venv/lib/python3.11/site-packages")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is missing: apt-get install -y wrk")
    if not (Path(a.granian_site) / "granian").is_dir():
        raise SystemExit(f"no granian in {a.granian_site}: uv pip install granian into a throwaway venv")
    phases = [p for p in a.phases.split(",") if p]
    group = Group()
    tmp = Path(tempfile.mkdtemp(prefix="server-compare-"))
    base = dict(os.environ)
    base["GATEWAY_REDIS_NAMESPACE"] = "srvbench-" + str(os.getpid())
    base["PORTAL_LOG_LEVEL"] = "WARNING"
    try:
        mock_url = start_mock(group, a.mock_cpus, base, tmp)
        env = embedded_env(base, tmp / "embedded", group)
        key = prepare_portal(mock_url + "/v1", env)
        gateways: dict[str, tuple[str, int]] = {}
        for server in ("uvicorn", "granian"):
            port = free_port()
            server_env = dict(env)
            if server == "granian":
                server_env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), a.granian_site) if p)
            gw = group.start(server_argv(server, port), a.proxy_cpus, server_env, tmp / f"gateway-{server}.log")
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/v1/models", gw)
            smoke(url, key)
            gateways[server] = (url, serving_pid(gw) if server == "granian" else gw.pid)
        print(f"embedded configuration; 1 worker each on CPU {a.proxy_cpus} (uvloop); mock+wrk on CPU {a.mock_cpus}")
        run_wrk(mock_url, "", a.conc, 2, False, a.tokens, a.mock_cpus)  # warm-up, unmeasured
        for url, _gw in gateways.values():
            run_wrk(url, key, a.conc, 3, False, a.tokens, a.mock_cpus)
            run_wrk(url, key, a.conc, 2, True, a.tokens, a.mock_cpus)
        print(
            "\n| rep | phase | target | req/s | x direct | x uvicorn | p50 ms | p95 ms | p99 ms | p99/p50 "
            "| +p50 ms | errors | gateway CPU ms/req | gateway cores |"
        )
        print("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        results = []
        for rep in range(1, a.repeats + 1):
            for phase in phases:
                conc = 1 if phase.endswith("c1") else a.conc
                dur = a.duration_c1 if conc == 1 else a.duration
                stream = phase.startswith("stream")
                direct = run_wrk(mock_url, "", conc, dur, stream, a.tokens, a.mock_cpus)
                print(fmt_row(rep, phase, "direct", direct, None))
                row: dict = {"phase": phase, "direct": direct}
                for server, (url, pid) in gateways.items():
                    row[server] = run_wrk(url, key, conc, dur, stream, a.tokens, a.mock_cpus, pid)
                for server in gateways:
                    versus = row["uvicorn"] if server != "uvicorn" else None
                    print(fmt_row(rep, phase, server, row[server], direct, versus), flush=True)
                results.append(row)
        print("\nSpread over repeats (min / median / max):")
        for phase in phases:
            rows = [r for r in results if r["phase"] == phase]
            for server in gateways:

                def spread(values: list[float], fmt: str = ".0f") -> str:
                    values = sorted(values)
                    return " / ".join(f"{v:{fmt}}" for v in (values[0], statistics.median(values), values[-1]))

                line = (
                    f"  {phase:<7} {server:<8} req/s {spread([r[server]['rps'] for r in rows])}"
                    f"   x direct {spread([r[server]['rps'] / r['direct']['rps'] for r in rows], '.3f')}"
                    f"   p99/p50 {spread([r[server]['p99'] / r[server]['p50'] for r in rows], '.1f')}"
                    f"   CPU ms/req {spread([r[server]['cpu_ms_per_req'] or 0 for r in rows], '.3f')}"
                )
                if server != "uvicorn":
                    line += f"   x uvicorn {spread([r[server]['rps'] / r['uvicorn']['rps'] for r in rows], '.2f')}"
                print(line)
        print(
            "\nGateway RSS after the run: "
            + ", ".join(f"{s} {rss_mib(pid):.1f} MiB" for s, (_u, pid) in gateways.items())
        )
    finally:
        group.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
