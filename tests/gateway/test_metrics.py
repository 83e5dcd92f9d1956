"""`/metrics` through the real gateway: after known traffic, the Prometheus counters (parsed with
prometheus_client's own parser) equal the usage records; the token is required; with two gateway
processes, each is scraped on its own and their sums equal the records (per-process scrape)."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from channels.models import Channel
from keys.models import UsageRecord
from tests.gateway.conftest import ROOT, wait_for
from tests.gateway_surfaces.conftest import set_limits

TOKEN = "metrics-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def metrics_token(settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `base`/metrics as {(sample name, sorted labels): value}."""
    r = httpx.get(base + "/metrics", headers=AUTH, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def declared_sample_names(base: str) -> set[str]:
    """The sample names every family `base`/metrics declares would have, with or without samples."""
    text = httpx.get(base + "/metrics", headers=AUTH, timeout=10).text
    return {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))
    }


def delta(after: dict, before: dict, name: str, **match: str) -> dict[tuple, float]:
    """The increase of each series of `name` whose labels include `match`, by its labels."""
    out = {}
    for (sample, labels), value in after.items():
        if sample == name and all(dict(labels).get(k) == v for k, v in match.items()):
            grown = value - before.get((sample, labels), 0.0)
            if grown:
                out[labels] = grown
    return out


def by(series: dict[tuple, float], *names: str) -> dict[tuple, float]:
    summed: dict[tuple, float] = defaultdict(float)
    for labels, value in series.items():
        summed[tuple(dict(labels)[n] for n in names)] += value
    return dict(summed)


def chat(base: str, key: str, *, stream: bool = False, expect: int = 200) -> None:
    body = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "one two three four"}], "stream": stream}
    r = httpx.post(base + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, json=body, timeout=30)
    assert r.status_code == expect, r.text


def records_by_status() -> Counter:
    return Counter(
        (r.model, r.channel.name if r.channel else "", r.surface, r.status)
        for r in UsageRecord.objects.select_related("channel")
    )


def test_metrics_are_off_without_a_token_and_need_it_when_on(gateway_url, settings):
    assert httpx.get(gateway_url + "/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    missing = httpx.get(gateway_url + "/metrics")
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert TOKEN not in missing.text
    settings.PORTAL_METRICS_TOKEN = ""
    off = httpx.get(gateway_url + "/metrics", headers=AUTH)
    assert off.status_code == 404 and "PORTAL_METRICS_TOKEN" in off.json()["error"]["message"]


def test_counters_equal_the_usage_records_after_known_traffic(setup, gateway_url, upstream):
    set_limits(setup.key, requests_per_minute=7)
    before = scrape(gateway_url)
    upstream.behave(cached=3)
    for _ in range(3):
        chat(gateway_url, setup.plaintext)
    for _ in range(2):
        chat(gateway_url, setup.plaintext, stream=True)
    upstream.enqueue(mode="status", status=500)
    chat(gateway_url, setup.plaintext, expect=502)
    chat(gateway_url, setup.plaintext)
    chat(gateway_url, setup.plaintext, expect=429)  # the 8th within the minute
    wait_for(lambda: UsageRecord.objects.count() == 8)
    after = scrape(gateway_url)

    requests = by(delta(after, before, "gateway_requests_total"), "model", "channel", "surface", "status")
    assert requests == {k: float(v) for k, v in records_by_status().items()}
    assert requests[("qwen3-32b", "primary", "chat", "ok")] == 6
    assert requests[("qwen3-32b", "", "chat", "rate_limited")] == 1

    records = UsageRecord.objects.all()
    tokens = by(delta(after, before, "gateway_tokens_total", model="qwen3-32b"), "type")
    assert tokens == {
        ("prompt",): sum(r.prompt_tokens for r in records),
        ("completion",): sum(r.completion_tokens for r in records),
        ("cached",): sum(r.cached_tokens for r in records),
    }
    assert tokens[("cached",)] == 6 * 3
    durations = delta(after, before, "gateway_request_duration_seconds_count")
    assert sum(durations.values()) == records.filter(latency_ms__isnull=False).count() == 8
    duration_sum = sum(delta(after, before, "gateway_request_duration_seconds_sum").values())
    assert duration_sum == pytest.approx(sum(r.latency_ms for r in records) / 1000, rel=1e-6)
    ttft = delta(after, before, "gateway_ttft_seconds_count")
    assert sum(ttft.values()) == records.filter(ttft_ms__isnull=False).count() == 6  # every answer that was sent
    refusals = delta(after, before, "gateway_limiter_refusals_total")
    assert by(refusals, "limit", "scope") == {("requests_per_minute", "key"): 1}

    assert after[("portal_channel_status", (("channel", "primary"), ("kind", "vllm"), ("status", "healthy")))] == 1
    assert after[("portal_channel_status", (("channel", "primary"), ("kind", "vllm"), ("status", "down")))] == 0
    assert after[("portal_launch_jobs", (("state", "running"),))] == 0
    assert ("gateway_usage_queue_depth", ()) in after and ("gateway_usage_flush_errors_total", ()) in after
    assert after[("gateway_in_flight_requests", ())] >= 1  # the scrape itself


def test_two_gateway_processes_are_scraped_each_and_add_up_to_the_records(setup, spawn_gateway):
    replicas = [s.url for s in spawn_gateway(2, PORTAL_METRICS_TOKEN=TOKEN)]
    before = [scrape(url) for url in replicas]
    sent = {replicas[0]: 3, replicas[1]: 2}
    for url, n in sent.items():
        for _ in range(n):
            chat(url, setup.plaintext)
    wait_for(lambda: UsageRecord.objects.count() == 5)
    after = [scrape(url) for url in replicas]
    per_replica = [
        sum(delta(a, b, "gateway_requests_total", status="ok").values()) for a, b in zip(after, before, strict=True)
    ]
    assert per_replica == [3, 2]  # each process counts only what it served
    prompt = sum(
        sum(delta(a, b, "gateway_tokens_total", type="prompt").values()) for a, b in zip(after, before, strict=True)
    )
    assert prompt == sum(UsageRecord.objects.values_list("prompt_tokens", flat=True))


def test_the_grafana_dashboard_only_queries_metrics_the_gateway_exposes(setup, gateway_url):
    Channel.objects.filter(pk=setup.channel.pk).update(last_ttft_ms=120.0)  # as the probe task writes it
    chat(gateway_url, setup.plaintext)
    wait_for(lambda: UsageRecord.objects.exists())
    samples = scrape(gateway_url)
    assert samples[("portal_channel_probe_ttft_seconds", (("channel", "primary"),))] == 0.12
    # A labelled series has no sample until its first event (no refusal in this test), so the
    # families' declared sample names count as exposed, not only the samples this scrape has.
    exposed = {name for name, _labels in samples} | declared_sample_names(gateway_url)
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "gateway-portal.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b((?:gateway|portal)_[a-z_]+)", e)}
    assert len(exprs) >= 15 and used
    assert used - exposed == set(), "the dashboard queries series /metrics does not have"
