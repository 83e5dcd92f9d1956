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


def test_the_chart_writes_its_times_in_utc_the_way_the_pages_language_does(
    live_server,
    admin,
    upstream,
    make_channel,
    browser,  # noqa: F811
):
    """A Chinese reader on a US-English browser in New York: the chart's hours are UTC, as every
    other time on the page, written the Chinese way, and its axis says UTC."""
    import datetime as dt

    from django.utils import translation

    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    ch = make_channel("gpu-zh", upstream().base_url)
    client = Client()
    client.force_login(admin)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value

    context = browser.new_context(locale="en-US", timezone_id="America/New_York")
    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": live_server.url}])
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/channels/{ch.pk}/health/")
    page.click("#health-range button[data-range='7d']")
    chart = "Chart.getChart(document.getElementById('health-chart'))"
    wait_until(page, f"() => window.Chart && {chart} && {chart}.data.labels.length === 168")

    series = page.evaluate(
        "async () => (await (await fetch(document.getElementById('health-chart').dataset.url + '?range=7d')).json())"
    )
    hours = [dt.datetime.fromisoformat(label).astimezone(dt.UTC) for label in series["labels"]]
    assert page.evaluate(f"{chart}.data.labels") == [f"{h.month}月{h.day}日 {h:%H}:00" for h in hours]
    with translation.override("zh-hans"):
        axis = translation.gettext("Time (UTC)")
    assert "UTC" in axis and axis != "Time (UTC)"
    assert page.evaluate(f"{chart}.options.scales.x.title.text") == axis
    assert errors == []
    context.close()
