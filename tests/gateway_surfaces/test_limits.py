"""Limits on the Messages and Responses surfaces are as exact as on Chat Completions: concurrent
bursts through the translating path admit exactly what the limit allows and record exact usage."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from keys.models import UsageRecord
from keys.services import issue_key
from tests.gateway_surfaces.conftest import wait_for
from tests.services import require_postgres

# Each request reserves its prompt estimate (1) + 5 output tokens and the fake reports 1 + 5 used.
SURFACES = {
    "messages": (
        "/v1/messages",
        {"model": "qwen3-32b", "max_tokens": 5, "messages": [{"role": "user", "content": "abcd"}]},
        "event: message_stop",
    ),
    "responses": (
        "/v1/responses",
        {"model": "qwen3-32b", "max_output_tokens": 5, "input": "abcd"},
        "event: response.incomplete",  # max_output_tokens reached, as asked
    ),
}


async def burst(url: str, key: str, n: int, path: str, body: dict, last_event: str, stream: bool) -> list[int]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one() -> int:
            payload = {**body, "stream": True} if stream else body
            async with client.stream("POST", url + path, json=payload, headers={"x-api-key": key}) as r:
                text = (await r.aread()).decode()
                if r.status_code == 200 and stream:
                    assert last_event in text
                return r.status_code

        return await asyncio.gather(*(one() for _ in range(n)))


@pytest.mark.parametrize("surface", SURFACES)
def test_streamed_tokens_per_day_admit_exactly_the_limit(setup, gateway_url, alice, surface):
    # 30 requests at once: the in-memory SQLite test database locks tables under that many
    # concurrent writers (the gateway's database limiter and the usage writer), PostgreSQL does not.
    require_postgres()
    path, body, last_event = SURFACES[surface]
    key, plaintext = issue_key(owner=alice, name="daily", tokens_per_day=60)
    statuses = asyncio.run(burst(gateway_url, plaintext, 30, path, body, last_event, stream=True))
    assert (statuses.count(200), statuses.count(429)) == (10, 20)
    wait_for(lambda: UsageRecord.objects.filter(key=key, status="ok").count() == 10)
    ok = UsageRecord.objects.filter(key=key, status="ok")
    assert sum(r.total_tokens for r in ok) == 60
    assert {(r.surface, r.stream, r.estimated) for r in ok} == {(surface, True, False)}


@pytest.mark.parametrize("surface", SURFACES)
def test_max_parallel_requests_hold_while_translating(setup, gateway_url, upstream, alice, surface):
    path, body, last_event = SURFACES[surface]
    _key, plaintext = issue_key(owner=alice, name="parallel", max_parallel_requests=2)
    upstream.behave(delay=1.0)
    statuses = asyncio.run(burst(gateway_url, plaintext, 6, path, body, last_event, stream=False))
    assert (statuses.count(200), statuses.count(429)) == (2, 4)
