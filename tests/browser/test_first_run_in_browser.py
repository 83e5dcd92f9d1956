"""The first run in a real browser: the admin's empty dashboard shows the path as a checklist whose
steps tick themselves as the admin does them, and the portal warns when the browser reached it by
another host name than the one every generated file uses (PORTAL_PUBLIC_URL)."""

from __future__ import annotations

import pytest

from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _states(robot: Robot) -> dict[str, str]:
    return robot.page.eval_on_selector_all(
        "#first-run li[data-step]", "items => Object.fromEntries(items.map(i => [i.dataset.step, i.className]))"
    )


def test_the_checklist_ticks_itself_as_the_admin_goes(live_server, browser, admin):
    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    assert _states(robot) == {"source": "todo", "model": "todo", "developer": "todo", "key": "todo", "connect": "todo"}

    robot.click("#first-run li[data-step=source] a:text-is('Add a channel')")
    robot.fill("#id_name", "local")
    robot.fill("#id_base_url", "http://127.0.0.1:9/v1")
    robot.click("button:has-text('Add channel')")
    robot.click("a.brand")
    assert _states(robot)["source"] == "done" and _states(robot)["model"] == "todo"

    robot.click("#first-run li[data-step=developer] a:text-is('Add a developer')")
    robot.fill("#id_username", "bob")
    robot.click("main button[type=submit]")
    robot.click("a.brand")
    states = _states(robot)
    assert (states["source"], states["developer"], states["model"]) == ("done", "done", "todo")
    assert (
        robot.page.locator("#first-run li.done .step-label").first.evaluate(
            "e => getComputedStyle(e).textDecorationLine"
        )
        == "line-through"
    )
    assert robot.console_errors == []


def test_the_lan_warning_appears_when_opened_by_another_host_name(live_server, browser, admin, settings):
    port = live_server.url.rsplit(":", 1)[1]
    settings.PORTAL_PUBLIC_URL = f"http://localhost:{port}"
    page = browser.new_context().new_page()
    by_name = Robot(page, f"http://localhost:{port}")
    by_name.goto("/")
    by_name.log_in("admin", "admin-pass-123")
    assert page.locator("#public-url-warning").count() == 0
    by_address = Robot(browser.new_context().new_page(), f"http://127.0.0.1:{port}")
    by_address.goto("/")
    by_address.log_in("admin", "admin-pass-123")
    warning = by_address.text("#public-url-warning")
    assert f"You opened the portal as 127.0.0.1, but every generated file points at http://localhost:{port}." in warning
    assert "PORTAL_PUBLIC_URL" in warning
    by_address.goto("/connect/")
    assert "PORTAL_PUBLIC_URL" in by_address.text("#public-url-warning")
