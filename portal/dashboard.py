"""The home page, composed by the apps: the ground floor knows no app, so each app registers what it
shows there from its `AppConfig.ready()` (a count for admins, or context for everyone)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.urls import reverse


@dataclass(frozen=True)
class Stat:
    order: int
    label: str
    count: Callable[[], int]
    url_name: str
    query: str = ""


_stats: list[Stat] = []
_contexts: list[Callable[[Any], dict[str, Any]]] = []


def register_stat(order: int, label: str, count: Callable[[], int], url_name: str, query: str = "") -> None:
    """An admin's counter tile, e.g. `register_stat(10, "Hosts", Host.objects.count, "host_list")`."""
    _stats[:] = sorted(
        [s for s in _stats if s.label != label] + [Stat(order, label, count, url_name, query)], key=lambda s: s.order
    )


def register_context(build: Callable[[Any], dict[str, Any]]) -> None:
    """`build(user)` returns template context for the dashboard (an app's own section)."""
    if build not in _contexts:
        _contexts.append(build)


def context_for(user: Any) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for build in _contexts:
        context.update(build(user))
    if user.is_admin:
        context["stats"] = [(s.label, s.count(), reverse(s.url_name) + s.query) for s in _stats]
    return context
