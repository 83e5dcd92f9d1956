"""Limits have an owner, in a real browser: the admin issues alice a key with 60 requests/minute
and 200,000 tokens/day; alice sees which limits bind and who set them, can lower them, and cannot
raise or clear them (the form says so on the field; the server refuses whatever the browser sends).
Keyboard only: alice logs in and creates her own key without the mouse."""

from __future__ import annotations

import pytest

from keys.models import Key
from tests.browser.robot import Robot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def admin_issues_alice_a_key(browser, live_server, alice, fields: dict[str, str]) -> tuple[Key, Robot]:
    """The admin creates the key "issued" for alice on her user page, with `fields` filled in; the
    key and the admin's browser page."""
    admin_robot = Robot(browser.new_context().new_page(), live_server.url)
    admin_robot.goto("/")
    admin_robot.log_in("admin", "admin-pass-123")
    admin_robot.click("nav >> text=Users")
    admin_robot.click("a:text-is('alice')")
    admin_robot.click("text=Create a key for alice")
    admin_robot.fill("#id_name", "issued")
    for selector, value in fields.items():
        admin_robot.fill(selector, value)
    admin_robot.click("button:has-text('Create key')")
    return Key.objects.get(owner=alice, name="issued"), admin_robot


def alice_opens_the_issued_key(browser, live_server) -> Robot:
    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("alice", "alice-pass-123")
    robot.click("nav >> text=My keys")
    robot.click("a:text-is('issued')")
    return robot


def test_admin_issued_limits_are_ceilings_alice_can_only_lower(live_server, browser, admin, alice):
    alice.tokens_per_month = 1_000_000
    alice.save()
    key, admin_robot = admin_issues_alice_a_key(
        browser, live_server, alice, {"#id_requests_per_minute": "60", "#id_tokens_per_day": "200000"}
    )
    assert key.admin_ceilings == {"requests_per_minute": 60, "tokens_per_day": 200_000}

    robot = alice_opens_the_issued_key(browser, live_server)
    limits = robot.page.locator("#key-limits")
    rpm = limits.locator("tr[data-limit=requests_per_minute]").inner_text()
    assert "60" in rpm and "key, set by an admin" in rpm
    month = limits.locator("tr[data-limit=tokens_per_month]").inner_text()
    assert "1,000,000" in month and "user limit, set by an admin" in month
    assert "nobody" in limits.locator("tr[data-limit=tokens_per_minute]").inner_text()

    robot.click("a[role=button]:text-is('Edit')")
    help_text = robot.text("#id_tokens_per_day ~ small.help")
    assert "Set by an admin: at most 200,000" in help_text
    # The browser's own checks would stop these; remove them, as anyone can, and the server refuses.
    robot.page.evaluate(
        "document.querySelectorAll('input').forEach(i => { i.removeAttribute('max'); i.required = false; })"
    )
    robot.fill("#id_tokens_per_day", "")
    robot.fill("#id_requests_per_minute", "600")
    robot.click("button:text-is('Save')")
    assert "you can lower it but not remove it" in robot.text("#id_tokens_per_day ~ .field-error")
    assert "you can lower it but not raise it" in robot.text("#id_requests_per_minute ~ .field-error")
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_day) == (60, 200_000)

    robot.fill("#id_tokens_per_day", "50000")
    robot.fill("#id_requests_per_minute", "30")
    robot.click("button:text-is('Save')")
    assert "saved" in robot.text(".flash-success")
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_day) == (30, 50_000)
    rpm = robot.page.locator("#key-limits tr[data-limit=requests_per_minute]").inner_text()
    assert "key, set by alice" in rpm and "ceiling on this key: 60" in rpm
    # The refused form comes back as 400 (field errors), which chromium logs; nothing else may.
    assert [e for e in robot.console_errors if "status of 400" not in e] == []
    assert len(robot.console_errors) == 1 and admin_robot.console_errors == []


def test_keyboard_only_login_and_key_creation(live_server, browser, alice):
    page = browser.new_context().new_page()
    robot = Robot(page, live_server.url)
    robot.goto("/login/")
    wait_until(page, "document.activeElement && document.activeElement.id === 'id_username'")  # autofocus
    page.keyboard.type("alice")
    page.keyboard.press("Tab")
    page.keyboard.type("alice-pass-123")
    page.keyboard.press("Enter")
    page.wait_for_url(live_server.url + "/")

    # The skip link comes first and lands in the page's content.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    # Then Tab to "New key", Enter, type a name (the field has the focus), Enter.
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == "New key":
            break
    else:
        raise AssertionError("New key is not reachable with Tab")
    page.keyboard.press("Enter")
    # The name field has the focus (autofocus): it comes with the page's next rendering, after the
    # field exists (CI saw it read before that), so wait for it, not for the field.
    wait_until(page, "document.activeElement && document.activeElement.id === 'id_name'")
    page.keyboard.type("keyboard")
    page.keyboard.press("Enter")
    page.wait_for_selector("#new-key")
    assert Key.objects.get(owner=alice).name == "keyboard"
    assert robot.console_errors == []


def test_alice_narrows_the_addresses_an_admin_set_and_widens_them_back_up_to_it(live_server, browser, admin, alice):
    """The admin restricts the key he issues alice to 10.0.0.0/8. Her edit form says so; she narrows
    it to one subnet, then, that subnet being wrong, widens it back to exactly the admin's value,
    and no further: each through the form, as a browser sends it."""
    key, admin_robot = admin_issues_alice_a_key(browser, live_server, alice, {"#id_ip_allowlist": "10.0.0.0/8"})
    assert key.admin_ceilings == {"ip_allowlist": ["10.0.0.0/8"]}

    robot = alice_opens_the_issued_key(browser, live_server)
    robot.click("a[role=button]:text-is('Edit')")
    assert "Set by an admin: only from 10.0.0.0/8" in robot.text("#id_ip_allowlist ~ small.help")
    for allowlist in ("10.1.0.0/16", "10.0.0.0/8"):
        robot.fill("#id_ip_allowlist", allowlist)
        robot.click("button:text-is('Save')")
        assert "saved" in robot.text(".flash-success")
        key.refresh_from_db()
        assert key.ip_allowlist == [allowlist]
        robot.click("a[role=button]:text-is('Edit')")
    robot.fill("#id_ip_allowlist", "0.0.0.0/0")
    robot.click("button:text-is('Save')")
    assert "An admin restricted the addresses of this key" in robot.text("#id_ip_allowlist ~ .field-error")
    key.refresh_from_db()
    assert key.ip_allowlist == ["10.0.0.0/8"]
    # The refused form comes back as 400 (field errors), which chromium logs; nothing else may.
    assert [e for e in robot.console_errors if "status of 400" not in e] == []
    assert admin_robot.console_errors == []
