#!/usr/bin/env python3
"""The gateway's own CPU per request, load-independent, for two or more commits in one run.

    uv run python bench/gateway_cpu.py --trees 1b1e1f8,HEAD [--requests 2000] [--repeats 5]
                                       [--callgrind 300] [--callgrind-repeats 2] [--modes ns,stream]

A shared, loaded machine makes wall-clock figures noise; this measures what does not depend on the
neighbours: the instructions the gateway process executes (valgrind's callgrind, counting only the
measured requests) and the CPU time it uses (`getrusage`, all its threads: the usage writer too).

What it does, all on 127.0.0.1:
  1. checks each commit out in a temporary `git worktree` ("HEAD" is this working tree as it is,
     uncommitted changes included) and prepares, with that commit's own code, an embedded portal
     (SQLite in a fresh data folder, the embedded Redis on its unix socket: what `portal up` runs)
     with a channel to `bench/mock_upstream.py` and a key with all five limits set;
  2. per repeat, per mode, each commit in turn (the order alternates between repeats), runs a child
     process that imports that commit's `portal.asgi.application`, starts its lifespan, sends
     `--warm-up` requests, then `--requests` requests at `--conc` concurrency straight into the ASGI
     app (no HTTP server: uvicorn's share is not the gateway's), waits for the usage writer to
     write their records, and reports the CPU it used between the two points;
  3. with `--callgrind N`, runs the same child under `valgrind --tool=callgrind` with N requests,
     instrumentation switched on only around them (a 3-function C helper built here with `cc`
     calls callgrind's client requests), and reports instructions per request;
  4. prints per mode and commit min / median / max of CPU ms and instructions per request, and each
     commit's median over the first commit's.

Modes: `ns` (non-streaming Chat Completions, 16 tokens), `stream` (the same streamed). Both count
the usage records' writes (the writer's interval is set long and it is flushed at the end of the
measured requests, so every commit writes the same batch sizes), and the journal. The driver's own
share (building scopes, reading answers) is in both commits' figures alike.
`--env NAME=VALUE` (repeatable) runs every child with that setting (e.g. PORTAL_ACCESS_LOG=1).
A tree given as `REF@PYTHON` runs that commit's children with another interpreter (a venv holding the
project's dependencies: `UV_PROJECT_ENVIRONMENT=/tmp/venv312 uv sync --frozen --python 3.12`, then
`--trees HEAD,HEAD@/tmp/venv312/bin/python`).
`--profile DIR` writes one cProfile per commit and mode (`python -m pstats DIR/<tree>-<mode>.prof`).
`--syscalls` (Debian's linux-perf, as root) also counts each run's system calls per request with
`perf stat` on kernel tracepoints, switched on and off by the child around the measured requests;
`--perf-record DIR` samples them instead (`perf record -g`, `perf report -i DIR/<tree>-<mode>.data`):
the kernel's and the C libraries' share by function, which callgrind's instruction counts and
cProfile do not show (neither sees the kernel, nor what a cache miss costs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gateway_bench import Group, body, embedded_env, prepare_portal, start_mock  # noqa: E402

CALLGRIND_HELPER = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""
# Settings for every child: nothing time-based between two measured points (catalog refreshes,
# usage flushes), and deadlines that a run 50 times slower under valgrind cannot hit.
CHILD_ENV = {
    "PORTAL_LOG_LEVEL": "WARNING",
    "GATEWAY_CACHE_TTL": "3600",
    # Work that follows the wall clock is not the requests' (valgrind slows the child 50-100x, more
    # on a loaded box): kept database connections are reopened after CONN_MAX_AGE seconds, each
    # reopening re-reads SQLite's schema (~3 M instructions), so a 60 s age put the box's load
    # into the instruction counts.
    "DATABASE_CONN_MAX_AGE": "36000",
    # Likewise a cached key is reloaded from the database every GATEWAY_KEY_TTL (4 s): under
    # valgrind that was every few requests, ~0.7 M instructions a request (2026-12-03).
    "GATEWAY_KEY_TTL": "3600",
    "GATEWAY_USAGE_FLUSH_INTERVAL": "3600",
    "PORTAL_PASSIVE_FLUSH_SECONDS": "3600",
    "GATEWAY_REDIS_TIMEOUT": "120",
    "PORTAL_REDIS_TIMEOUT": "120",
    "GATEWAY_DB_TIMEOUT": "120",
    "PORTAL_BODY_TIMEOUT": "600",
    "GATEWAY_HEADERS_TIMEOUT": "600",
    "GATEWAY_CONNECT_TIMEOUT": "600",
}


# ---------------------------------------------------------------------------------------------
# The child: one commit's ASGI app, driven in-process.


async def drive(mode: str, key: str, conc: int, warm_up: int, requests: int, tokens: int) -> dict:
    import resource

    import django

    django.setup()  # before the gateway's modules, which import models
    from gateway.state import process
    from portal.asgi import application

    stream = mode == "stream"
    payload = body(stream, tokens).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"authorization", b"Bearer " + key.encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    failures: list[str] = []

    async def one() -> None:
        finished = asyncio.get_running_loop().create_future()
        sent = False
        status = 0
        tail = b""

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await finished
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            nonlocal status, tail
            if message["type"] == "http.response.start":
                status = message["status"]
            else:
                tail = (tail + message.get("body", b""))[-64:]
                if not message.get("more_body", False) and not finished.done():
                    finished.set_result(None)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        await application(scope, receive, send)
        if not finished.done():
            finished.set_result(None)
        if status != 200 or (stream and not tail.endswith(b"data: [DONE]\n\n")):
            failures.append(f"{status} {tail[-200:]!r}")

    async def run(n: int) -> None:
        left = n

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await one()

        await asyncio.gather(*(worker() for _ in range(conc)))

    lifespan_in: asyncio.Queue = asyncio.Queue()
    lifespan_out: asyncio.Queue = asyncio.Queue()
    life = asyncio.get_running_loop().create_task(
        application({"type": "lifespan", "asgi": {"version": "3.0"}}, lifespan_in.get, lifespan_out.put)
    )
    await lifespan_in.put({"type": "lifespan.startup"})
    started = await lifespan_out.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"lifespan failed: {started}")
    await run(warm_up)
    await process.usage.flush()
    if failures:
        raise SystemExit(f"{len(failures)} warm-up requests failed, e.g. {failures[0]}")

    cg = None
    if os.environ.get("GWCPU_CALLGRIND_HELPER"):
        import ctypes

        cg = ctypes.CDLL(os.environ["GWCPU_CALLGRIND_HELPER"])
    profiler = None
    if os.environ.get("GWCPU_PROFILE"):
        import cProfile

        # The event loop thread's CPU time, not the wall clock: what other processes on a loaded
        # machine take is then in no function's figure (the usage writer's thread is not profiled).
        profiler = cProfile.Profile(time.thread_time)
    perf = _perf_control()
    before = resource.getrusage(resource.RUSAGE_SELF)
    loop_before = time.thread_time()  # the event loop's thread alone (the usage writer is another)
    wall = time.perf_counter()
    perf("enable")
    if cg is not None:
        cg.cg_start()
    if profiler is not None:
        profiler.enable()
    await run(requests)
    await process.usage.flush()
    if profiler is not None:
        profiler.disable()
    if cg is not None:
        cg.cg_stop()
    perf("disable")
    wall = time.perf_counter() - wall
    loop_cpu = time.thread_time() - loop_before
    after = resource.getrusage(resource.RUSAGE_SELF)
    if profiler is not None:
        profiler.dump_stats(os.environ["GWCPU_PROFILE"])
    await lifespan_in.put({"type": "lifespan.shutdown"})
    await lifespan_out.get()
    await life
    if failures:
        raise SystemExit(f"{len(failures)} of {requests} requests failed, e.g. {failures[0]}")
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    return {
        "requests": requests,
        "cpu_ms_per_req": (user + system) * 1000 / requests,
        "user_ms_per_req": user * 1000 / requests,
        "sys_ms_per_req": system * 1000 / requests,
        "loop_ms_per_req": loop_cpu * 1000 / requests,
        "wall_s": wall,
    }


def _perf_control() -> Callable[[str], None]:
    """Switches the `perf stat` around this child (`--syscalls`) on and off; does nothing without."""
    where = os.environ.get("GWCPU_PERF_CTL")
    if not where:
        return lambda _command: None
    ctl, ack = open(where + ".ctl", "w"), open(where + ".ack")  # kept for the run

    def command(what: str) -> None:
        ctl.write(what + "\n")
        ctl.flush()
        ack.readline()

    return command


def child(a: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    sys.path.insert(0, os.getcwd())
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency of the gateway's server
        runner = asyncio.run
    result = runner(drive(a.mode, a.key, a.conc, a.warm_up, a.requests, a.tokens))
    print("GWCPU " + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: trees, portals, children, the table.


def paired_ratios(results: list[dict], first: str, label: str, mode: str) -> list[float]:
    """`label`'s CPU time over `first`'s within each repeat of `mode` (native runs only)."""
    by_rep: dict[int, dict[str, float]] = {}
    for r in results:
        if r["kind"] == "cpu" and r["mode"] == mode and r["tree"] in (first, label):
            by_rep.setdefault(r["rep"], {})[r["tree"]] = r["cpu_ms_per_req"]
    return [pair[label] / pair[first] for pair in by_rep.values() if len(pair) == 2]


def interpreter(spec: str) -> tuple[str, str]:
    """(ref, python) of a `--trees` entry, `REF` or `REF@PYTHON`: this interpreter when none is given."""
    ref, _, python = spec.partition("@")
    return ref, python or sys.executable


def python_label(python: str) -> str:
    """What a tree's label gets for another interpreter: its version."""
    if python == sys.executable:
        return ""
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f" py{version}"


