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


class GPUCollector(Collector):
    """Per GPU (labels host, gpu): `portal_gpu_utilization_percent`, `portal_gpu_memory_used_bytes`,
    `portal_gpu_memory_total_bytes`, `portal_gpu_temperature_celsius`, as the last sample saw them
    (the per-minute sampling task; stale GPUs are left out)."""

    FIGURES = (
        ("portal_gpu_utilization_percent", "GPU utilisation at the last sample.", "utilization_pct", 1),
        ("portal_gpu_memory_used_bytes", "GPU memory used at the last sample.", "memory_used_mib", 1024**2),
        ("portal_gpu_memory_total_bytes", "GPU memory in all.", "memory_total_mib", 1024**2),
        ("portal_gpu_temperature_celsius", "GPU temperature at the last sample.", "temperature_c", 1),
    )

    def _families(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, doc, labels=["host", "gpu"]) for name, doc, _f, _s in self.FIGURES]

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        from .models import GPU

        families = self._families()
        for gpu in GPU.objects.filter(stale=False).select_related("host"):
            for family, (_name, _doc, field, scale) in zip(families, self.FIGURES, strict=True):
                value = getattr(gpu, field)
                if value is not None:
                    family.add_metric([gpu.host.name, str(gpu.index)], value * scale)
        yield from families
