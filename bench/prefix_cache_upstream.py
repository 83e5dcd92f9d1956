#!/usr/bin/env python3
"""A fake inference server whose time to first token follows its prefix cache, for balancing
benchmarks (`affinity_bench.py`): only the prompt tokens its cache does not hold are prefilled.

    python bench/prefix_cache_upstream.py --port 18001 --cache slots --slots 4 --ram-tokens 85000
    python bench/prefix_cache_upstream.py --port 18002 --cache blocks --slots 64 --cache-tokens 200000

The prompt is the rendered request (the tool list, then each message's role and content) and a
token is 4 of its characters. The caches, one per server, as the real servers keep them:
- `slots` (llama.cpp, `-np N`): each slot keeps the prompt it last served and its answer. A request
  takes the idle slot sharing the longest prefix with it when that prefix is at least
  `--slot-similarity` of the slot's content (llama.cpp's `--slot-prompt-similarity`), else the least
  recently used idle slot. With `--ram-tokens` (llama.cpp's `--cache-ram`), a slot's content is
  saved to a RAM cache of that many tokens (least recently used out) when the slot takes a prompt
  that does not extend it, and a request that matches a saved prompt better than its slot gets it
  back for free.
- `blocks` (vLLM's automatic prefix caching, SGLang's radix cache): 16-token blocks, each named by
  its whole prefix, shared by every request, least recently used out past `--cache-tokens`.
- `none`: every prompt is prefilled in full.

Compute: at most `--slots` requests run at once, the others wait in arrival order; the prefills
running at the same time share `--prefill-tps` tokens per second; each running answer streams at
`--decode-tps`, sent every 50 ms (not per token, so the gateway is not the bottleneck). Decoding
does not slow prefill down (a simplification: on a real GPU it does a little). `--speed` divides
every modelled duration, so a trace of minutes replays in seconds.

The stream ends with OpenAI usage (`prompt_tokens_details.cached_tokens`) and llama.cpp's
`timings` (`cache_n`, `prompt_n`, `prompt_ms` in the trace's time), plus `waited_ms`: the wall
time this request spent in modelled waits (a slot, the prefill), which a client scales back up.
It only ever binds to a loopback address.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from collections import OrderedDict
from dataclasses import dataclass

import orjson
from aiohttp import web

CHARS_PER_TOKEN = 4
BLOCK_CHARS = 16 * CHARS_PER_TOKEN
SEND_EVERY = 0.05  # seconds of wall time between streamed chunks


def tokens(chars: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN)


def render(body: dict) -> str:
    """The prompt as the server sees it: the tools, then each message (a chat template's job)."""
    parts = [orjson.dumps(body["tools"]).decode()] if body.get("tools") else []
    for m in body.get("messages") or ():
        content = m.get("content")
        if not isinstance(content, str):
            content = orjson.dumps(content).decode()
        parts.append(f"<|{m.get('role')}|>{content}<|end|>")
    return "".join(parts)


def answered(prompt: str, answer: str) -> str:
    """What the server holds after answering: the prompt and the answer as the next turn sends it."""
    return prompt + f"<|assistant|>{answer}<|end|>"


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of `a` and `b` (a binary search over C-speed slice compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class Slot:
    index: int
    text: str = ""
    used: float = 0.0
    busy: bool = False


class SlotCache:
    """llama.cpp's slots, with its RAM prompt cache when `ram_tokens` > 0."""

    def __init__(self, slots: int, similarity: float, ram_tokens: int) -> None:
        self.slots = [Slot(i) for i in range(slots)]
        self.similarity = similarity
        self.ram_tokens = ram_tokens
        self.ram: OrderedDict[str, None] = OrderedDict()
        self.ram_size = 0

    def take(self, prompt: str) -> tuple[Slot, int]:
        """An idle slot for `prompt` and the characters of it already cached there."""
        idle = [s for s in self.slots if not s.busy]
        best = max(idle, key=lambda s: common_prefix(s.text, prompt))
        shared = common_prefix(best.text, prompt)
        if not best.text or shared < self.similarity * len(best.text):
            best = min(idle, key=lambda s: s.used)
            shared = common_prefix(best.text, prompt)
        if self.ram_tokens:
            saved, saved_shared = None, shared
            for text in self.ram:
                n = common_prefix(text, prompt)
                if n > saved_shared:
                    saved, saved_shared = text, n
            if saved is not None:  # restored into the slot (before the save below can evict it)
                self.ram.pop(saved)
                self.ram_size -= len(saved)
            if shared < len(best.text):  # the slot takes a prompt that does not extend it: keep its state
                self._save(best.text)
            if saved is not None:
                shared = saved_shared
        best.busy = True
        return best, shared

    def done(self, slot: Slot, text: str) -> None:
        slot.text, slot.used, slot.busy = text, time.monotonic(), False

    def _save(self, text: str) -> None:
        if not text or text in self.ram:
            return
        self.ram[text] = None
        self.ram_size += len(text)
        while self.ram and self.ram_size > self.ram_tokens * CHARS_PER_TOKEN:
            old, _ = self.ram.popitem(last=False)
            self.ram_size -= len(old)


class BlockCache:
    """vLLM's automatic prefix caching: full blocks named by their whole prefix, LRU."""

    def __init__(self, cache_tokens: int) -> None:
        self.capacity = max(1, cache_tokens * CHARS_PER_TOKEN // BLOCK_CHARS)
        self.blocks: OrderedDict[int, None] = OrderedDict()

    @staticmethod
    def _names(text: str) -> list[int]:
        names, name = [], 0
        for start in range(0, len(text) - BLOCK_CHARS + 1, BLOCK_CHARS):
            name = hash((name, text[start : start + BLOCK_CHARS]))
            names.append(name)
        return names

    def lookup(self, prompt: str) -> int:
        hit = 0
        for name in self._names(prompt):
            if name not in self.blocks:
                break
            self.blocks.move_to_end(name)
            hit += 1
        return hit * BLOCK_CHARS

    def store(self, text: str) -> None:
        for name in self._names(text):
            self.blocks[name] = None
            self.blocks.move_to_end(name)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)


class Prefill:
    """Processor sharing: the prefills in progress split `rate` tokens per second evenly."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.jobs: dict[asyncio.Future[None], float] = {}
        self.last = time.monotonic()
        self.wake = asyncio.Event()

    def _advance(self) -> None:
        now = time.monotonic()
        if self.jobs:
            share = (now - self.last) * self.rate / len(self.jobs)
            for fut in list(self.jobs):
                self.jobs[fut] -= share
                if self.jobs[fut] <= 1e-6:
                    del self.jobs[fut]
                    fut.set_result(None)
        self.last = now

    async def run(self, n_tokens: int) -> None:
        self._advance()
        fut = asyncio.get_running_loop().create_future()
        self.jobs[fut] = float(n_tokens)
        self.wake.set()
        await fut

    async def loop(self) -> None:
        while True:
            self.wake.clear()
            if not self.jobs:
                await self.wake.wait()
                self._advance()
                continue
            wait = min(self.jobs.values()) * len(self.jobs) / self.rate
            try:
                await asyncio.wait_for(self.wake.wait(), wait)
            except TimeoutError:
                pass
            self._advance()


class Server:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.kind = a.cache
        self.slots = SlotCache(a.slots, a.slot_similarity, a.ram_tokens if a.cache == "slots" else 0)
        self.blocks = BlockCache(a.cache_tokens) if a.cache == "blocks" else None
        self.running = asyncio.Semaphore(a.slots)
        self.prefill = Prefill(a.prefill_tps * a.speed)
        self.served = 0

    def _cached(self, prompt: str) -> tuple[Slot, int]:
        slot, shared = self.slots.take(prompt)
        if self.kind == "blocks":
            shared = self.blocks.lookup(prompt)
        elif self.kind == "none":
            shared = 0
        return slot, shared

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json(loads=orjson.loads)
        prompt = render(body)
        n_answer = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        model = body.get("model", "fake")
        created = int(time.time())
        cid = f"chatcmpl-{self.served}"
        self.served += 1
        rng = random.Random(len(prompt) * 7919 + self.served)
        pieces = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3)) + " " for _ in range(n_answer)]
        queued = time.monotonic()
        async with self.running:
            waited = time.monotonic() - queued
            slot, shared = self._cached(prompt)
            prompt_n = max(1, tokens(len(prompt)) - shared // CHARS_PER_TOKEN)  # llama.cpp always runs one
            cache_n = tokens(len(prompt)) - prompt_n
            started = time.monotonic()
            try:
                await self.prefill.run(prompt_n)
                prefill = time.monotonic() - started
                prompt_ms = prefill * 1000 * self.a.speed
                stream = bool(body.get("stream"))
                usage = {
                    "prompt_tokens": cache_n + prompt_n,
                    "completion_tokens": n_answer,
                    "total_tokens": cache_n + prompt_n + n_answer,
                    "prompt_tokens_details": {"cached_tokens": cache_n},
                }
                # `waited_ms`: wall time spent waiting for a slot and in the modelled prefill (what
                # `--speed` shrinks); the rest of a client's time to first token is real work.
                timings = {
                    "cache_n": cache_n,
                    "prompt_n": prompt_n,
                    "prompt_ms": prompt_ms,
                    "predicted_n": n_answer,
                    "waited_ms": (waited + prefill) * 1000,
                }
                if not stream:
                    await asyncio.sleep(n_answer / (self.a.decode_tps * self.a.speed))
                    return web.json_response(
                        {
                            "id": cid,
                            "object": "chat.completion",
                            "created": created,
                            "model": model,
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": "".join(pieces)},
                                    "finish_reason": "length",
                                }
                            ],
                            "usage": usage,
                            "timings": timings,
                        },
                        dumps=lambda o: orjson.dumps(o).decode(),
                    )
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
                await resp.prepare(request)

                def event(obj: dict) -> bytes:
                    return b"data: " + orjson.dumps(obj) + b"\n\n"

                def chunk(delta: dict, finish: str | None = None) -> dict:
                    return {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }

                await resp.write(event(chunk({"role": "assistant", "content": pieces[0]})))
                first, sent = time.monotonic(), 1
                rate = self.a.decode_tps * self.a.speed
                while sent < n_answer:
                    await asyncio.sleep(SEND_EVERY)
                    due = min(n_answer, 1 + int((time.monotonic() - first) * rate))
                    if due > sent:
                        await resp.write(event(chunk({"content": "".join(pieces[sent:due])})))
                        sent = due
                last = chunk({}, "length") | {"usage": usage, "timings": timings}
                await resp.write(event(last) + b"data: [DONE]\n\n")
                await resp.write_eof()
                return resp
            finally:
                text = answered(prompt, "".join(pieces))
                self.slots.done(slot, text)
                if self.blocks is not None:
                    self.blocks.store(text)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "bench", "object": "model", "owned_by": "bench"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await request.json(loads=orjson.loads)
        text = body.get("content") or body.get("prompt") or ""
        return web.json_response({"count": tokens(len(text))})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cache", choices=("slots", "blocks", "none"), default="slots")
    ap.add_argument("--slots", type=int, default=4, help="requests running at once (llama.cpp -np, vLLM max_num_seqs)")
    ap.add_argument("--slot-similarity", type=float, default=0.1)
    ap.add_argument("--ram-tokens", type=int, default=0, help="llama.cpp's RAM prompt cache, in tokens (0: none)")
    ap.add_argument("--cache-tokens", type=int, default=200_000, help="the blocks cache's size, in tokens")
    ap.add_argument("--prefill-tps", type=float, default=5000.0)
    ap.add_argument("--decode-tps", type=float, default=40.0)
    ap.add_argument("--speed", type=float, default=1.0)
    a = ap.parse_args()
    if a.host not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("this fake only binds to a loopback address")

    async def make() -> web.Application:
        server = Server(a)  # inside the loop: its events belong to it
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", server.chat)
        app.router.add_get("/v1/models", server.models)
        app.router.add_get("/health", server.health)
        app.router.add_post("/tokenize", server.tokenize)

        async def start(app: web.Application) -> None:
            app["prefill"] = asyncio.get_running_loop().create_task(server.prefill.loop())

        app.on_startup.append(start)
        return app

    web.run_app(make(), host=a.host, port=a.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
