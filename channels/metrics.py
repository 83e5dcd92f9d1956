"""Prometheus collector of the channels: each channel's health status and its last probe's time to
first token, read from the database when `/metrics` is scraped (the gateway renders the page)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .choices import ChannelStatus


class ChannelCollector(Collector):
    """`portal_channel_status{channel,status}` (1 for the current status, 0 for the others) and
    `portal_channel_probe_ttft_seconds{channel}` (the last active probe's)."""

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        status = GaugeMetricFamily(
            "portal_channel_status",
            "Health status of each upstream channel (1 for its current status).",
            labels=["channel", "kind", "status"],
        )
        ttft = GaugeMetricFamily(
            "portal_channel_probe_ttft_seconds",
            "Time to first token of each channel's last active probe.",
            labels=["channel"],
        )
        return status, ttft

    def collect(self) -> Iterator[Metric]:
        from .models import Channel

        status, ttft = self._families()
        for name, kind, current, last_ttft_ms in Channel.objects.enabled().values_list(
            "name", "kind", "status", "last_ttft_ms"
        ):
            for value in ChannelStatus.values:
                status.add_metric([name, kind, value], 1.0 if value == current else 0.0)
            if last_ttft_ms is not None:
                ttft.add_metric([name], last_ttft_ms / 1000)
        yield status
        yield ttft
