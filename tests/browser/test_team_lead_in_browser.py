"""A team lead in a real browser: lena leads team alpha (30 requests/minute for all its members);
she sets alice's own limit (the server refuses one above the team's), creates a key for alice,
sees it among the team's keys, and revokes it. Another developer's key is not hers to see."""

from __future__ import annotations

import pytest

from keys.models import Key
from keys.services import issue_key
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_team_lead_manages_a_members_limits_and_key(live_server, browser, lena, alice, mallory, team):
    team.requests_per_minute = 30
    team.save()
    mallorys = issue_key(owner=mallory, name="mallory laptop")[0]
    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("lena", "lena-pass-123")
    assert "team lead" in robot.text("nav")
    robot.click("nav >> text=My team")
    robot.click("tr[data-member=alice] >> text=Limits")
    assert "The team's limit (all members together): 30." in robot.text("#id_requests_per_minute ~ small.help")
    robot.fill("#id_requests_per_minute", "40")
    robot.click("button:text-is('Save')")
    assert "Cannot exceed the team alpha's limit of 30." in robot.text("#id_requests_per_minute ~ .field-error")
    robot.fill("#id_requests_per_minute", "20")
    robot.click("button:text-is('Save')")
    assert "Limits of alice saved." in robot.text(".flash-success")
    alice.refresh_from_db()
    assert alice.requests_per_minute == 20

    robot.click("tr[data-member=alice] >> text=New key")
    robot.fill("#id_name", "ci")
    robot.click("button:has-text('Create key')")
    key = Key.objects.get(owner=alice, name="ci")
    assert "for alice" in robot.text(".flash-success")
    assert "Team alpha" in robot.text("#key-limits")

    robot.click("nav >> text=Team keys")
    listed = robot.text("main")
    assert key.masked in listed and mallorys.masked not in listed
    robot.click(f"a:text-is('{key.name}')")
    robot.click("a[role=button]:text-is('Revoke')")
    robot.click("button:has-text('Revoke key')")
    assert "revoked" in robot.text(".flash-success")
    key.refresh_from_db()
    assert key.revoked_at is not None

    refused = robot.page.goto(f"{live_server.url}/keys/{mallorys.pk}/")  # typed, as anyone could
    assert refused is not None and refused.status == 404
    # The refused limits form comes back as 400 and mallory's key as 404, which chromium logs.
    assert [e for e in robot.console_errors if "status of 400" not in e and "status of 404" not in e] == []
