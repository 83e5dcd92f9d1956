"""The channel health page in a real browser: chart drawn, Check now answers in place (no reload)."""

import pytest
from django.conf import settings
from django.test import Client

from tests.browser.conftest import browser  # noqa: F401 (fixture)
from tests.browser.robot import wait_until

pytestmark = [pytest.mark.browser]


def test_check_now_shows_the_result_in_place_and_the_chart_draws(
    live_server,
    admin,
    upstream,
    make_channel,
    browser,  # noqa: F811
):
    up = upstream()
    ch = make_channel("gpu-browser", up.base_url)
    client = Client()
    client.force_login(admin)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value

    context = browser.new_context()
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/channels/{ch.pk}/health/")
    assert "No checks yet" in page.inner_text("#health-probe-log")
    page.evaluate("window.__notReloaded = true")

    page.click("text=Check now")
    page.wait_for_selector("#health-check-result >> text=OK", timeout=15_000)

    assert page.evaluate("window.__notReloaded") is True  # swapped in place by htmx
    assert "Healthy" in page.inner_text("#health-status")
    assert "ok" in page.inner_text("#health-probe-log tbody")
    wait_until(page, "() => window.Chart && Chart.getChart(document.getElementById('health-chart'))")
    # One check so far: big dots and a note, not a lone pixel at the right edge.
    wait_until(
        page, "() => document.getElementById('health-chart-note').textContent.includes('Only 1 hour with checks')"
    )
    assert page.is_visible("#health-chart-note")
    # ... and a line: the one check carried to now (two points), not a lone dot on a 24 h axis.
    radius = "Chart.getChart(document.getElementById('health-chart')).data.datasets[0].pointRadius"
    assert page.evaluate(radius) == [5, 0]
    drawn = "Chart.getChart(document.getElementById('health-chart')).getDatasetMeta(0).data.length"
    assert page.evaluate(drawn) == 2
    page.click("text=7 days")
    wait_until(page, "() => Chart.getChart(document.getElementById('health-chart')).data.labels.length === 168")
    assert errors == []
