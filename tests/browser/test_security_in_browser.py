"""A real browser under the real Content-Security-Policy: the pages' scripts (charts, htmx, copy
buttons, auto-submitting selects, the API docs) still work and chromium reports no violation; and
a login locked out by wrong passwords is unlocked by an admin with two clicks."""

from __future__ import annotations

import pytest
from django.conf import settings

from channels.models import AlertTarget, Channel
from gateway.usage import write_batch
from keys.services import issue_key
from tests.browser.robot import wait_until
from tests.keys.test_usage import event

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Records every CSP violation the page reports (Playwright's init scripts are not subject to CSP).
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " " + (e.blockedURI || "inline") + " " + (e.sourceFile || ""));
});
"""


def log_in(page, base: str, username: str, password: str) -> None:
    page.goto(base + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("main button[type=submit]")


def violations(page) -> list[str]:
    return page.evaluate("window.__csp || []")


def test_pages_and_their_scripts_work_under_the_csp(live_server, browser, admin, alice, screenshots):
    channel = Channel.objects.create(name="vllm-a", kind="vllm", base_url="http://10.0.0.5:8000/v1")
    key, _ = issue_key(owner=alice, name="laptop")
    write_batch([event(key, channel_id=channel.pk)])
    AlertTarget.objects.create(name="oncall", kind="email", email="oncall@example.com")

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    context.add_init_script(RECORD_VIOLATIONS)
    console: list[str] = []
    page = context.new_page()
    page.set_default_timeout(20_000)
    page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
    seen: dict[str, list[str]] = {}

    log_in(page, live_server.url, "admin", "admin-pass-123")
    page.wait_for_url(live_server.url + "/")
    csp = page.evaluate("fetch('/').then(r => r.headers.get('content-security-policy'))")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    seen["dashboard"] = violations(page)

    # Chart.js draws the usage chart from a static file (no inline script any more).
    page.goto(live_server.url + "/usage/all/")
    wait_until(page, "!!(window.Chart && Chart.getChart(document.getElementById('usage-chart')))")
    seen["usage_admin"] = violations(page)

    # The period select submits its form on change (was an inline onchange handler).
    page.goto(live_server.url + "/usage/")
    page.select_option("select[name=days]", "30")
    page.wait_for_url("**/usage/?days=30")
    seen["usage_mine"] = violations(page)

    # The channel health chart.
    page.goto(f"{live_server.url}/channels/{channel.pk}/health/")
    wait_until(page, "!!(window.Chart && Chart.getChart(document.getElementById('health-chart')))")
    seen["channel_health"] = violations(page)

    # htmx: "Send test" posts in the background (CSRF header from portal.js) and swaps the result in.
    page.goto(live_server.url + "/channels/health/alerts/")
    page.click("button:has-text('Send test')")
    wait_until(page, "document.querySelector('form.inline + span').textContent.trim().length > 0")
    assert page.url.endswith("/channels/health/alerts/")  # no full-page submit
    seen["alert_targets"] = violations(page)

    # The connect page's copy buttons (portal.js) and its save script (moved out of the page).
    page.goto(live_server.url + "/connect/")
    button = page.locator("button[data-copy-target]").first
    target = button.get_attribute("data-copy-target")
    text = page.evaluate("id => document.getElementById(id).textContent.trim()", target)
    button.click()
    wait_until(page, "navigator.clipboard.readText().then(t => t.length > 0)")
    assert page.evaluate("navigator.clipboard.readText()") == text
    seen["connect"] = violations(page)

    # The API docs: Swagger UI starts from a script file and renders the operations; ReDoc too.
    # Both fetch the whole API's schema, generated per request, and render all of it in the page:
    # on a loaded 2-core box that took more than the page's 20 s (CI), so they get two minutes.
    page.goto(live_server.url + "/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=120_000)
    seen["swagger"] = violations(page)
    page.goto(live_server.url + "/api/redoc/")
    page.wait_for_selector("redoc h1, [role=navigation]", timeout=120_000)
    # ReDoc's "powered by" badge is an image on its vendor's CDN: refused, as any CDN must be
    # (the docs work offline); nothing else on the page may be.
    seen["redoc"] = [v for v in violations(page) if not v.startswith("img-src https://cdn.redoc.ly/")]
    page.screenshot(path=f"{screenshots}/redoc_under_csp.png")

    assert {name: v for name, v in seen.items() if v} == {}
    assert [m for m in console if "cdn.redoc.ly" not in m] == []
    context.close()


def test_a_locked_out_developer_is_unlocked_by_an_admin(live_server, browser, admin, alice, screenshots):
    admin_page = browser.new_context().new_page()
    admin_page.set_default_timeout(20_000)
    log_in(admin_page, live_server.url, "admin", "admin-pass-123")
    admin_page.wait_for_url(live_server.url + "/")

    dev = browser.new_context().new_page()
    dev.set_default_timeout(20_000)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in(dev, live_server.url, "alice", "not-her-password")
    assert "Too many failed logins" in dev.locator("main").inner_text()
    log_in(dev, live_server.url, "alice", "alice-pass-123")  # the right one is refused too now
    assert "Too many failed logins" in dev.locator("main").inner_text()
    dev.screenshot(path=f"{screenshots}/locked_out.png")

    admin_page.goto(f"{live_server.url}/users/{alice.pk}/")
    assert "Login locked" in admin_page.locator("main").inner_text()
    admin_page.click("a:has-text('Unlock login')")
    admin_page.click("button:has-text('Unlock login')")
    assert "alice can log in again." in admin_page.locator(".flash-success").inner_text()

    log_in(dev, live_server.url, "alice", "alice-pass-123")
    dev.wait_for_url(live_server.url + "/")
    assert "alice" in dev.locator("header").inner_text()
