"""A real browser, an admin and a vLLM-like server that answers only the ids it lists: a route
whose id is mistyped shows up on the dashboard, the admin follows it to the channel, sees what the
server serves, corrects the route on the model's page, and the warning is gone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from channels.health import services
from channels.models import Channel, Model, ModelRoute, ProbeResult
from tests.browser.robot import Robot
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def check_in_a_thread() -> None:
    """A health round, off this thread: Playwright's sync API keeps an event loop running on it."""

    def round_() -> None:
        try:
            services.run_round()
        finally:
            connection.close()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(round_).result()


def test_admin_finds_and_fixes_a_route_the_server_does_not_serve(live_server, browser, admin, screenshots):
    with FakeUpstream(models=["Qwen/Qwen3-8B"], strict_models=True) as up:
        channel = Channel.objects.create(name="gpu-a", kind="vllm", base_url=up.base_url)
        model = Model.objects.create(name="qwen3-8b")
        ModelRoute.objects.create(model=model, channel=channel, upstream_model="Qwen3-8B")  # the org is missing
        check_in_a_thread()
        probe = ProbeResult.objects.get(channel=channel)
        assert probe.ok and probe.model == "Qwen/Qwen3-8B"  # the typo is the route's fault, not the channel's

        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        robot = Robot(page, live_server.url)
        robot.goto("/")
        robot.log_in("admin", "admin-pass-123")
        attention = robot.text("#attention")
        assert "qwen3-8b → gpu-a" in attention and "does not list Qwen3-8B" in attention, attention

        robot.click("#attention a:has-text('qwen3-8b → gpu-a')")
        row = robot.text("main table tr:has(code:text-is('Qwen3-8B'))")
        assert "not served" in row, row
        page.screenshot(path=f"{screenshots}/route_not_served.png", full_page=True)
        robot.click("main a:has-text('what it serves')")
        assert "Qwen/Qwen3-8B" in robot.text("#served-models")

        robot.goto(f"/models/{model.pk}/")
        robot.click("main a[role=button]:has-text('Edit')")
        page.fill("#id_routes-0-upstream_model", "Qwen/Qwen3-8B")
        robot.click("main button[type=submit]")
        assert robot.text(".flash-success") == "Model qwen3-8b saved."
        assert "not served" not in robot.text("main")  # at once: the flag names the id that was left out
        robot.goto("/")
        assert "qwen3-8b → gpu-a" not in robot.text("#attention")

        check_in_a_thread()  # and the next check agrees
        assert ModelRoute.objects.get(model=model).unlisted_upstream_id == ""
        assert not robot.console_errors, robot.console_errors
