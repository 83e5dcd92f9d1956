"""The crawler: as the admin and as a developer, every page reachable from the nav (and from the
pages it leads to, confirm pages included) loads in chromium without console errors, every form
and htmx action on it submits to a URL that resolves with a method that URL accepts (no 404/405),
axe-core finds no critical or serious violation, and nothing overflows a 390 px phone screen.

One crawl per role: each page is loaded once at a desktop width, checked, then resized to the
phone's width and measured there (the portal's layout is CSS only, no script reads the width, so
a resized page lays out as one loaded at that width)."""

from __future__ import annotations

import inspect
from collections import deque
from urllib.parse import urlparse

import pytest
from django.urls import Resolver404, resolve
from django.utils import timezone

from accounts.services import issue_token, password_changed, unlock_login
from channels.models import AlertTarget, Channel, Model, ModelRoute, ProbeResult
from channels.services import save_alias
from hosts.choices import JobAction, JobState
from hosts.deployments.services import save_deployment
from hosts.models import GPU, Deployment, Host, LaunchJob
from keys.models import UsageRecord
from keys.services import issue_key
from tests.browser.robot import Robot, wait_until

# One crawl per role takes minutes on a loaded box (its set-up alone, chromium and the live
# server, took 2 min under a load of 26 on 2 cores): more than pyproject's 300 s per test.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(900)]

# Not pages: JSON, downloads, the API (its docs are drf-spectacular's own), and leaving.
# The playground talks to the gateway at /v1/, which live_server does not serve: its own browser test
# runs it against the real ASGI app (tests/browser/test_playground_in_browser.py).
SKIP_PREFIXES = ("/api/", "/static/", "/logout/", "/connect/install", "/admin/", "/playground/")
SKIP_CONTAINS = ("/files/", "/series/", "/progress/")
MAX_PAGES = 120
PHONE = {"width": 390, "height": 844}
LONG = ("very-long-unbroken-name-" * 5)[:100]


@pytest.fixture
def world(admin, alice, mallory, team, lena):
    """One of everything, so every list has a row and every detail page exists (alice is in team
    alpha, which lena leads)."""
    host = Host.objects.create(
        name="gpu-1", address="127.0.0.1", ssh_port=9, username="gpu", status="unreachable", status_message="refused"
    )
    GPU.objects.create(host=host, index=0, name="NVIDIA GeForce RTX 4090", memory_total_mib=24564, memory_used_mib=300)
    channel = Channel.objects.create(name="vllm-a", kind="vllm", base_url="http://127.0.0.1:9/v1")
    model = Model.objects.create(name="qwen3-32b")
    ModelRoute.objects.create(model=model, channel=channel, upstream_model="Qwen/Qwen3-32B", context_window=32768)
    ProbeResult.objects.create(
        channel=channel, created=timezone.now(), ok=False, error="connect", error_message="refused"
    )
    deployment = save_deployment(
        host=host,
        name="tiny",
        backend="llamacpp",
        model_path="/m/tiny.gguf",
        served_model_name="tiny",
        gpu_indices=[0],
        port=8080,
        options={"ctx_size": 4096},
        extra_args=[],
    )
    Deployment.objects.filter(pk=deployment.pk).update(channel=channel, status="failed", status_message="exit code 1")
    LaunchJob.objects.create(
        deployment=deployment,
        action=JobAction.LAUNCH,
        state=JobState.FAILED,
        message="exit code 1",
        finished=timezone.now(),
    )
    AlertTarget.objects.create(name="ops", kind="webhook", url="http://127.0.0.1:9/hook")
    key, _ = issue_key(owner=alice, name="laptop", requests_per_minute=60)
    issue_key(owner=mallory, name="other")
    save_alias(name="coder", targets=[model])
    UsageRecord.objects.create(
        key=key,
        user=alice,
        model="coder",
        channel=channel,
        request_id="1a2b3c",
        route_explanation=["alias coder -> qwen3-32b", "window 32,768 < 40,000 needed", "sent to vllm-a (qwen3-32b)"],
    )
    issue_token(user=alice, name="script")
    issue_token(user=admin, name="admin-script")
    # Audit entries with a message, which the audit page and the dashboard show in the reader's language.
    unlock_login(alice, actor=admin)
    password_changed(mallory, current_session=None, revoke_access=False)
    # A 100-character name without spaces on every kind of row, so no page may widen past a phone.
    long_channel = Channel.objects.create(name=LONG, kind="vllm", base_url="http://127.0.0.1:9/v1")
    long_model = Model.objects.create(name=LONG)
    ModelRoute.objects.create(model=long_model, channel=long_channel, upstream_model=LONG, context_window=8192)
    long_key, _ = issue_key(owner=alice, name=LONG)
    UsageRecord.objects.create(
        key=long_key, user=alice, model=LONG, channel=long_channel, request_id="4d5e6f", route_explanation=[LONG]
    )


