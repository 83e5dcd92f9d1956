#!/usr/bin/env python3
"""Session affinity benchmark: a coding-agent trace through the gateway to two replicas with a
prefix cache, under each balancing policy (weighted random, affinity, least busy), in one run.

    uv run python bench/affinity_bench.py                       # ~10 minutes: 3 upstreams x 3 policies x 3 repeats
    uv run python bench/affinity_bench.py --upstreams vllm --repeats 5 --seed 7
    uv run python bench/affinity_bench.py --trace unique --upstreams llamacpp-real --speed 1   # the old best case

The trace (`make_trace`, the same for every policy of a repeat: `--seed` plus the repeat):
  - `agent` (the default, what Claude Code, Cline and Codex send): every session starts with one
    shared system prompt (~6k tokens) and tool list (24 tools, ~6k tokens), then its own first
    request (~150 tokens), and grows its own history turn by turn: the answer (lognormal, median
    150 tokens) and a tool's output (lognormal, median 500 tokens, up to 12k). Between turns the
    agent thinks and runs the tool (lognormal, median 2 s). `--sessions` agents (8) start over the
    first 30 s and take 8-24 turns each (`--turns` 16 on average), so by their last turn the prompt
    is ~30k tokens, of which 12k are shared by all.
  - `unique` (the benchmark's first trace, the best case for affinity): each session's system prompt
    is its own from the first token, answers are 4 tokens, ~150 tokens per turn, no think time.

The upstreams (two replicas each, `prefix_cache_upstream.py`, fakes whose time to first token is the
prefill of the tokens their cache does not hold, at 5,000 tokens/s shared by the prefills running
on a replica, answers at 40 tokens/s; `--speed` 10 replays ten times faster than that):
  - `llamacpp-np4`: llama.cpp `-np 4`, each slot keeps its last prompt, no RAM cache (`--cache-ram 0`);
  - `llamacpp-np4-ram`: the same with llama.cpp's RAM prompt cache (`--cache-ram`, 8 GiB: ~85k
    tokens of a 30B model's KV at ~100 KB a token);
  - `llamacpp-np1`: one slot (the old default), requests queue behind each other;
  - `vllm`: vLLM's automatic prefix caching, 64 sequences, 200k tokens of KV cache;
  - `vllm-small`: the same with 60k tokens of KV cache (a big model on a small GPU);
  - `nocache`: no prefix cache at all (the floor);
  - `llamacpp-real`: the suite's real llama.cpp server (xllamacpp) on a tiny generated GGUF, `-np 2`,
    one thread each; use `--speed 1` and a small trace (`--system-tokens 1500 --tools 0`).

It starts the embedded portal (SQLite and the embedded Redis, as `portal up`) with one public model
per upstream and policy routed to that upstream's two replicas, one gateway (uvicorn), and replays
the trace through it with httpx. Per run: TTFT (client side, through the gateway, to the first
streamed token, in the trace's time: the replica's modelled waits, which it reports, times
`--speed`, plus the rest as measured: the gateway, the client and the fake's own parsing, whose
median is printed as "overhead") p50 / p95 / mean, the same p50 without that real-time part
("replica-side": the replica's queue and prefill only, which this machine's load does not move),
the prefix cache hit ratio from the replicas' own `timings` (cache_n / (cache_n + prompt_n)) and
the prompt tokens prefilled (the replicas' work, which does not depend on this machine's load).
Then per upstream the spread (min / median / max) over repeats and each baseline over affinity in
the same repeat.

Every process it starts runs in its own process group and is stopped by that group's id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
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

from gateway_bench import Group, embedded_env, free_port, uvicorn_argv, wait_http  # noqa: E402

POLICIES = ("weighted", "affinity", "least_busy")

# name: (channel kind, arguments of prefix_cache_upstream.py); "llamacpp-real" starts llama.cpp itself.
UPSTREAMS: dict[str, tuple[str, list[str]]] = {
    "llamacpp-np4": ("llamacpp", ["--cache", "slots", "--slots", "4"]),
    "llamacpp-np4-ram": ("llamacpp", ["--cache", "slots", "--slots", "4", "--ram-tokens", "85000"]),
    "llamacpp-np1": ("llamacpp", ["--cache", "slots", "--slots", "1"]),
    "vllm": ("vllm", ["--cache", "blocks", "--slots", "64", "--cache-tokens", "200000"]),
    "vllm-small": ("vllm", ["--cache", "blocks", "--slots", "64", "--cache-tokens", "60000"]),
    "nocache": ("vllm", ["--cache", "none", "--slots", "64"]),
    "llamacpp-real": ("llamacpp", []),
}
CHARS_PER_TOKEN = 4  # the fakes' tokens (prefix_cache_upstream.py)


# --------------------------------------------------------------------------------- the trace


@dataclass
class Step:
    answer_tokens: int
    tool_chars: int
    think_s: float


@dataclass
class Plan:
    start_s: float
    opening_chars: int
    steps: list[Step]


@dataclass
class Trace:
    system_chars: int
    tools: int
    shared: bool  # one system prompt and tool list for every session
    sessions: list[Plan]


def lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(rng.gauss(0.0, sigma))))


def make_trace(kind: str, seed: int, a: argparse.Namespace) -> Trace:
    """The sessions' shapes (sizes and times, not text), the same for every policy of a repeat."""
    rng = random.Random(f"{kind}-{seed}")
    sessions = []
    for _ in range(a.sessions):
        if kind == "unique":
            steps = [Step(4, 150 * CHARS_PER_TOKEN, 0.0) for _ in range(a.turns)]
            sessions.append(Plan(0.0, 150 * CHARS_PER_TOKEN, steps))
            continue
        n = rng.randint(max(1, a.turns // 2), a.turns * 3 // 2)
        steps = [
            Step(
                round(lognormal(rng, 150, 0.9, 10, 2000)),
                round(lognormal(rng, 500, 1.1, 10, 12000)) * CHARS_PER_TOKEN,
                lognormal(rng, 2.0, 1.0, 0.2, 30.0),
            )
            for _ in range(n)
        ]
        opening = round(lognormal(rng, 150, 0.7, 20, 2000)) * CHARS_PER_TOKEN
        sessions.append(Plan(rng.uniform(0, a.stagger), opening, steps))
    if kind == "unique":
        return Trace(2500 * CHARS_PER_TOKEN, 0, False, sessions)
    return Trace(a.system_tokens * CHARS_PER_TOKEN, a.tools, True, sessions)


def words(rng: random.Random, n: int) -> str:
    """About `n` characters of random lowercase words."""
    out: list[str] = []
    size = 0
    while size < n:
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def tool_list(rng: random.Random, n: int) -> list[dict]:
    """`n` function tools of ~250 tokens each (an agent's read/edit/run/search tools)."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}_" + "".join(rng.choice(string.ascii_lowercase) for _ in range(6)),
                "description": words(rng, 500),
                "parameters": {
                    "type": "object",
                    "properties": {f"arg{j}": {"type": "string", "description": words(rng, 80)} for j in range(5)},
                    "required": ["arg0"],
                },
            },
        }
        for i in range(n)
    ]


# --------------------------------------------------------------------------------- the replay


@dataclass
class Turn:
    session: int
    ttft_ms: float  # in the trace's time
    overhead_ms: float  # of it, real time outside the replica's modelled waits
    cache_n: int
    prompt_n: int


@dataclass
class Run:
    upstream: str
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
    def mean(self) -> float:
        return statistics.fmean(t.ttft_ms for t in self.turns) if self.turns else float("nan")

    def replica_pct(self, q: float) -> float:
        """TTFT percentile without the real-time part: the replica's queue and prefill only."""
        values = sorted(t.ttft_ms - t.overhead_ms for t in self.turns)
        if not values:
            return float("nan")
        return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]

    @property
    def overhead(self) -> float:
        return statistics.median(t.overhead_ms for t in self.turns) if self.turns else float("nan")

    @property
    def hit_ratio(self) -> float:
        cached = sum(t.cache_n for t in self.turns)
        total = cached + sum(t.prompt_n for t in self.turns)
        return cached / total if total else 0.0

    @property
    def prefilled(self) -> int:
        return sum(t.prompt_n for t in self.turns)


async def session(client, gw: str, key: str, model: str, n: int, plan: Plan, head: list[dict], tools, rng, a, run: Run):
    await asyncio.sleep(plan.start_s / a.speed)
    messages = [*head, {"role": "user", "content": "Fix the failing test. " + words(rng, plan.opening_chars)}]
    for step in plan.steps:
        body = {
            "model": model,
            "messages": messages,
            "max_tokens": step.answer_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,
            "temperature": 0,
        }
        if tools:
            body["tools"] = tools
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
                    print(f"  {model}: HTTP {r.status_code} {r.text[:200]}", flush=True)
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
            print(f"  {model}: {exc!r}", flush=True)
            return
        measured = ttft if ttft is not None else (time.perf_counter() - started) * 1000
        # The replica's modelled waits ran `--speed` times faster than the trace; the rest (the
        # gateway, the client, the fake's own parsing) is real time, counted as it was.
        waited = float(timings.get("waited_ms", measured))  # a real llama.cpp: all of it is real
        overhead = max(0.0, measured - waited)
        run.turns.append(
            Turn(
                n,
                overhead + waited * a.speed,
                overhead,
                int(timings.get("cache_n", 0)),
                int(timings.get("prompt_n", 0)),
            )
        )
        messages = [
            *messages,
            {"role": "assistant", "content": "".join(text)},
            {"role": "user", "content": "Tool output:\n" + words(rng, step.tool_chars)},
        ]
        await asyncio.sleep(step.think_s / a.speed)


async def replay(gw: str, key: str, upstream: str, policy: str, repeat: int, trace: Trace, a) -> Run:
    """One run of `trace`. Its text is new (a salt first), so no run finds another's prefixes."""
    import httpx

    run = Run(upstream, policy, repeat)
    salt = random.Random(f"{upstream}-{policy}-{repeat}-{os.getpid()}")
    run_id = "".join(salt.choice(string.ascii_lowercase) for _ in range(12))
    text = random.Random(f"{a.seed}-{repeat}")  # the same shared text for every policy, after the salt
    shared_system = f"[{run_id}] You are a coding agent.\n" + words(text, trace.system_chars)
    tools = tool_list(text, trace.tools)
    heads = []
    for n in range(len(trace.sessions)):
        system = (
            shared_system
            if trace.shared
            else f"[{run_id}-{n}] You are a coding agent.\n" + words(text, trace.system_chars)
        )
        heads.append([{"role": "system", "content": system}])
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=len(trace.sessions) * 2)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await asyncio.gather(
            *(
                session(
                    client,
                    gw,
                    key,
                    f"{upstream}-{policy}",
                    n,
                    plan,
                    heads[n],
                    tools,
                    random.Random(f"{a.seed}-{repeat}-{n}"),
                    a,
                    run,
                )
                for n, plan in enumerate(trace.sessions)
            )
        )
    run.seconds = time.perf_counter() - started
    return run


