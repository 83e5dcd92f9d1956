#!/usr/bin/env python3
"""Session affinity benchmark: coding-agent sessions through the gateway to two real llama.cpp
replicas with prompt caching on, under each balancing policy, in one run.

    uv run python bench/affinity_bench.py [--repeats 3] [--sessions 6] [--turns 8]

What it does, all on 127.0.0.1:
  1. writes a generated llama GGUF big enough that prefill is most of the time to first token
     (`tests/fakes/tinygguf.py` at n_embd 128, 4 layers: an uncached 3k-token prompt takes ~1 s on one
     loaded thread, a cached turn a few hundred ms);
  2. starts two llama.cpp servers on it (`tests/fakes/llamacpp.py`, the suite's xllamacpp server:
     llama.cpp's own HTTP server; prompt caching as shipped: `cache_prompt` on, 8 GiB RAM prompt
     cache, `-np 1`, one thread each, pinned one per CPU) as two replicas;
  3. prepares the embedded portal (SQLite + embedded Redis in a fresh data folder, as `portal up`):
     both replicas as llama.cpp channels at equal priority, one public model per policy (weighted,
     affinity, least_busy) routed to both, a developer key; starts one gateway (uvicorn);
  4. per repeat and policy (the order rotates each repeat), replays a trace of concurrent agent
     sessions: each session has its own long system prompt (its repository's context) and runs
     `--turns` turns one after another, each turn resending the whole conversation plus a new tool
     output (the prefix grows); all sessions run at once. Every run has fresh random text, so no
     run finds another's prefixes in a cache;
  5. per run: TTFT (client side, through the gateway, to the first streamed token) p50 / p95, the
     cache hit ratio from llama.cpp's own `timings` (cache_n / (cache_n + prompt_n): prompt tokens
     reused over all prompt tokens), and how the turns split over the replicas; then the spread
     (min / median / max) over repeats and weighted p50 / affinity p50 per repeat.

Every process it starts runs in its own process group and is stopped by that group's id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from gateway_bench import Group, embedded_env, free_port, wait_http  # noqa: E402

POLICIES = ("weighted", "affinity", "least_busy")


@dataclass
class Turn:
    ttft_ms: float
    cache_n: int
    prompt_n: int


@dataclass
class Run:
    policy: str
    repeat: int
    turns: list[Turn] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0

    def pct(self, q: float) -> float:
        values = sorted(t.ttft_ms for t in self.turns)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]

    @property
    def hit_ratio(self) -> float:
        cached = sum(t.cache_n for t in self.turns)
        total = cached + sum(t.prompt_n for t in self.turns)
        return cached / total if total else 0.0


def prepare_portal(replicas: list[str], env: dict) -> str:
    """Migrate; two llama.cpp channels, one model per policy routed to both, a key; print the key."""
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
channels = [Channel.objects.update_or_create(name=f"llama-{{i}}", defaults=dict(kind="llamacpp", base_url=url,
    status="healthy", enabled=True, probe_inference=False))[0] for i, url in enumerate({replicas!r})]
for policy in {list(POLICIES)!r}:
    m, _ = Model.objects.update_or_create(name="coder-" + policy, defaults=dict(balance=policy))
    for ch in channels:
        ModelRoute.objects.get_or_create(model=m, channel=ch, defaults=dict(upstream_model="bench"))
key, plain = issue_key(owner=user, name="bench")
print("KEY=" + plain)
"""
    p = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("KEY="):
            return line[4:]
    raise SystemExit("preparing the portal failed:\n" + p.stdout + p.stderr)


def words(rng: random.Random, n: int) -> str:
    """About `n` characters of random lowercase words (≈1 token a character for the tiny vocab)."""
    out: list[str] = []
    size = 0
    while size < n:
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


async def session(client, gw: str, key: str, policy: str, rng: random.Random, a, run: Run) -> None:
    name = "".join(rng.choice(string.ascii_lowercase) for _ in range(8))
    messages = [
        {"role": "system", "content": f"You are a coding agent in the repository {name}.\n" + words(rng, a.base_chars)},
        {"role": "user", "content": "Fix the failing test. " + words(rng, a.turn_chars)},
    ]
    for _ in range(a.turns):
        body = {
            "model": "coder-" + policy,
            "messages": messages,
            "max_tokens": a.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
            "temperature": 0,
        }
        started = time.perf_counter()
        ttft = None
        text: list[str] = []
        timings: dict = {}
        try:
            async with client.stream(
                "POST", gw + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            ) as r:
                if r.status_code != 200:
                    run.errors += 1
                    await r.aread()
                    print(f"  {policy}: HTTP {r.status_code} {r.text[:200]}", flush=True)
                    return
                async for line in r.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    data = json.loads(line[6:])
                    for choice in data.get("choices") or ():
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            if ttft is None:
                                ttft = (time.perf_counter() - started) * 1000
                            text.append(piece)
                    if data.get("timings"):
                        timings = data["timings"]
        except Exception as exc:  # a failed turn is counted and the session ends
            run.errors += 1
            print(f"  {policy}: {exc!r}", flush=True)
            return
        run.turns.append(
            Turn(
                ttft if ttft is not None else (time.perf_counter() - started) * 1000,
                int(timings.get("cache_n", 0)),
                int(timings.get("prompt_n", 0)),
            )
        )
        messages = [
            *messages,
            {"role": "assistant", "content": "".join(text)},
            {"role": "user", "content": "Tool output:\n" + words(rng, a.turn_chars)},
        ]


