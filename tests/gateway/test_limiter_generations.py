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

        original = limits.admission_keys
        limits.admission_keys = lambda: (gen_keys, f"{prefix}:gen:routes", f"{prefix}:epoch")
        try:
            stale = await limiter.admit("r1", [scope], 10, expected=("6", None))
            in_flight_after_stale = await limiter.redis.call("ZCARD", f"{prefix}:k:1:p")
            requests_after_stale = await limiter.redis.call("ZCARD", f"{prefix}:k:1:r")
            fresh = await limiter.admit("r2", [scope], 10, expected=("7", None))
            second = await limiter.admit("r3", [scope], 10, expected=("7", None))
            unchecked = await limiter.admit("r4", [scope], 10, expected=None)
        finally:
            limits.admission_keys = original
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


async def _busy_scenario(url: str):
    """A request to an on-demand deployment is counted in flight by the admission itself
    (`gateway.ondemand.busy`), never when the script refuses or finds the caches stale, with and
    without budgets (the set and its lease come after the budgets' arguments); a request through
    an alias whose targets include several on-demand models, on each of their deployments."""
    from gateway import limits
    from gateway.cache import BudgetInfo

    limiter = RedisLimiter(url)
    prefix = f"test-busy-{uuid.uuid4().hex}"
    gen_keys, busy, other = f"{prefix}:gen:keys", f"{prefix}:od:busy:7", f"{prefix}:od:busy:8"
    scope = Scope(f"{prefix}:k:1", "key", {"requests_per_minute": 2})
    budget = BudgetInfo(id=1, label="key", window="day", amount=10**12)
    original = limits.admission_keys
    limits.admission_keys = lambda: (gen_keys, f"{prefix}:gen:routes", f"{prefix}:epoch")
    try:
        await limiter.redis.call("SET", gen_keys, "7")
        stale = await limiter.admit("stale", [scope], 10, expected=("6", None), busy=[(busy, 3600)])
        plain = await limiter.admit("plain", [scope], 10, expected=("7", None), busy=[(busy, 3600)])
        budgeted = await limiter.admit(
            "budgeted", [scope], 10, budgets=(budget,), cost=5, namespace=prefix, busy=[(busy, 3600)]
        )
        refused = await limiter.admit("refused", [scope], 10, busy=[(busy, 3600)])  # over 2 a minute
        free = Scope(f"{prefix}:k:2", "key", {})
        both = [(busy, 3600), (other, 7200)]
        aliased = await limiter.admit("aliased", [free], 10, expected=("7", None), busy=both)
        aliased_budget = await limiter.admit(
            "aliased-budget", [free], 10, budgets=(budget,), cost=5, namespace=prefix, busy=both
        )
        now = float((await limiter.redis.call("TIME"))[0])
        rids = ("stale", "plain", "budgeted", "refused", "aliased", "aliased-budget")
        scores = {rid: await limiter.redis.call("ZSCORE", busy, rid) for rid in rids}
        others = {rid: await limiter.redis.call("ZSCORE", other, rid) for rid in rids}
        admitted = (plain, budgeted, aliased, aliased_budget)
        return stale, admitted, refused, now, scores, others
    finally:
        limits.admission_keys = original
        keys = await limiter.redis.call("KEYS", f"{prefix}*")
        if keys:
            await limiter.redis.call("DEL", *keys)
        await limiter.close()


def test_an_on_demand_request_is_in_flight_from_its_admission_on():
    url = require_redis()
    stale, admitted, refused, now, scores, others = _run(_busy_scenario(url))
    assert isinstance(stale, Stale) and all(isinstance(a, Admission) for a in admitted)
    assert isinstance(refused, Refusal) and refused.limit == "requests_per_minute"
    assert scores["stale"] is None and scores["refused"] is None
    for rid in ("plain", "budgeted", "aliased", "aliased-budget"):
        assert now + 3500 < float(scores[rid]) <= now + 3601, scores  # the lease, by Redis's clock
    assert [rid for rid, score in others.items() if score is not None] == ["aliased", "aliased-budget"]
    for rid in ("aliased", "aliased-budget"):
        assert now + 7100 < float(others[rid]) <= now + 7201, others  # each set with its own lease


