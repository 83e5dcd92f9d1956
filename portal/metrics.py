"""The ground floor of the Prometheus metrics: apps register collectors of their own state here at
start-up (`AppConfig.ready()`), the way they register dashboard counters; the gateway serves them
with its own at `/metrics` (`gateway.metrics`). Collectors read the database when scraped."""

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.registry import Collector

_registered: set[str] = set()
_collectors: list[Collector] = []


def register_collector(collector: Collector) -> None:
    """Add `collector` to the process's registry, once per kind (ready() may run again in tests).
    It must have `describe()`, so registering never touches the database."""
    kind = f"{type(collector).__module__}.{type(collector).__qualname__}"
    if kind in _registered:
        return
    _registered.add(kind)
    _collectors.append(collector)
    REGISTRY.register(collector)


def database_collectors() -> list[Collector]:
    """The registered collectors (all read the database): left out of a scrape while it is down."""
    return list(_collectors)
