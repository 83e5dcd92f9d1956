"""The portal in Simplified Chinese, in a real browser whose own language is English: switching on
the login page, the admin's first steps (headings, buttons, a field error), the choice kept across
logging out and in from another browser, the audit log's entries, and a developer's Connect page with
its client notes."""

from __future__ import annotations

import pytest

from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def switch_to_chinese(robot: Robot) -> None:
    robot.page.select_option("#language-switch", "zh-hans")
    robot.click(".language-switch button[type=submit]")
    robot.page.wait_for_load_state()


def test_an_admin_switches_to_chinese_and_keeps_it_across_logins(live_server, browser, admin):
    robot = Robot(browser.new_context(locale="en-US").new_page(), live_server.url)
    robot.goto("/login/")
    assert robot.text("h1") == "Log in to Gateway Portal"
    switch_to_chinese(robot)
    assert robot.text("h1") == "登录 Gateway Portal"
    assert robot.text("main button[type=submit]") == "登录"
    robot.log_in("admin", "admin-pass-123")

    robot.click("header a[href='/channels/']")
    assert robot.text("main h1") == "渠道"
    assert robot.text("main a[href='/channels/new/']") == "添加渠道"
    robot.click("header a[href='/account/']")
    assert robot.text("main h2") == "API 令牌"
    assert robot.console_errors == []
    robot.fill("#id_name", "   ")  # passes the browser's `required`, not the server's
    robot.click("text=创建令牌")
    assert robot.text(".field-error") == "该字段是必填项。"  # answered 400, as a form error is

    # Another browser, still English by itself: the saved choice comes back with the login.
    admin.refresh_from_db()
    assert admin.language == "zh-hans"
    again = Robot(browser.new_context(locale="en-US").new_page(), live_server.url)
    again.goto("/login/")
    assert again.text("h1") == "Log in to Gateway Portal"
    again.log_in("admin", "admin-pass-123")
    again.click("header a[href='/hosts/']")
    assert again.text("main h1") == "GPU 主机"
    assert again.console_errors == []


def test_an_admin_reads_what_they_did_in_the_audit_log_in_chinese(live_server, browser, admin):
    """The entries are stored in English with their msgid (whoever wrote them, in any language);
    the page shows them in the reader's."""
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    robot = Robot(browser.new_context(locale="en-US").new_page(), live_server.url)
    robot.goto("/login/")
    robot.log_in("admin", "admin-pass-123")
    robot.click("header a[href='/account/']")
    robot.fill("#id_name", "deploy")
    robot.click("text=创建令牌")
    robot.click("main td.actions a:text-is('吊销')")
    robot.click("main article.confirm button[type=submit]")
    robot.click("header a[href='/audit-log/']")
    rows = robot.page.locator("main tbody tr")
    assert "已吊销 API 令牌" in rows.nth(0).inner_text() and "API 令牌" in rows.nth(0).inner_text()
    page = robot.text("main")
    assert "已创建 API 令牌" in page and "API token" not in page
    assert robot.console_errors == []


def test_a_developer_chooses_chinese_on_the_account_page_and_connects(live_server, browser, alice):
    robot = Robot(browser.new_context(locale="en-US").new_page(), live_server.url)
    robot.goto("/login/")
    robot.log_in("alice", "alice-pass-123")
    robot.click("header a[href='/account/']")
    robot.page.select_option("#id_language", "zh-hans")
    robot.click("text=Save language")
    assert robot.text("main h1").startswith("账号")

    robot.click("header a[href='/connect/']")
    assert robot.text("main h1") == "接入你的工具"
    assert robot.text("#get-installer") == "获取一行命令安装程序"
    robot.click("nav.client-tabs a:text-is('Cline')")
    assert "安装前请退出 VS Code" in robot.text("main")
    assert robot.console_errors == []
