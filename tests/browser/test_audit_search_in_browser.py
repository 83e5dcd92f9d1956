"""An admin who reads the portal in 中文 searches the audit log for what they see on it: they add a
channel and a key and revoke the key by clicking, open the audit log, type a word of one entry as
the page shows it (the action, the kind of object, the message) and see exactly the entries that
show that word; the REST API, with a token and `Accept-Language: zh-Hans`, finds the same."""

from __future__ import annotations

import httpx
import pytest

from accounts.models import AuditLog
from accounts.services import issue_token
from tests.browser.robot import Robot
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def upstream():
    up = FakeUpstream(models=["Qwen/Qwen3-32B"]).start()
    yield up
    up.stop()


def rows_shown(robot: Robot) -> list[str]:
    return [r.inner_text() for r in robot.page.locator("main tbody tr").all()]


def search(robot: Robot, words: str) -> list[str]:
    robot.fill("main form[role=search] input[name=q]", words)
    with robot.page.expect_navigation():
        robot.page.press("main form[role=search] input[name=q]", "Enter")
    return rows_shown(robot)


def test_an_admin_reading_chinese_finds_entries_by_the_words_on_the_audit_page(live_server, browser, admin, upstream):
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    robot = Robot(browser.new_context(locale="en-US").new_page(), live_server.url)
    robot.goto("/login/")
    robot.log_in("admin", "admin-pass-123")

    robot.click("header a[href='/channels/']")
    robot.click("main a[href='/channels/new/']")
    robot.fill("#id_name", "cloud-qwen")
    robot.page.select_option("#id_kind", "vllm")
    robot.fill("#id_base_url", upstream.base_url)
    robot.click("main form button[type=submit]")
    robot.page.wait_for_selector(".flash-success")

    robot.click("header a[href='/keys/']")
    robot.click("main a[href='/keys/new/']")
    robot.fill("#id_name", "laptop")
    robot.click("main form button[type=submit]")
    robot.page.wait_for_selector(".flash-success")
    robot.click("main a[href$='/revoke/']")
    robot.click("main article.confirm button[type=submit]")
    robot.page.wait_for_selector(".flash-success")

    robot.click("header a[href='/account/']")
    robot.fill("#id_name", "deploy")
    robot.click("text=创建令牌")
    robot.click("main td.actions a:text-is('吊销')")
    robot.click("main article.confirm button[type=submit]")
    robot.page.wait_for_selector(".flash-success")

    robot.click("header a[href='/audit-log/']")
    # A click returns once the navigation starts: read the rows of the page it lands on, not of
    # the page it leaves or of the blank document between them (CI read [] that way).
    robot.page.wait_for_url(live_server.url + "/audit-log/")
    robot.page.locator("main tbody tr").first.wait_for()
    everything = rows_shown(robot)
    channel = [r for r in everything if "cloud-qwen" in r]
    key_created, key_revoked = (
        [r for r in everything if "laptop" in r and action in r.split("\t")] for action in ("创建", "修改")
    )
    token_revoked = [r for r in everything if "已吊销 API 令牌" in r]
    assert len(channel) == len(key_created) == len(key_revoked) == len(token_revoked) == 1, everything
    assert "渠道" in channel[0] and "密钥" in key_revoked[0]  # the page names each kind in Chinese

    # Each word as the page shows it finds exactly the entries that show it.
    assert search(robot, "渠道") == channel  # the kind of object
    assert search(robot, "密钥") == key_revoked + key_created  # newest first
    assert search(robot, "已吊销") == token_revoked  # the message
    changed = search(robot, "修改")  # the action: the key revoked, and the admin's own language saved
    assert key_revoked[0] in changed and all(r.split("\t")[2] == "修改" for r in changed)
    assert len(changed) == AuditLog.objects.filter(action="update").count()
    assert search(robot, "cloud-qwen") == channel  # names as before
    assert robot.console_errors == []

    # The API, with a token and the reader's language in Accept-Language, finds the same rows.
    _, secret = issue_token(user=admin, name="audit script")
    api = httpx.Client(base_url=live_server.url, headers={"Authorization": f"Token {secret}"}, timeout=30)

    def found(words: str) -> list[tuple[str, str, str]]:
        answer = api.get("/api/audit-log/", params={"q": words}, headers={"Accept-Language": "zh-Hans"})
        assert answer.status_code == 200, answer.text
        return [(r["action"], r["object_type"], r["object_repr"]) for r in answer.json()["results"]]

    assert found("渠道") == [("create", "channel", "cloud-qwen")]
    assert [r[:2] for r in found("密钥")] == [("update", "key"), ("create", "key")]
    assert [r[1] for r in found("已吊销")] == ["apitoken"]
    assert found("渠道") != [] and api.get("/api/audit-log/", params={"q": "渠道"}).json()["results"] == []  # English
