"""Prometheus collector of models on demand, read from the database when `/metrics` is scraped:
`portal_ondemand_cold_starts_total{model,state}` and `portal_ondemand_evictions_total{model}`.
The time requests waited is the gateway's own histogram (`gateway_ondemand_wait_seconds`)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class OnDemandCollector(Collector):
    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        return (
            CounterMetricFamily(
                "portal_ondemand_cold_starts", "Cold starts of on-demand models, by outcome.", labels=["model", "state"]
            ),
            CounterMetricFamily(
                "portal_ondemand_evictions", "On-demand deployments stopped to make room.", labels=["model"]
            ),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        from .models import ColdStart

        starts, evictions = self._families()
        rows = ColdStart.objects.values("deployment__served_model_name", "state").annotate(n=Count("id")).order_by()
        for row in rows:
            starts.add_metric([row["deployment__served_model_name"], row["state"]], row["n"])
        evicted: dict[str, int] = {}
        names = {}
        from ..models import Deployment

        for cold in ColdStart.objects.exclude(evicted=[]).only("evicted"):
            for e in cold.evicted:
                evicted[e.get("name", "")] = evicted.get(e.get("name", ""), 0) + 1
        if evicted:
            names = dict(Deployment.objects.filter(name__in=evicted).values_list("name", "served_model_name"))
        for name, n in evicted.items():
            evictions.add_metric([names.get(name, name)], n)
        yield starts
        yield evictions