async def replay(gw: str, key: str, policy: str, repeat: int, a) -> Run:
    import httpx

    run = Run(policy, repeat)
    seed = random.Random(f"{os.getpid()}-{repeat}-{policy}")
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600) as client:
        await asyncio.gather(
            *(session(client, gw, key, policy, random.Random(seed.random()), a, run) for _ in range(a.sessions))
        )
    run.seconds = time.perf_counter() - started
    return run


def spread(values: list[float], fmt: str = "{:.0f}") -> str:
    if not values:
        return "-"
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=6, help="agent sessions running at once")
    ap.add_argument("--turns", type=int, default=6, help="turns per session")
    ap.add_argument("--base-chars", type=int, default=2500, help="system prompt size (≈ tokens)")
    ap.add_argument("--turn-chars", type=int, default=150, help="tool output added per turn (≈ tokens)")
    ap.add_argument("--max-tokens", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--out", default="", help="write every turn as JSON here")
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p]
    group = Group()
    tmp = Path(tempfile.mkdtemp(prefix="affinity-bench-"))
    base = dict(os.environ)
    base["GATEWAY_REDIS_NAMESPACE"] = "gwaff-" + str(os.getpid())
    base["PORTAL_LOG_LEVEL"] = "WARNING"
    base["PYTHONPATH"] = str(ROOT)
    t0 = time.perf_counter()
    try:
        from tests.fakes.tinygguf import write_tiny_gguf

        cache_dir = Path(tempfile.gettempdir()) / f"portal-bench-{os.getuid()}"
        model = write_tiny_gguf(
            cache_dir / f"affinity-{a.n_embd}x{a.n_layer}.gguf",
            n_embd=a.n_embd,
            n_layer=a.n_layer,
            n_ff=3 * a.n_embd,
            context_length=32768,
        )
        replicas = []
        for i in range(2):
            port = free_port()
            argv = [sys.executable, "-m", "tests.fakes.llamacpp", "-m", str(model), "-c", str(a.ctx)]
            argv += ["-np", "1", "-t", "1", "--host", "127.0.0.1", "--port", str(port), "-a", "bench", "--jinja"]
            argv += ["-lv", "1"]
            proc = group.start(argv, str(i % (os.cpu_count() or 1)), base, tmp / f"llama-{i}.log")
            replicas.append((f"http://127.0.0.1:{port}", proc))
        for url, proc in replicas:
            wait_http(url + "/health", proc, timeout=120)
        env = embedded_env(base, tmp / "data", group)
        key = prepare_portal([url + "/v1" for url, _ in replicas], env)
        port = free_port()
        gw_cmd = [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1"]
        gw_cmd += ["--port", str(port), "--no-access-log", "--log-level", "warning"]
        gw_proc = group.start(gw_cmd, None, env, tmp / "gateway.log")
        gw = f"http://127.0.0.1:{port}"
        wait_http(gw + "/v1/models", gw_proc)
        print(
            f"two llama.cpp replicas (n_embd {a.n_embd}, {a.n_layer} layers, -np 1, -t 1), "
            f"{a.sessions} sessions x {a.turns} turns, system prompt ~{a.base_chars} + ~{a.turn_chars} per turn; "
            f"ready after {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        runs: list[Run] = []
        for rep in range(a.repeats):
            order = policies[rep % len(policies) :] + policies[: rep % len(policies)]
            for policy in order:
                run = asyncio.run(replay(gw, key, policy, rep, a))
                runs.append(run)
                print(
                    f"repeat {rep + 1} {policy:10s} turns {len(run.turns):3d} errors {run.errors} "
                    f"TTFT p50 {run.pct(0.5):6.0f} ms p95 {run.pct(0.95):6.0f} ms "
                    f"cache hit {run.hit_ratio:5.1%} in {run.seconds:5.1f} s",
                    flush=True,
                )
        print()
        print("| policy | TTFT p50 ms (min / median / max) | TTFT p95 ms | cache hit ratio | errors |")
        print("|---|--:|--:|--:|--:|")
        for policy in policies:
            mine = [r for r in runs if r.policy == policy]
            print(
                f"| {policy} | {spread([r.pct(0.5) for r in mine])} | {spread([r.pct(0.95) for r in mine])} "
                f"| {spread([r.hit_ratio * 100 for r in mine], '{:.0f}%')} | {sum(r.errors for r in mine)} |"
            )
        if "weighted" in policies and "affinity" in policies:
            ratios = [
                w.pct(0.5) / f.pct(0.5)
                for w in runs
                if w.policy == "weighted"
                for f in runs
                if f.policy == "affinity" and f.repeat == w.repeat
            ]
            print(f"\nweighted p50 / affinity p50 per repeat: {', '.join(f'{r:.2f}x' for r in ratios)}")
        print(f"total {time.perf_counter() - t0:.0f} s")
        if a.out:
            Path(a.out).write_text(json.dumps([r.__dict__ | {"turns": [t.__dict__ for t in r.turns]} for r in runs]))
    finally:
        group.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
