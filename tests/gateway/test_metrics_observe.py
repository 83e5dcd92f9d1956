"""`metrics.observe` increments the label children's values directly (`metrics._Fast`): the
samples it leaves are the ones the metrics' public `inc` and `observe` would."""

from __future__ import annotations

import datetime as dt
import math
import uuid

from gateway import metrics
from gateway.usage import UsageEvent


def event(model: str, **fields: object) -> UsageEvent:
    base: dict[str, object] = {
        "created": dt.datetime.now(dt.UTC),
        "request_id": uuid.uuid4().hex,
        "key_id": 1,
        "user_id": 1,
        "model": model,
        "channel_id": None,
        "surface": "chat",
        "stream": False,
        "prompt_tokens": 7,
        "completion_tokens": 16,
        "estimated": False,
        "status": "ok",
        "http_status": 200,
    }
    return UsageEvent(**{**base, **fields})  # type: ignore[arg-type]


def sample(name: str, **labels: str) -> float:
    """A sample of the gateway's own series (the registry's database collectors are not read)."""
    for metric in (metrics.REQUESTS, metrics.TOKENS, metrics.DURATION, metrics.TTFT, metrics.COST, metrics.UNPRICED):
        for family in metric.collect():
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return s.value
    return 0.0


def test_observe_leaves_the_samples_of_the_public_inc_and_observe():
    model = "m-" + uuid.uuid4().hex[:8]
    mine = {"model": model, "channel": ""}
    # 250 ms is a bucket's bound (counted in it, as `amount <= bound`); 0.007 s below the first
    metrics.observe(event(model, latency_ms=250.0, ttft_ms=7.0, cached_tokens=3, cost_nanos=2_000_000_000))
    metrics.observe(event(model, latency_ms=1000.5, ttft_ms=None, prompt_tokens=0, cost_nanos=None))
    metrics.observe(event(model, latency_ms=math.nan, ttft_ms=5.0, completion_tokens=0, cache_creation_tokens=2))

    # A reference child, made and fed through the public API, for the histogram's buckets.
    reference = metrics.DURATION.labels("ref-" + model, "")
    for seconds in (0.25, 1.0005, math.nan):
        reference.observe(seconds)
    for bound in metrics.DURATION._upper_bounds:
        le = "+Inf" if bound == math.inf else str(bound)
        assert sample("gateway_request_duration_seconds_bucket", **mine, le=le) == sample(
            "gateway_request_duration_seconds_bucket", model="ref-" + model, channel="", le=le
        ), le
    assert sample("gateway_request_duration_seconds_bucket", **mine, le="0.25") == 1
    assert sample("gateway_request_duration_seconds_bucket", **mine, le="2.5") == 2
    assert sample("gateway_request_duration_seconds_bucket", **mine, le="+Inf") == 2  # NaN: in no bucket
    assert sample("gateway_request_duration_seconds_count", **mine) == 2
    assert math.isnan(sample("gateway_request_duration_seconds_sum", **mine))
    assert sample("gateway_ttft_seconds_bucket", **mine, le="0.01") == 2
    assert sample("gateway_ttft_seconds_count", **mine) == 2

    assert sample("gateway_requests_total", **mine, surface="chat", status="ok") == 3
    assert sample("gateway_tokens_total", **mine, type="prompt") == 14
    assert sample("gateway_tokens_total", **mine, type="completion") == 32
    assert sample("gateway_tokens_total", **mine, type="cached") == 3
    assert sample("gateway_tokens_total", **mine, type="cache_creation") == 2
    assert sample("gateway_cost_total", **mine, currency=str(metrics.settings.PORTAL_CURRENCY)) == 2.0
    assert sample("gateway_unpriced_requests_total", **mine) == 1