def test_an_on_demand_request_stays_counted_for_as_long_as_it_may_take(settings):
    """Its cold-start wait and then its whole call (GATEWAY_TOTAL_TIMEOUT): with calls allowed two
    hours, an hour's lease let a long stream leave the count, and the idle sweep stop the model
    under it. Never less than the hour."""
    from gateway import ondemand
    from gateway.cache import ModelInfo, OnDemandInfo

    model = ModelInfo(
        id=1, name="m", enabled=True, created=0, context_window=None, max_output_tokens=None, description="",
        on_demand=OnDemandInfo(deployment_id=7, budget=300, estimate=60),
    )  # fmt: skip
    settings.GATEWAY_TOTAL_TIMEOUT = 7200
    [(key, lease)] = ondemand.busy([model])
    assert key.endswith(":7") and lease >= 300 + 7200
    settings.GATEWAY_TOTAL_TIMEOUT = 900
    assert ondemand.busy([model])[0][1] == 3600


def test_an_alias_request_is_counted_on_the_on_demand_targets_it_may_be_sent_to():
    """On each on-demand target whose routes are in its selection (the call fails over along it),
    not on a target it cannot be sent to (stopped, disabled, too small a window); an alias whose
    targets are all stopped starts its first on-demand one, and is counted there. Nothing for a
    model that is not on demand."""
    from gateway import ondemand
    from gateway.cache import ModelInfo, OnDemandInfo, RouteInfo
    from gateway.catalog import select_routes
    from tests.gateway.test_breaker import key_info

    def model(n: int, *, on_demand: bool = True, routed: bool = True, window: int = 8192, enabled: bool = True):
        name = f"m{n}"
        route = RouteInfo(
            route_id=n, channel_id=n, channel_name=f"c{n}", kind="vllm", base_url="http://127.0.0.1:1",
            api_key="", priority=0, weight=1, status="healthy", upstream_id=name, speaks_messages=False,
            speaks_responses=False, model_name=name, context_window=window,
        )  # fmt: skip
        return ModelInfo(
            id=n, name=name, enabled=enabled, created=0, context_window=None, max_output_tokens=None, description="",
            groups=[[route]] if routed else [], on_demand=OnDemandInfo(n, 60, 30) if on_demand else None,
        )  # fmt: skip

    def alias(*targets: ModelInfo) -> ModelInfo:
        return ModelInfo(
            id=99, name="alias", enabled=True, created=0, context_window=None, max_output_tokens=None,
            description="", is_alias=True, targets=list(targets),
        )  # fmt: skip

    cloud, first, later = model(1, on_demand=False), model(2), model(3)
    stopped, disabled, narrow = model(4, routed=False), model(5, enabled=False), model(6, window=100)
    mixed = alias(cloud, stopped, first, disabled, narrow, later)
    selection = select_routes(mixed, key_info(), prompt=500, output=10)
    assert [r.model_name for r in selection.routes] == ["m1", "m2", "m3"]
    assert mixed.starts_for(False) is None
    assert ondemand.counted(mixed, selection.routes) == [first, later]
    assert [key.rsplit(":", 1)[1] for key, _lease in ondemand.busy([first, later])] == ["2", "3"]

    cold = alias(disabled, model(7, on_demand=False, routed=False), stopped, model(8, routed=False))
    assert cold.starts_for(False) is stopped  # the first enabled on-demand target, in the alias's order
    assert alias(cloud, stopped).starts_for(False) is None  # something serves it now
    # ... but on an external channel (`cloud`'s), which a local-only key may not use: it starts `stopped`
    assert alias(cloud, stopped).starts_for(True) is stopped

    assert ondemand.counted(cloud, selection.routes) == [] and ondemand.counted(alias(cloud), selection.routes) == []
    assert ondemand.counted(first, []) == [first]
    assert first.starts_for(False) is None and stopped.starts_for(False) is stopped
