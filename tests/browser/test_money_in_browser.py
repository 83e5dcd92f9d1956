"""Money in a real browser: an admin prices a route and gives team alpha a daily budget; alice, a
member, then sees what she spent and what is left of the team's budget on My usage and Connect."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from channels.models import Channel, Model, ModelRoute, RoutePrice
from gateway.usage import UsageEvent, write_batch
from keys.models import Budget
from keys.services import issue_key
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_admin_sets_prices_and_a_team_budget_and_a_developer_sees_what_is_left(
    live_server, browser, admin, alice, team
):
    channel = Channel.objects.create(name="cloud-a", base_url="https://api.example.com/v1", locality="external")
    route = ModelRoute.objects.create(model=Model.objects.create(name="gpt-4.1"), channel=channel)
    key = issue_key(owner=alice, name="laptop")[0]

    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    robot.click("nav >> text=Models")
    robot.click("a[role=button]:text-is('Prices')")
    assert "no price" in robot.text("[data-testid=prices]")
    robot.page.select_option("#id_route", str(route.pk))
    robot.fill("#id_input", "1000")
    robot.fill("#id_cached_input", "100")
    robot.fill("#id_output", "2000")
    robot.click("button:text-is('Save the price')")
    assert "Price saved" in robot.text(".flash-success")
    assert "2000.000" in robot.text("[data-testid=prices]")
    price = RoutePrice.objects.get(route=route)
    assert (price.input, price.output) == (1000, 2000)

    robot.click("nav a:text-is('Usage')")
    robot.click("a[role=button]:text-is('Budgets')")
    robot.page.select_option("#id_target", f"team:{team.pk}")
    robot.page.select_option("#id_window", "day")
    robot.fill("#id_amount", "0.05")
    robot.fill("#id_alert_percent", "80")
    robot.click("button:text-is('Save the budget')")
    assert "Budget saved" in robot.text(".flash-success")
    assert "$0.05" in robot.text("[data-testid=budget-list]")
    assert Budget.objects.get(team=team).amount == Decimal("0.05")

    # alice's request cost 1 + 5 tokens at 1000 / 2000 per million: $0.011 of the $0.05
    write_batch(
        [
            UsageEvent(
                created=timezone.now(),
                request_id="r1",
                key_id=key.id,
                user_id=alice.id,
                team_id=team.id,
                model="gpt-4.1",
                channel_id=channel.id,
                surface="chat",
                stream=False,
                prompt_tokens=1,
                completion_tokens=5,
                estimated=False,
                status="ok",
                http_status=200,
                cost_nanos=11_000_000,
            )
        ]
    )
    dev = Robot(browser.new_context().new_page(), live_server.url)
    dev.goto("/")
    dev.log_in("alice", "alice-pass-123")
    dev.click("nav a:text-is('Usage')")
    assert dev.text("[data-testid=spend]") == "$0.0110"
    budgets = dev.text("[data-testid=budgets]")
    assert "Your team alpha" in budgets and "$0.04" in budgets
    dev.click("nav >> text=Connect your tools")
    assert "$0.04" in dev.text("[data-testid=budgets]")

    # The admin removes the budget: a confirmation page first (it was one click), then it is gone.
    robot.goto("/usage/budgets/")
    robot.click("[data-testid=budget-list] a[role=button]:text-is('Remove')")
    assert "Its spending is no longer capped." in robot.text("main")
    assert Budget.objects.filter(team=team).exists()
    robot.click("main button[type=submit]:text-is('Remove budget')")
    assert "Budget removed." in robot.text(".flash-success")
    assert not Budget.objects.filter(team=team).exists()
    assert robot.console_errors == [] and dev.console_errors == []
