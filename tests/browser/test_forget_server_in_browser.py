"""A real browser: a deployment says Running, but its host no longer answers over SSH (127.0.0.1
port 1, refused at once). The admin opens it, clicks "Forget this server", changes their mind on
the confirmation (Cancel leaves it Running and routed), then confirms: the page says it is
forgotten, shows it Failed, and says who forgot it. The same pages in Chinese; a developer is never
offered the button."""

from __future__ import annotations

import asyncssh
import pytest

from channels.models import Channel
from hosts import backends
from hosts.choices import DeploymentStatus, HostStatus
from hosts.models import Deployment, Host
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stranded():
    """Running when its host was last reached; the host is gone since (nothing listens on port 1)."""
    host = Host.objects.create(
        name="gpu-gone",
        address="127.0.0.1",
        ssh_port=1,
        username="ubuntu",
        private_key=asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode(),
        host_key_fingerprint="SHA256:pinned",
        status=HostStatus.UNREACHABLE,
    )
    channel = Channel.objects.create(name="tiny", kind="vllm", base_url="http://127.0.0.1:1/v1")
    return Deployment.objects.create(
        name="tiny",
        host=host,
        backend="vllm",
        model_path="Qwen/Qwen3-8B",
        served_model_name="tiny-chat",
        port=8001,
        options=backends.get("vllm").clean_options({}, 1),  # as the form saves them
        status=DeploymentStatus.RUNNING,
        channel=channel,
    )


def log_in(robot: Robot, path: str, username: str, password: str) -> None:
    robot.goto(path)  # a bookmark: the login page first, then back to it
    robot.fill("#id_username", username)
    robot.fill("#id_password", password)
    robot.click("main button[type=submit]")
    robot.page.wait_for_url(robot.base_url + path)


def test_admin_forgets_a_server_whose_host_is_gone_after_confirming(live_server, browser, admin, stranded, screenshots):
    detail = f"/deployments/{stranded.pk}/"
    page = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US").new_page()
    robot = Robot(page, live_server.url)
    log_in(robot, detail, "admin", "admin-pass-123")
    assert "Running" in robot.text("main h1 + p")

    # Cancel on the confirmation: back on the deployment's page, nothing changed.
    robot.click("#forget-server")
    page.wait_for_url(f"{live_server.url}{detail}forget/")
    assert robot.text("main h1") == "Forget this server"
    assert "Forget the server of tiny without stopping it?" in robot.text("article.confirm")
    assert "Nothing is sent to the host" in robot.text("article.confirm")
    assert not robot.axe_violations()
    page.screenshot(path=f"{screenshots}/forget_server_confirm.png", full_page=True)
    robot.click("article.confirm a:has-text('Cancel')")
    page.wait_for_url(live_server.url + detail)
    stranded.refresh_from_db()
    assert stranded.status == DeploymentStatus.RUNNING and stranded.channel.enabled
    assert not stranded.events.exists()
    assert "Running" in robot.text("main h1 + p")

    # Confirmed: SSH is tried once more (refused), then the deployment lets go of its server.
    robot.click("#forget-server")
    robot.click("article.confirm button[type=submit]")
    page.wait_for_url(live_server.url + detail)
    assert robot.text(".flash-success") == "tiny forgotten; its server was not stopped."
    status = robot.text("main h1 + p")
    assert status.startswith("Failed") and "Forgotten without stopping its server: SSH to gpu-gone failed" in status
    assert "refused" in status  # SSH was tried once more, at the host's address
    event = page.locator("#deployment-events tbody tr").first
    assert "Running → Failed" in event.inner_text() and "admin" in event.inner_text()  # who forgot it
    assert page.locator("#forget-server").count() == 0
    assert "Disabled" in robot.text("#deployment-channel-status")
    page.screenshot(path=f"{screenshots}/forget_server_done.png", full_page=True)
    stranded.refresh_from_db()
    assert stranded.status == DeploymentStatus.FAILED and not stranded.channel.enabled
    assert robot.console_errors == [], "\n".join(robot.console_errors)


def test_the_forget_pages_are_in_chinese(live_server, browser, admin, stranded):
    detail = f"/deployments/{stranded.pk}/"
    page = browser.new_context(locale="zh-CN").new_page()  # the browser asks for Chinese (Accept-Language)
    robot = Robot(page, live_server.url)
    log_in(robot, detail, "admin", "admin-pass-123")
    assert robot.text("#forget-server") == "放弃此服务器"
    robot.click("#forget-server")
    assert robot.text("main h1") == "放弃此服务器"
    confirm = robot.text("article.confirm")
    assert "不停止而放弃 tiny 的服务器？" in confirm and "Forget" not in confirm
    robot.click("article.confirm a:has-text('取消')")
    page.wait_for_url(live_server.url + detail)
    robot.click("#forget-server")
    robot.click("article.confirm button[type=submit]")
    page.wait_for_url(live_server.url + detail)
    assert robot.text(".flash-success") == "已放弃 tiny；它的服务器没有被停止。"
    status = robot.text("main h1 + p")
    assert status.startswith("失败") and "已放弃，未停止其服务器" in status and "Forgotten" not in status
    assert "admin" in page.locator("#deployment-events tbody tr").first.inner_text()
    assert robot.console_errors == [], "\n".join(robot.console_errors)


def test_a_developer_is_not_offered_to_forget_a_server(live_server, browser, alice, stranded):
    page = browser.new_context(locale="en-US").new_page()
    robot = Robot(page, live_server.url)
    robot.goto("/login/")
    robot.log_in("alice", "alice-pass-123")
    for path in (f"/deployments/{stranded.pk}/", f"/deployments/{stranded.pk}/forget/"):
        response = page.goto(live_server.url + path)
        assert response is not None and response.status == 403
        assert page.locator("#forget-server").count() == 0
        assert "Forget the server of tiny" not in page.content()
    stranded.refresh_from_db()
    assert stranded.status == DeploymentStatus.RUNNING
