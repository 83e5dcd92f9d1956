"""A real browser on the model page: a route removed and added again keeps its price history, and
removing a priced route is refused until the admin ticks that its prices go too."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from channels.models import Channel, Model, ModelRoute, RoutePrice
from channels.services import set_route_price
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_edits_routes_and_prices_go_only_when_confirmed(live_server, browser, admin, screenshots):
    channel = Channel.objects.create(name="cloud", kind="openai", base_url="https://api.example.com/v1")
    model = Model.objects.create(name="gpt-mini")
    route = ModelRoute.objects.create(model=model, channel=channel, upstream_model="gpt-4o-mini")
    set_route_price(route, input=1, output=2, effective_from=timezone.now() - datetime.timedelta(days=30))
    set_route_price(route, input="0.15", output="0.6")
    history = set(RoutePrice.objects.values_list("pk", flat=True))
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    robot = Robot(page, live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    robot.goto(f"/models/{model.pk}/")

    # Start the row afresh: remove it and name its channel again in the empty row.
    robot.click("main a[role=button]:has-text('Edit')")
    assert "The routes to cloud have prices." in robot.text("main")
    page.check("#id_routes-0-DELETE")
    page.select_option("#id_routes-1-channel", label="cloud")
    page.fill("#id_routes-1-upstream_model", "gpt-4o-mini-2024-07-18")
    robot.click("main button[type=submit]")
    assert robot.text(".flash-success") == "Model gpt-mini saved."
    kept = ModelRoute.objects.get(model=model)
    assert (kept.pk, kept.upstream_model) == (route.pk, "gpt-4o-mini-2024-07-18")
    assert set(RoutePrice.objects.values_list("pk", flat=True)) == history

    # Removing it: refused (nothing saved) until the box says its prices go too.
    robot.click("main a[role=button]:has-text('Edit')")
    page.check("#id_routes-0-DELETE")
    robot.click("main button[type=submit]")
    error = robot.text(".field:has(#id_remove_priced_routes) .field-error")
    assert "The routes to cloud have prices" in error
    assert ModelRoute.objects.filter(model=model).count() == 1 and RoutePrice.objects.count() == 2
    page.screenshot(path=f"{screenshots}/model_route_priced_removal.png", full_page=True)
    page.check("#id_routes-0-DELETE")  # (the page kept the tick; checking again is harmless)
    page.check("#id_remove_priced_routes")
    robot.click("main button[type=submit]")
    assert robot.text(".flash-success") == "Model gpt-mini saved."
    assert not ModelRoute.objects.filter(model=model).exists() and not RoutePrice.objects.exists()
    # The refused save answered 400 (chromium logs it); nothing else may be in the console.
    assert not [e for e in robot.console_errors if "status of 400" not in e], robot.console_errors
