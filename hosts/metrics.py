"""Prometheus collector of the launch jobs: how many are in each state, read from the database
when `/metrics` is scraped (the gateway renders the page)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .choices import JobState


class LaunchJobCollector(Collector):
    """`portal_launch_jobs{state}`: launch and stop jobs per state (every state listed, 0 included)."""

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily("portal_launch_jobs", "Launch and stop jobs in each state.", labels=["state"])

    def collect(self) -> Iterator[Metric]:
        from .models import LaunchJob

        counts = dict.fromkeys(JobState.values, 0)
        for row in LaunchJob.objects.values("state").annotate(n=Count("id")).order_by():
            counts[row["state"]] = row["n"]
        family = self._family()
        for state, n in counts.items():
            family.add_metric([state], n)
        yield family
