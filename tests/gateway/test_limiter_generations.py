"""Admission against stale caches: the Redis script refuses to decide and reserves nothing.

Regression: the gateway used to admit first and *undo* the admission when Redis reported newer
key/route generations. While such a reservation stood, requests in the same burst were refused
for its sake and never retried, so fewer than the limit got through (seen as 4 of 5 parallel
slots used across two replicas right after a key was created)."""

import asyncio
import uuid

from gateway.limits import Admission, RedisLimiter, Refusal, Scope, Stale
from tests.services import require_redis


def _run(coro):
    return asyncio.run(coro)


async def _scenario(url: str):
    limiter = RedisLimiter(url)
    prefix = f"test-gen-{uuid.uuid4().hex}"
    gen_keys = f"{prefix}:gen:keys"
    scope = Scope(f"{prefix}:k:1", "key", {"max_parallel_requests": 1, "requests_per_minute": 10})
    try:
        # Redis holds generation "7" for keys; this process believes "6".
        await limiter.redis.call("SET", gen_keys, "7")
        from gateway import limits

        original = limits.generation_keys
        limits.generation_keys = lambda: (gen_keys, f"{prefix}:gen:routes")
        try:
            stale = await limiter.admit("r1", [scope], 10, expected=("6", None))
            in_flight_after_stale = await limiter.redis.call("ZCARD", f"{prefix}:k:1:p")
            requests_after_stale = await limiter.redis.call("ZCARD", f"{prefix}:k:1:r")
            fresh = await limiter.admit("r2", [scope], 10, expected=("7", None))
            second = await limiter.admit("r3", [scope], 10, expected=("7", None))
            unchecked = await limiter.admit("r4", [scope], 10, expected=None)
        finally:
            limits.generation_keys = original
        return stale, int(in_flight_after_stale), int(requests_after_stale), fresh, second, unchecked
    finally:
        keys = await limiter.redis.call("KEYS", f"{prefix}*")
        if keys:
            await limiter.redis.call("DEL", *keys)
        await limiter.close()


def test_a_stale_admission_reserves_nothing_and_a_current_one_counts():
    url = require_redis()
    stale, in_flight, requests, fresh, second, unchecked = _run(_scenario(url))
    assert isinstance(stale, Stale) and stale.generations[0] == "7"
    assert (in_flight, requests) == (0, 0)  # nothing was reserved for the stale attempt
    assert isinstance(fresh, Admission)
    assert isinstance(second, Refusal) and second.limit == "max_parallel_requests"  # the one slot is taken
    assert isinstance(unchecked, Refusal)  # without expectations the limits still apply
