#!/usr/bin/env python3
"""A static file through the real ASGI app: WhiteNoise's own middleware against
`portal.staticfiles.StaticFilesMiddleware` (its body read in the event loop, not in Django's thread).

    uv run python bench/static_bench.py [--repeats 5] [--requests 200] [--file vendor/chart-4.6.1.umd.min.js]

Two uvicorns as production runs them (uvloop, httptools; `gateway_bench.uvicorn_argv`) on one fresh
embedded data folder, the same tree, differing only in that one line of MIDDLEWARE (a settings module
written to a temporary folder). Per repeat, one server after the other: `--requests` GETs of the file
(after 20 to warm up) by one keep-alive client (c=1), then by 8 at once (c=8); each body is checked
against the file. Prints per repeat the wall time and the server's CPU (utime + stime), then per
concurrency min / median / max of both and the ratio of the medians (portal ÷ whitenoise).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gateway_bench import Group, cpu_seconds, embedded_env, free_port, uvicorn_argv, wait_http  # noqa: E402

MIDDLEWARE = {
    "whitenoise": "whitenoise.middleware.WhiteNoiseMiddleware",
    "portal": "portal.staticfiles.StaticFilesMiddleware",
}
SETTINGS = """from portal.settings import *  # noqa: F403
MIDDLEWARE = [{middleware!r} if "StaticFiles" in m or "WhiteNoise" in m else m for m in MIDDLEWARE]  # noqa: F405
"""


def fetch(url: str, n: int, concurrency: int, expected: bytes) -> float:
    """Wall seconds for `n` GETs of `url` by `concurrency` keep-alive clients."""
    import httpx

    async def client(count: int) -> None:
        async with httpx.AsyncClient(timeout=60) as c:
            for _ in range(count):
                r = await c.get(url, headers={"Accept-Encoding": "identity"})
                assert r.status_code == 200 and r.content == expected, (r.status_code, len(r.content))

    async def run() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(client(n // concurrency) for _ in range(concurrency)))
        return time.perf_counter() - start

    return asyncio.run(run())


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--file", default="vendor/chart-4.6.1.umd.min.js", help="under static/")
    args = ap.parse_args()
    expected = (ROOT / "static" / args.file).read_bytes()
    group = Group()
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="static-bench-") as tmp:
        try:
            env = embedded_env(dict(os.environ), Path(tmp) / "data", group)
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, capture_output=True
            )
            urls, pids = {}, {}
            for name, middleware in MIDDLEWARE.items():
                folder = Path(tmp) / name
                folder.mkdir()
                (folder / "bench_settings.py").write_text(SETTINGS.format(middleware=middleware))
                port = free_port()
                server_env = {**env, "DJANGO_SETTINGS_MODULE": "bench_settings", "PYTHONPATH": f"{folder}:{ROOT}"}
                proc = group.start(uvicorn_argv(port), None, server_env, Path(tmp) / f"{name}.log")
                urls[name], pids[name] = f"http://127.0.0.1:{port}/static/{args.file}", proc.pid
                wait_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=180)
            for rep in range(1, args.repeats + 1):
                for concurrency in (1, 8):
                    for name in MIDDLEWARE:
                        fetch(urls[name], 20, 1, expected)
                        cpu = cpu_seconds(pids[name])
                        wall = fetch(urls[name], args.requests, concurrency, expected)
                        cpu = cpu_seconds(pids[name]) - cpu
                        results.setdefault((name, concurrency), []).append((wall, cpu))
                        print(
                            f"repeat {rep} c={concurrency} {name:10} wall {wall:.3f} s  server CPU {cpu:.3f} s",
                            flush=True,
                        )
            for name in MIDDLEWARE:
                warned = "StreamingHttpResponse must consume" in (Path(tmp) / f"{name}.log").read_text()
                print(f"{name}: Django's iterator warning {'logged' if warned else 'not logged'}")
        finally:
            group.stop_all()
    print(f"\n{args.requests} GETs of static/{args.file} ({len(expected)} bytes), min / median / max of {args.repeats}")
    for concurrency in (1, 8):
        medians = {}
        for name in MIDDLEWARE:
            walls, cpus = zip(*results[(name, concurrency)], strict=True)
            medians[name] = (statistics.median(walls), statistics.median(cpus))
            print(f"c={concurrency} {name:10} wall s {spread(list(walls))}   server CPU s {spread(list(cpus))}")
        wall_ratio = medians["portal"][0] / medians["whitenoise"][0]
        cpu_ratio = medians["portal"][1] / medians["whitenoise"][1]
        print(f"c={concurrency} portal ÷ whitenoise: wall {wall_ratio:.2f}, server CPU {cpu_ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
