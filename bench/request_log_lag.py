"""Does redacting request logs stall the gateway's event loop? Loop lag with and without the
payload writer's work (detect-secrets redaction + zlib of 64 KiB prompts) on another thread.

    uv run python bench/request_log_lag.py [payloads]

It measures how late a 1 ms `asyncio.sleep` wakes up (p50/p99/max) while idle and while a thread
runs `keys.payloads.services.build` over `payloads` captured requests, as the writer does. The
gateway sets sys.setswitchinterval(0.001) (gateway/state.py); so does this script.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import threading
import time

import django
import orjson

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from django.utils import timezone  # noqa: E402

from keys.payloads.redact import Redactor  # noqa: E402
from keys.payloads.services import Captured, build  # noqa: E402

LINE = "The deploy log says: connection refused at step {i}; retrying with backoff (attempt {i})."
SECRETS = (
    "OPENAI_API_KEY=sk-proj-Ab3dEf6hIjAb3dEf6hIjT3BlbkFJQr5tUv8xYzQr5tUv8xYz\naws_access_key_id = AKIAIOSFODNN7EXAMPLE"
)


def prompt(size: int) -> bytes:
    lines, total, i = [SECRETS], 0, 0
    while total < size:
        line = LINE.format(i=i)
        lines.append(line)
        total += len(line) + 1
        i += 1
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "\n".join(lines)}]})


def captured(body: bytes) -> Captured:
    return Captured(
        created=timezone.now(),
        request_id="bench",
        key_id=None,
        user_id=None,
        model="m",
        surface="chat",
        stream=False,
        status="ok",
        http_status=200,
        retention_days=1,
        request=body,
        response=b'{"choices": []}',
        request_bytes=len(body),
        response_bytes=15,
        truncated=False,
    )


async def lag(stop: threading.Event, samples: list[float]) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        samples.append((time.perf_counter() - t - 0.001) * 1000)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def main(n: int) -> None:
    sys.setswitchinterval(0.001)
    body = prompt(64 * 1024)
    idle: list[float] = []
    stop = threading.Event()
    timer = threading.Timer(2.0, stop.set)
    timer.start()
    await lag(stop, idle)
    busy: list[float] = []
    stop = threading.Event()
    spent: list[float] = []

    def work() -> None:
        redactor = Redactor()
        t = time.perf_counter()
        for _ in range(n):
            build(captured(body), redactor)
        spent.append(time.perf_counter() - t)
        stop.set()

    threading.Thread(target=work, name="payload-writer").start()
    await lag(stop, busy)
    for name, s in (("idle", idle), ("redacting", busy)):
        print(
            f"{name:10s} loop lag ms: p50 {statistics.median(s):.3f}  p99 {pct(s, 99):.3f}  max {max(s):.3f}"
            f"  ({len(s)} wake-ups)"
        )
    print(f"redaction + zlib: {n} x {len(body) // 1024} KiB in {spent[0]:.2f} s ({spent[0] / n * 1000:.0f} ms each)")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