def checkout(ref: str, tmp: Path) -> tuple[str, Path, bool]:
    """(label, folder, temporary): "HEAD" is this working tree; anything else a detached worktree."""
    if ref == "HEAD":
        return "HEAD", ROOT, False
    sha = subprocess.run(
        ["git", "rev-parse", "--short", ref + "^{commit}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    where = tmp / f"tree-{sha}"
    subprocess.run(["git", "worktree", "add", "--detach", str(where), sha], cwd=ROOT, check=True, capture_output=True)
    return ref if ref == sha else f"{ref} ({sha})", where, True


def run_child(
    tree: Path,
    env: dict,
    key: str,
    mode: str,
    a: argparse.Namespace,
    *,
    requests: int,
    valgrind: list[str] | None = None,
    warm_up: int | None = None,
) -> dict:
    cmd = [
        env.get("GWCPU_PYTHON", sys.executable),
        str(HERE / "gateway_cpu.py"),
        "--child",
        "--mode",
        mode,
        "--key",
        key,
        "--conc",
        str(a.conc),
        "--warm-up",
        str(a.warm_up if warm_up is None else warm_up),
        "--requests",
        str(requests),
        "--tokens",
        str(a.tokens),
    ]
    if valgrind:
        cmd = [*valgrind, *cmd]
    counts = None
    if (a.syscalls or a.perf_record) and not valgrind:
        counts = Path(tempfile.mkdtemp(prefix="gwcpu-perf-"))
        for end in ("ctl", "ack"):
            os.mkfifo(counts / f"perf.{end}")
        env = dict(env, GWCPU_PERF_CTL=str(counts / "perf"))
        control = f"--control=fifo:{counts / 'perf.ctl'},{counts / 'perf.ack'}"
        if a.perf_record:
            Path(a.perf_record).mkdir(parents=True, exist_ok=True)
            where = Path(a.perf_record) / f"{tree.name}-{mode}.data"
            record = ["perf", "record", "-q", "-D", "-1", control, "-e", "cpu-clock", "-F", "2999", "-g"]
            cmd = [*record, "-o", str(where), *cmd]
        else:
            events = ",".join(SYSCALL_EVENTS)
            cmd = ["perf", "stat", "-x,", "-D", "-1", control, "-o", str(counts / "out"), "-e", events, *cmd]
    p = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    m = re.search(r"^GWCPU (\{.*\})$", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise SystemExit(
            f"the child for {tree} ({mode}) failed rc={p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    result = json.loads(m.group(1))
    if counts is not None:
        if (counts / "out").exists():
            for line in (counts / "out").read_text().splitlines():
                fields = line.split(",")
                if len(fields) > 2 and fields[2] in SYSCALL_EVENTS and fields[0].isdigit():
                    result[fields[2].rpartition(":")[2].removeprefix("sys_enter_")] = int(fields[0]) / requests
        shutil.rmtree(counts, ignore_errors=True)
    return result


# `--syscalls`: the system calls `perf stat` counts around the measured requests (kernel tracepoints,
# which work where hardware counters do not): all of them, then those a request makes (uvloop reads
# and writes its sockets with read/write and waits in epoll_pwait; SQLite writes with pwrite64;
# CPython 3.11's `asyncio.get_running_loop` calls getpid; `os.urandom` is getrandom; a thread woken
# is a futex), and the context switches and page faults the process takes.
SYSCALL_EVENTS = (
    "raw_syscalls:sys_enter",
    "syscalls:sys_enter_read",
    "syscalls:sys_enter_write",
    "syscalls:sys_enter_pwrite64",
    "syscalls:sys_enter_epoll_pwait",
    "syscalls:sys_enter_epoll_ctl",
    "syscalls:sys_enter_getpid",
    "syscalls:sys_enter_getrandom",
    "syscalls:sys_enter_futex",
    "context-switches",
    "page-faults",
)

SYSCALL_NAMES = {e.rpartition(":")[2].removeprefix("sys_enter_") for e in SYSCALL_EVENTS}


def callgrind_total(out_dir: Path) -> int:
    """Instructions in the dump made at the end of the measured requests (`<file>.1`)."""
    dumps = sorted(out_dir.glob("cg.*.1"))
    if len(dumps) != 1:
        raise SystemExit(f"expected one callgrind dump in {out_dir}, found {dumps}")
    m = re.search(r"^totals: (\d+)", dumps[0].read_text(errors="replace"), re.M)
    if not m:
        raise SystemExit(f"no totals in {dumps[0]}")
    return int(m.group(1))


def spread(values: list[float], digits: int) -> str:
    v = sorted(values)
    return f"{v[0]:,.{digits}f} / {statistics.median(v):,.{digits}f} / {v[-1]:,.{digits}f}"


def cell(firsts: dict[str, float], column: str, values: list[float], *, spread_of: bool) -> list[str]:
    """A table's cells for `values`: min / median / max and the ratio of the median to the first
    commit's (`firsts`, filled as the rows are made), or (not `spread_of`) the median and that ratio."""
    if not values:
        return ["-", "-"] if spread_of else ["-"]
    med = statistics.median(values)
    ratio = f"{med / firsts[column]:.2f}" if column in firsts else "-"
    firsts.setdefault(column, med)
    if spread_of:
        return [spread(values, 3), ratio]
    return [f"{med:.3f}" if ratio == "-" else f"{med:.3f} ({ratio})"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="ns", help=argparse.SUPPRESS)
    ap.add_argument("--key", default="", help=argparse.SUPPRESS)
    ap.add_argument("--trees", default="1b1e1f8,HEAD", help="commits to compare, the first is the baseline")
    ap.add_argument("--modes", default="ns,stream")
    ap.add_argument("--requests", type=int, default=2000, help="measured requests per CPU-time run")
    ap.add_argument("--warm-up", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5, help="CPU-time runs per commit and mode")
    ap.add_argument("--callgrind", type=int, default=0, help="measured requests per callgrind run (0: none)")
    ap.add_argument("--callgrind-repeats", type=int, default=2)
    ap.add_argument("--callgrind-warm-up", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=2, help="callgrind runs at a time")
    ap.add_argument("--conc", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for every child (repeatable)")
    ap.add_argument(
        "--syscalls", action="store_true", help="also count each child's system calls per request (`perf stat`)"
    )
    ap.add_argument("--perf-record", default="", help="record each child with `perf record` into this folder")
    ap.add_argument("--profile", default="", help="also write a cProfile per commit and mode into this folder")
    ap.add_argument("--out", default="", help="write every result as JSON here")
    ap.add_argument("--keep-callgrind", default="", help="keep the callgrind files in this folder")
    a = ap.parse_args()
    if a.child:
        return child(a)
    if a.callgrind and not (shutil.which("valgrind") and shutil.which("cc")):
        raise SystemExit("--callgrind needs valgrind and cc (with valgrind's headers)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still cleans up below
    group = Group()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-cpu-"))
    trees: list[tuple[str, Path, bool]] = []
    results: list[dict] = []
    try:
        pythons = []
        checked_out: dict[str, tuple[str, Path, bool]] = {}  # one worktree a commit, whatever its interpreters
        for spec in a.trees.split(","):
            ref, python = interpreter(spec.strip())
            if ref not in checked_out:
                checked_out[ref] = checkout(ref, tmp)
            label, where, temporary = checked_out[ref]
            trees.append((label + python_label(python), where, temporary))
            pythons.append(python)
        base = dict(os.environ)
        for k in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
            base.pop(k, None)
        base.update(CHILD_ENV)
        for item in a.env:
            name, _, value = item.partition("=")
            base[name] = value
        # connections idle for long under valgrind stay open (a closed pooled one fails a request)
        mock_url = start_mock(group, None, base, tmp, "--keep-alive", "3600")
        portals: list[tuple[str, Path, dict, str]] = []
        for i, (label, where, _tmp) in enumerate(trees):
            data = tmp / f"data-{i}"
            env = embedded_env(dict(base, PORTAL_DATA_DIR=str(data)), data, group)
            env["GATEWAY_REDIS_NAMESPACE"] = f"gwcpu{i}"
            env["GWCPU_PYTHON"] = pythons[i]
            key = prepare_portal(mock_url + "/v1", env, root=where)
            portals.append((label, where, env, key))
            print(f"{label}: {where}, embedded portal in {data}")
        helper = None
        if a.callgrind:
            (tmp / "cg.c").write_text(CALLGRIND_HELPER)
            helper = tmp / "cg.so"
            subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(helper), str(tmp / "cg.c")], check=True)
        modes = [m for m in a.modes.split(",") if m]
        if a.profile:  # runs of their own: the profiler's overhead is in no figure below
            Path(a.profile).mkdir(parents=True, exist_ok=True)
            for mode in modes:
                for label, where, env, key in portals:
                    name = re.sub(r"[^\w.-]+", "_", label)
                    prof = Path(a.profile).resolve() / f"{name}-{mode}.prof"
                    run_child(
                        where, dict(env, GWCPU_PROFILE=str(prof)), key, mode, a, requests=a.requests, valgrind=None
                    )
                    print(f"  profile {prof}")
        for rep in range(a.repeats):
            order = portals if rep % 2 == 0 else portals[::-1]
            for mode in modes:
                for label, where, env, key in order:
                    r = run_child(where, env, key, mode, a, requests=a.requests, valgrind=None)
                    r.update(tree=label, mode=mode, kind="cpu", rep=rep)
                    results.append(r)
                    print(
                        f"  cpu  rep {rep + 1} {mode:<6} {label:<22} {r['cpu_ms_per_req']:.3f} ms/req "
                        f"(user {r['user_ms_per_req']:.3f}, sys {r['sys_ms_per_req']:.3f}, "
                        f"loop thread {r['loop_ms_per_req']:.3f}; {r['wall_s']:.1f} s wall)"
                        + "".join(f"; {k} {v:.2f}" for k, v in r.items() if k in SYSCALL_NAMES),
                        flush=True,
                    )
        # Instruction counts do not depend on the load: these runs go `--jobs` at a time.
        runs = [
            (rep, mode, label, where, env, key)
            for rep in range(a.callgrind_repeats if a.callgrind else 0)
            for mode in modes
            for label, where, env, key in portals
        ]

        def callgrind_run(n: int) -> dict:
            rep, mode, label, where, env, key = runs[n]
            out = tmp / f"cg-{n}"
            out.mkdir()
            valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}/cg.%p"]
            env = dict(env, GWCPU_CALLGRIND_HELPER=str(helper))
            r = run_child(
                where, env, key, mode, a, requests=a.callgrind, valgrind=valgrind, warm_up=a.callgrind_warm_up
            )
            r.update(tree=label, mode=mode, kind="callgrind", rep=rep)
            r["instructions_per_req"] = callgrind_total(out) / a.callgrind
            print(f"  Ir   rep {rep + 1} {mode:<6} {label:<22} {r['instructions_per_req'] / 1e6:.3f} M/req", flush=True)
            if a.keep_callgrind:
                name = re.sub(r"[^\w.-]+", "_", label)
                keep = Path(a.keep_callgrind) / f"{name}-{mode}-{rep}"
                shutil.copytree(out, keep, dirs_exist_ok=True)
            return r

        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            results += list(pool.map(callgrind_run, range(len(runs))))
        print(f"\nmin / median / max over repeats; c={a.conc}, {a.tokens} tokens, embedded portal, in-process ASGI")
        # User and kernel time apart: a stream's events arrive as TCP segments of their own, and on
        # loopback the kernel's share of receiving them is charged to the gateway (issue 24's note).
        print(
            "| mode | commit | CPU ms/req | × first | user ms (× first) | kernel ms (× first)"
            " | M instructions/req | × first |"
        )
        print("|---|---|--:|--:|--:|--:|--:|--:|")

        def of(label: str, mode: str, kind: str, name: str, scale: float = 1.0) -> list[float]:
            return [r[name] / scale for r in results if r["tree"] == label and r["mode"] == mode and r["kind"] == kind]

        for mode in modes:
            firsts: dict[str, float] = {}  # each column's median for the first commit that has it

            for label, *_ in portals:
                cells = [
                    *cell(firsts, "cpu", of(label, mode, "cpu", "cpu_ms_per_req"), spread_of=True),
                    *cell(firsts, "user", of(label, mode, "cpu", "user_ms_per_req"), spread_of=False),
                    *cell(firsts, "sys", of(label, mode, "cpu", "sys_ms_per_req"), spread_of=False),
                    *cell(firsts, "ir", of(label, mode, "callgrind", "instructions_per_req", 1e6), spread_of=True),
                ]
                print(f"| {mode} | {label} | {' | '.join(cells)} |")
        # The machine's speed drifts over a run (a shared VM: the same commit 0.43-0.72 ms in one
        # run), more than the 15 % a goal asks to resolve; each repeat runs the commits back to
        # back, so the ratio within a repeat cancels the drift that the medians above keep.
        for mode in modes:
            for label, *_ in portals[1:]:
                pairs = paired_ratios(results, portals[0][0], label, mode)
                if len(pairs) >= 4:
                    q1, q2, q3 = statistics.quantiles(pairs, n=4)
                    print(
                        f"{mode} {label} ÷ {portals[0][0]}, CPU time paired within each of {len(pairs)} repeats: "
                        f"median {q2:.3f}, quartiles {q1:.3f}-{q3:.3f}"
                    )
        if a.out:
            Path(a.out).write_text(json.dumps(results, indent=1))
    finally:
        group.stop_all()
        for _label, where, temporary in trees:
            if temporary:
                subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
