"""Request logs in a real browser: the stored requests come 50 to a page, the filter form narrows
them by a key typed into the picker (a text input with suggestions) and by status, and paging keeps
the filter."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from keys.models import RequestPayload
from keys.services import issue_key
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_stored_requests_paginate_and_filter_with_the_form(live_server, browser, admin, alice, mallory):
    laptop, _ = issue_key(owner=alice, name="laptop")
    for n in range(200):  # the picker must stay a text input however many keys there are
        issue_key(owner=mallory, name=f"script-{n}")
    now = timezone.now()
    for i in range(130):
        RequestPayload.objects.create(
            created=now - dt.timedelta(minutes=i),
            expires_at=now + dt.timedelta(days=1),
            request_id=f"req-{i}",
            key=laptop if i < 110 else None,
            user=alice,
            model="qwen3-32b",
            status="ok" if i % 10 else "upstream_error",
            http_status=200 if i % 10 else 502,
            request_body=b"",
            response_body=b"",
        )
    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    robot.page.goto(live_server.url + "/usage/request-logs/")
    rows = robot.page.locator("#stored-requests-table tbody tr")
    assert rows.count() == 50 and "Page 1 of 3 · 130 total" in robot.text(".pagination")
    assert robot.page.locator("select[name=key]").count() == 0

    robot.fill(".filter-bar input[name=key]", f"{laptop.masked} laptop (alice)")
    robot.page.select_option(".filter-bar select[name=status]", "ok")
    robot.click(".filter-bar button[type=submit]")
    robot.page.wait_for_url("**status=ok**")
    assert "Page 1 of 2 · 99 total" in robot.text(".pagination")  # 110 of the key, 11 of them errors
    robot.click(".pagination a[rel=next]")
    robot.page.wait_for_url("**page=2**")
    assert rows.count() == 49 and "status=ok" in robot.page.url
    assert robot.page.locator(".filter-bar select[name=status]").input_value() == "ok"
    assert robot.console_errors == []


def test_an_admin_removes_a_logging_policy_after_a_confirmation(live_server, browser, admin, alice):
    from keys.models import PayloadLogging

    policy = PayloadLogging.objects.create(user=alice, retention_days=7)
    robot = Robot(browser.new_context().new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    robot.goto("/usage/request-logs/")
    robot.click("main table a[role=button]:text-is('Remove')")
    assert "Remove the request logging policy for user alice: logged, kept 7 days?" in robot.text("main")
    assert PayloadLogging.objects.filter(pk=policy.pk).exists()  # asking removed nothing
    robot.click("main button[type=submit]:text-is('Remove')")
    assert "Removed: user alice: logged, kept 7 days." in robot.text(".flash-success")
    assert not PayloadLogging.objects.exists()
    assert robot.console_errors == []
