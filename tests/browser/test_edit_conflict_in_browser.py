"""Two admins edit the same team in two browsers: the later save does not undo the earlier one
unseen. The page says so, keeps what the second admin typed, and saves it when sent again."""

from __future__ import annotations

import pytest

from accounts.models import Team
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_save_over_another_admins_change_is_shown_kept_and_saved_when_sent_again(live_server, browser, admin):
    team = Team.objects.create(name="red", tokens_per_day=1000)
    robots = [Robot(browser.new_context().new_page(), live_server.url) for _ in range(2)]
    for robot in robots:
        robot.goto("/")
        robot.log_in("admin", "admin-pass-123")
        robot.goto(f"/teams/{team.pk}/")
        robot.click("main a:text-is('Edit team')")
        robot.page.wait_for_url(f"**/teams/{team.pk}/edit/")
    first, second = robots

    second.fill("#id_tokens_per_day", "777")  # the second admin saves first…
    second.click("main button[type=submit]")
    second.page.wait_for_url(f"**/teams/{team.pk}/")
    team.refresh_from_db()
    assert team.tokens_per_day == 777

    first.fill("#id_description", "for the red squad")  # …the first saves from the page as it was
    first.click("main button[type=submit]")
    first.page.wait_for_selector(".form-errors")
    assert "red was changed by someone else since this page was opened" in first.text(".form-errors")
    assert first.page.input_value("#id_description") == "for the red squad"  # nothing typed is lost
    team.refresh_from_db()
    assert (team.tokens_per_day, team.description) == (777, "")  # and theirs is not overwritten unseen

    first.click("main button[type=submit]")  # sent again: the first admin's choice
    first.page.wait_for_url(f"**/teams/{team.pk}/")
    team.refresh_from_db()
    assert (team.tokens_per_day, team.description) == (1000, "for the red squad")
    # chromium logs the 409 document itself as a failed load; nothing else may be logged
    assert [e for e in first.console_errors if "status of 409 (Conflict)" not in e] == []
    assert len(first.console_errors) == 1 and second.console_errors == []
