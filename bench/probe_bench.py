"""Benchmark one full probe round over many fake upstreams on 127.0.0.1.

    uv run python bench/probe_bench.py                       # 1,000 channels, 100 ms to first token
    uv run python bench/probe_bench.py --channels 2000 --latency 0.2 --concurrency 300

A child process serves every fake upstream from one event loop (one listening port per channel,
behaviour looked up by port): most answer `/health`, `/v1/models` and a streaming chat completion
whose first token comes after `--latency` seconds; `--fail-500` of them answer the completion with
HTTP 500, `--refused` of them are ports with nothing listening, `--stall` of them stall mid-stream
(those cost a full probe timeout, so they are off by default). This process then runs
`channels.health.probe.probe_many` (the same code the Celery task runs) over all of them and prints
the wall time, the outcome counts and the peak RSS. It measures the network half of a round; the
database half is a few queries per channel.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import socket
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def serve(plan: dict[int, str], latency: float, ready, stop) -> None:
    """Child process: one aiohttp app listening on every planned port."""
    _raise_fd_limit()
    from aiohttp import web

    async def health(request):
        return web.json_response({"status": "ok"})

    async def models(request):
        return web.json_response(
            {"object": "list", "data": [{"id": "bench-model", "object": "model", "max_model_len": 8192}]}
        )

    async def chat(request):
        port = request.transport.get_extra_info("sockname")[1]
        mode = plan.get(port, "ok")
        await request.read()
        await asyncio.sleep(latency)
        if mode == "500":
            return web.json_response({"error": {"message": "bench failure", "type": "server_error"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, text in enumerate(["", "ok", " fine"]):
            delta = {"role": "assistant", "content": text} if i == 0 else {"content": text}
            chunk = {"id": "b", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if mode == "stall" and i == 1:
                await asyncio.sleep(3600)
        usage = {"id": "b", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        for port, mode in plan.items():
            if mode != "refused":
                await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await runner.cleanup()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds to first token (default 0.1)")
    parser.add_argument("--concurrency", type=int, default=200, help="probes in flight (PORTAL_PROBE_CONCURRENCY)")
    parser.add_argument("--fail-500", type=float, default=0.05, help="share answering HTTP 500")
    parser.add_argument("--refused", type=float, default=0.02, help="share with nothing listening")
    parser.add_argument("--stall", type=float, default=0.0, help="share stalling mid-stream (each costs --timeout)")
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--db",
        action="store_true",
        help="run the whole round (channels.health.services.run_round: probes + database + status) on "
        "temporary channels in DATABASE_URL's database, deleted afterwards",
    )
    args = parser.parse_args()
    if args.channels > 5000:
        parser.error("--channels is capped at 5000 (file descriptors, shared machine)")
    _raise_fd_limit()

    ports = _free_ports(args.channels)
    n500, nref, nstall = (round(args.channels * x) for x in (args.fail_500, args.refused, args.stall))
    modes = ["500"] * n500 + ["refused"] * nref + ["stall"] * nstall
    modes += ["ok"] * (args.channels - len(modes))
    plan = dict(zip(ports, modes, strict=True))

    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    server = ctx.Process(target=serve, args=(plan, args.latency, ready, stop), daemon=True)
    server.start()
    if not ready.wait(60):
        server.kill()
        sys.exit("the fake upstreams did not start")

    if args.db:
        try:
            run_db_rounds(args, ports)
        finally:
            stop.set()
            server.join(10)
        return

    from channels.health.probe import Target, probe_many, run_loop

    targets = [
        Target(i, "vllm", f"http://127.0.0.1:{port}/v1", api_key="bench", model="bench-model", max_tokens=4)
        for i, port in enumerate(ports)
    ]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        for r in range(1, args.rounds + 1):
            started = time.perf_counter()
            cpu0 = time.process_time()
            outcomes = run_loop(
                probe_many(targets, concurrency=args.concurrency, connect_timeout=args.timeout, timeout=args.timeout)
            )
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu0
            counts = Counter("ok" if o.ok else o.error for o in outcomes)
            ttfts = sorted(o.ttft_ms for o in outcomes if o.ok and o.ttft_ms is not None)
            p50 = ttfts[len(ttfts) // 2] if ttfts else None
            p95 = ttfts[int(len(ttfts) * 0.95) - 1] if ttfts else None
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"round {r}: {args.channels} channels (latency {args.latency * 1000:.0f} ms, "
                f"concurrency {args.concurrency}) probed in {elapsed:.2f} s "
                f"(sequential would be ≥ {args.channels * args.latency:.0f} s); outcomes {dict(counts)}; "
                f"TTFT p50 {p50} ms p95 {p95} ms; prober CPU {cpu:.2f} s; "
                f"peak RSS {peak:.0f} MiB (before the round {rss_before:.0f} MiB)"
            )
    finally:
        stop.set()
        server.join(10)
        if server.is_alive():
            server.kill()
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"fake upstream process CPU (all rounds, incl. start-up): {child.ru_utime + child.ru_stime:.2f} s")


def run_db_rounds(args, ports: list[int]) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from channels.health import services
    from channels.models import Channel, Model, ModelRoute

    settings.PORTAL_PROBE_CONCURRENCY = args.concurrency
    settings.PORTAL_PROBE_TIMEOUT = args.timeout
    settings.PORTAL_PROBE_CONNECT_TIMEOUT = args.timeout
    settings.PORTAL_PASSIVE_FLUSH_SECONDS = 0
    prefix = f"bench-{os.getpid()}-"
    model, _ = Model.objects.get_or_create(name=f"{prefix}model")
    channels = Channel.objects.bulk_create(
        [Channel(name=f"{prefix}{i}", kind="vllm", base_url=f"http://127.0.0.1:{p}/v1") for i, p in enumerate(ports)]
    )
    ModelRoute.objects.bulk_create([ModelRoute(model=model, channel=c, upstream_model="bench-model") for c in channels])
    ids = [c.pk for c in channels]
    try:
        for r in range(1, args.rounds + 1):
            started = time.perf_counter()
            cpu0 = time.process_time()
            done = services.run_round(ids)
            elapsed = time.perf_counter() - started
            statuses = Counter(d.new_status for d in done)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"full round {r} ({connection.vendor}): {len(done)} channels probed, recorded and settled in "
                f"{elapsed:.2f} s; statuses {dict(statuses)}; CPU {time.process_time() - cpu0:.2f} s; "
                f"peak RSS {peak:.0f} MiB"
            )
    finally:
        Channel.objects.filter(name__startswith=prefix).delete()
        model.delete()


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    main()
