"""The home page, composed by the apps: the ground floor knows no app, so each app registers what it
shows there from its `AppConfig.ready()` (a count for admins, or context for everyone)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.functional import Promise


@dataclass(frozen=True)
class Stat:
    order: int
    label: str | Promise  # gettext_lazy: rendered in the reader's language
    count: Callable[[], int]
    url_name: str
    query: str = ""


@dataclass(frozen=True)
class Attention:
    """Something an admin should look at: a failing host, a down channel, a failed job."""

    kind: str  # "Host", "Channel", "Deployment", "Job"
    name: str
    status: str  # for the badge's colour
    label: str
    message: str  # what to do next
    url: str


@dataclass(frozen=True)
class Section:
    order: int
    template: str
    build: Callable[[Any], dict[str, Any] | None]  # None: nothing to show this user


@dataclass(frozen=True)
class Step:
    """One step of an admin's first run ("add a channel or a host", "a model", …): done when any
    of its `done` checks is true (apps add alternatives to one step, e.g. a host instead of a
    channel); `links` are where to do it, (label, URL name)."""

    order: int
    key: str
    label: str
    done: tuple[Callable[[], bool], ...]
    links: tuple[tuple[str, str], ...]


_steps: dict[str, Step] = {}
_stats: list[Stat] = []
_contexts: list[Callable[[Any], dict[str, Any]]] = []
_attention: list[Callable[[], list[Attention]]] = []
_sections: list[Section] = []


def register_stat(order: int, label: str | Promise, count: Callable[[], int], url_name: str, query: str = "") -> None:
    """An admin's counter tile, e.g. `register_stat(10, "Hosts", Host.objects.count, "host_list")`."""
    _stats[:] = sorted(
        [s for s in _stats if s.label != label] + [Stat(order, label, count, url_name, query)], key=lambda s: s.order
    )


def register_context(build: Callable[[Any], dict[str, Any]]) -> None:
    """`build(user)` returns template context for the dashboard (an app's own section)."""
    if build not in _contexts:
        _contexts.append(build)


def register_attention(build: Callable[[], list[Attention]]) -> None:
    """`build()` lists what of an app needs an admin's attention now (empty when all is well)."""
    if build not in _attention:
        _attention.append(build)


def register_section(order: int, template: str, build: Callable[[Any], dict[str, Any] | None]) -> None:
    """An app's own block on the dashboard: `template` rendered with `build(user)` as `section`."""
    _sections[:] = sorted(
        [s for s in _sections if s.template != template] + [Section(order, template, build)], key=lambda s: s.order
    )


def register_step(order: int, key: str, label: Any, done: Callable[[], bool], url_name: str, link: Any) -> None:
    """A step of the first-run checklist; registering an existing `key` again adds an alternative
    (it keeps the first label, its place, and is done when either check is)."""
    step = _steps.get(key)
    if step is None:
        _steps[key] = Step(order, key, label, (done,), ((link, url_name),))
    elif (link, url_name) not in step.links:
        _steps[key] = Step(step.order, key, step.label, (*step.done, done), (*step.links, (link, url_name)))


def first_run_steps() -> list[dict[str, Any]]:
    """The checklist, in order, each step with `done` evaluated now; [] once every step is done."""
    steps = [
        {
            "key": s.key,
            "label": s.label,
            "done": any(check() for check in s.done),
            "links": [(label, reverse(name)) for label, name in s.links],
        }
        for s in sorted(_steps.values(), key=lambda s: s.order)
    ]
    return [] if all(s["done"] for s in steps) else steps


def context_for(user: Any) -> dict[str, Any]:
    context: dict[str, Any] = {}
    for build in _contexts:
        context.update(build(user))
    if user.is_admin:
        context["stats"] = [(s.label, s.count(), reverse(s.url_name) + s.query) for s in _stats]
        context["attention"] = [item for build in _attention for item in build()]
        context["first_run"] = first_run_steps()
    sections = [(s.template, s.build(user)) for s in _sections]
    context["sections"] = [{"template": t, "data": data} for t, data in sections if data is not None]
    return context