# --------------------------------------------------------------------------------- setup


def prepare_portal(upstreams: dict[str, tuple[str, list[str]]], env: dict) -> str:
    """Migrate; per upstream its two replicas as channels, one model per policy routed to both; a key."""
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
for name, (kind, urls) in {upstreams!r}.items():
    channels = [Channel.objects.update_or_create(name=f"{{name}}-{{i}}", defaults=dict(kind=kind, base_url=url,
        status="healthy", enabled=True, probe_inference=False))[0] for i, url in enumerate(urls)]
    for policy in {list(POLICIES)!r}:
        m, _ = Model.objects.update_or_create(name=f"{{name}}-{{policy}}", defaults=dict(balance=policy))
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


def start_replicas(name: str, group: Group, base: dict, tmp: Path, a) -> list[str]:
    """Two replicas of upstream `name`; their base URLs once they answer."""
    urls = []
    for i in range(2):
        port = free_port()
        if name == "llamacpp-real":
            from tests.fakes.tinygguf import write_tiny_gguf

            model = write_tiny_gguf(
                Path(tempfile.gettempdir()) / f"portal-bench-{os.getuid()}" / "affinity-128x4.gguf",
                n_embd=128, n_layer=4, n_ff=384, context_length=65536,
            )  # fmt: skip
            argv = [sys.executable, "-m", "tests.fakes.llamacpp", "-m", str(model), "-c", str(a.ctx), "-np", "2"]
            argv += ["-t", "1", "--host", "127.0.0.1", "--port", str(port), "-a", "bench", "--jinja", "-lv", "1"]
            cpus = str(i % (os.cpu_count() or 1))
        else:
            argv = [
                sys.executable,
                str(HERE / "prefix_cache_upstream.py"),
                "--port",
                str(port),
                "--speed",
                str(a.speed),
            ]
            argv += UPSTREAMS[name][1]
            cpus = None
        proc = group.start(argv, cpus, base, tmp / f"{name}-{i}.log")
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/health", proc, timeout=120)
        urls.append(url + "/v1")
    return urls


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    if not values:
        return "-"
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def report(runs: list[Run], upstreams: list[str], policies: list[str]) -> None:
    print()
    print(
        "| upstream | policy | TTFT p50 ms (min / median / max) | TTFT p95 ms | TTFT mean ms | cache hit "
        "| tokens prefilled | errors |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for up in upstreams:
        for policy in policies:
            mine = [r for r in runs if r.upstream == up and r.policy == policy]
            print(
                f"| {up} | {policy} | {spread([r.pct(0.5) for r in mine])} | {spread([r.pct(0.95) for r in mine])} "
                f"| {spread([r.mean for r in mine])} | {spread([r.hit_ratio * 100 for r in mine], '{:.0f}%')} "
                f"| {spread([r.prefilled / 1000 for r in mine], '{:,.0f}k')} | {sum(r.errors for r in mine)} |"
            )
    if "affinity" not in policies:
        return
    print()
    print(
        "| upstream | baseline | baseline p50 ÷ affinity p50, per repeat | p95 ÷ | mean ÷ | replica-side p50 ÷ "
        "| tokens prefilled ÷ |"
    )
    print("|---|---|--:|--:|--:|--:|--:|")
    for up in upstreams:
        for policy in policies:
            if policy == "affinity":
                continue
            pairs = [
                (b, f)
                for b in runs
                if b.upstream == up and b.policy == policy
                for f in runs
                if f.upstream == up and f.policy == "affinity" and f.repeat == b.repeat
            ]

            def ratios(get, pairs=pairs) -> str:
                return ", ".join(f"{get(b) / get(f):.2f}×" if get(f) else "-" for b, f in pairs)

            print(
                f"| {up} | {policy} | {ratios(lambda r: r.pct(0.5))} | {ratios(lambda r: r.pct(0.95))} "
                f"| {ratios(lambda r: r.mean)} | {ratios(lambda r: r.replica_pct(0.5))} "
                f"| {ratios(lambda r: r.prefilled)} |"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", choices=("agent", "unique"), default="agent")
    ap.add_argument("--upstreams", default="llamacpp-np4,llamacpp-np4-ram,vllm", help=", ".join(UPSTREAMS))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seed", type=int, default=1, help="the trace of repeat r is the seed's + r")
    ap.add_argument("--sessions", type=int, default=8, help="agent sessions over the run")
    ap.add_argument("--turns", type=int, default=16, help="turns per session (agent: 1/2 to 3/2 of it)")
    ap.add_argument("--stagger", type=float, default=30.0, help="seconds over which sessions start (agent)")
    ap.add_argument("--system-tokens", type=int, default=6000, help="shared system prompt, without the tools")
    ap.add_argument("--tools", type=int, default=24, help="tools in the shared tool list (~250 tokens each)")
    ap.add_argument("--speed", type=float, default=10.0, help="replay this many times faster than the trace")
    ap.add_argument("--ctx", type=int, default=65536, help="llamacpp-real's context")
    ap.add_argument("--out", default="", help="write every turn as JSON here")
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p]
    upstreams = [u for u in a.upstreams.split(",") if u]
    for up in upstreams:
        if up not in UPSTREAMS:
            raise SystemExit(f"unknown upstream {up!r}: {', '.join(UPSTREAMS)}")
    group = Group()
    tmp = Path(tempfile.mkdtemp(prefix="affinity-bench-"))
    base = dict(os.environ)
    base["GATEWAY_REDIS_NAMESPACE"] = "gwaff-" + str(os.getpid())
    base["PORTAL_LOG_LEVEL"] = "WARNING"
    base["PYTHONPATH"] = str(ROOT)
    t0 = time.perf_counter()
    try:
        replicas = {up: (UPSTREAMS[up][0], start_replicas(up, group, base, tmp, a)) for up in upstreams}
        env = embedded_env(base, tmp / "data", group)
        key = prepare_portal(replicas, env)
        port = free_port()
        gw_proc = group.start(uvicorn_argv(port), None, env, tmp / "gateway.log")
        gw = f"http://127.0.0.1:{port}"
        wait_http(gw + "/v1/models", gw_proc)
        traces = [make_trace(a.trace, a.seed + rep, a) for rep in range(a.repeats)]
        turns = [sum(len(p.steps) for p in t.sessions) for t in traces]
        print(
            f"trace {a.trace}, seed {a.seed}: {a.sessions} sessions, {min(turns)}-{max(turns)} turns a repeat, "
            f"speed x{a.speed:g}; upstreams {', '.join(upstreams)}; ready after {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        runs: list[Run] = []
        for rep in range(a.repeats):
            for up in upstreams:
                order = policies[rep % len(policies) :] + policies[: rep % len(policies)]
                for policy in order:
                    run = asyncio.run(replay(gw, key, up, policy, rep, traces[rep], a))
                    runs.append(run)
                    print(
                        f"repeat {rep + 1} {up:17s} {policy:10s} turns {len(run.turns):3d} errors {run.errors} "
                        f"TTFT p50 {run.pct(0.5):6.0f} ms p95 {run.pct(0.95):6.0f} ms mean {run.mean:6.0f} ms "
                        f"cache hit {run.hit_ratio:5.1%} prefilled {run.prefilled:,} "
                        f"overhead p50 {run.overhead:.0f} ms in {run.seconds:5.1f} s",
                        flush=True,
                    )
        report(runs, upstreams, policies)
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")
        if a.out:
            Path(a.out).write_text(json.dumps([r.__dict__ | {"turns": [t.__dict__ for t in r.turns]} for r in runs]))
    finally:
        group.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