def allowed_methods(path: str) -> set[str] | None:
    """The HTTP methods the view at `path` accepts (None: the URL does not resolve)."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    view = match.func
    cls = getattr(view, "view_class", None)
    if cls is not None:
        methods = {m.upper() for m in cls.http_method_names if hasattr(cls, m)}
        return methods | ({"HEAD"} if "GET" in methods else set())
    func = view
    while func is not None:  # require_http_methods keeps its list in the wrapper's closure
        for name, value in inspect.getclosurevars(func).nonlocals.items():
            if name == "request_method_list":
                return set(value)
        func = getattr(func, "__wrapped__", None)
    return {"GET", "POST", "HEAD"}


def crawl(robot: Robot, *, label: str) -> dict[str, list[str]]:
    """Visit what the nav leads to, breadth first; check each page at the desktop width, then its
    layout at the phone's."""
    page, base = robot.page, robot.base_url
    desktop = page.viewport_size
    problems: dict[str, list[str]] = {"forms": [], "axe": [], "status": [], "wide": []}
    nav = page.eval_on_selector_all("header nav a[href]", "els => els.map(e => e.getAttribute('href'))")
    queue, seen = deque(nav), set(nav)
    visited = []
    started: set = set()  # the page's requests not yet answered in full
    page.on("request", lambda request: started.add(request))  # playwright takes functions, not builtins
    page.on("requestfinished", lambda request: started.discard(request))
    page.on("requestfailed", lambda request: started.discard(request))
    while queue and len(visited) < MAX_PAGES:
        href = queue.popleft()
        path = urlparse(href).path
        if not path.startswith("/") or path.startswith(SKIP_PREFIXES) or any(s in path for s in SKIP_CONTAINS):
            continue
        response = page.goto(base + href)
        settle(started)
        visited.append(href)
        if response is None or response.status >= 400:
            problems["status"].append(f"{label} {href}: HTTP {response.status if response else '?'}")
            continue
        targets = page.evaluate(
            """() => [
                ...[...document.querySelectorAll('form')].map(f => [
                    (f.getAttribute('method') || 'get').toUpperCase(),
                    new URL(f.getAttribute('action') || location.href, location.href).href,
                ]),
                ...[...document.querySelectorAll('[hx-post]')].map(e => ['POST', e.getAttribute('hx-post')]),
                ...[...document.querySelectorAll('[hx-get]')].map(e => ['GET', e.getAttribute('hx-get')]),
            ].map(([method, url]) => [method, new URL(url, location.href).href])"""
        )
        for method, action in targets:
            methods = allowed_methods(urlparse(action).path)
            if methods is None:
                problems["forms"].append(f"{label} {href}: {method} {action} → 404")
            elif method not in methods:
                problems["forms"].append(f"{label} {href}: {method} {action} → 405 (accepts {sorted(methods)})")
        problems["axe"] += [f"{label} {v}" for v in robot.axe_violations()]
        links = page.eval_on_selector_all("main a[href]", "els => els.map(e => e.getAttribute('href'))")
        problems["wide"] += phone_overflow(robot, f"{label} {href}", desktop)
        for link in links:
            if link.startswith("/") and link.split("#")[0] not in seen:
                seen.add(link.split("#")[0])
                queue.append(link.split("#")[0])
    problems["visited"] = visited
    return problems


def settle(started: set) -> None:
    """After the load event: until every request the page made has its answer (what its scripts
    fetch, a chart's series), so the checks see the page as it ends up. Waiting for each one, not
    for playwright's "networkidle", which adds half a second of silence to every page."""
    while started:
        request = started.pop()
        response = request.response()  # waits for it; None when it failed
        if response is not None:
            response.finished()


def phone_overflow(robot: Robot, where: str, desktop) -> list[str]:
    """The current page at the phone's width: what sticks out, if anything; then back to desktop."""
    robot.page.set_viewport_size(PHONE)
    try:
        # The resize reaches the renderer asynchronously: measure once it has laid out at the new width.
        wait_until(robot.page, f"() => window.innerWidth === {PHONE['width']}")
        robot.page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
        wide = robot.overflow_px()
        return [f"{where}: {wide} px wider than the phone: {robot.overflowing()}"] if wide > 0 else []
    finally:
        robot.page.set_viewport_size(desktop)


@pytest.mark.parametrize("who", ["admin", "alice", "lena"])
def test_every_page_loads_cleanly_every_form_goes_somewhere_and_fits_a_phone(live_server, browser, world, who):
    robot = Robot(browser.new_context(viewport={"width": 1280, "height": 900}).new_page(), live_server.url)
    robot.goto("/login/")
    assert robot.axe_violations() == []
    assert phone_overflow(robot, "/login/", robot.page.viewport_size) == []
    robot.log_in(who, f"{who}-pass-123")
    found = crawl(robot, label=who)
    visited = found.pop("visited")
    assert len(visited) >= (25 if who == "admin" else 6), visited
    # Confirm pages are among them: every destructive action was reached through its page.
    if who == "admin":
        for fragment in ("/launch/", "/stop/", "/restart/", "/adopt/", "/delete/", "/revoke/"):
            assert any(fragment in v for v in visited), (fragment, visited)
    assert found == {"forms": [], "axe": [], "status": [], "wide": []}, "\n".join(
        line for lines in found.values() for line in lines
    )
    assert robot.console_errors == []
