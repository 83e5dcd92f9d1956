"""A real browser: the admin opens a finished download that keeps its access token (for copies onto
another host), clicks "Forget the token", changes their mind on the confirmation (Cancel keeps
it), then clicks it again and confirms: the page says the token is gone."""

from __future__ import annotations

import pytest
from django.utils import timezone

from hosts.downloads.choices import DownloadState
from hosts.downloads.models import ModelDownload
from hosts.models import Host
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "Forget the access token of the download of acme/private to gpu-a?"


def test_admin_forgets_a_finished_downloads_token_after_confirming(live_server, browser, admin, screenshots):
    host = Host.objects.create(
        name="gpu-a", address="10.0.0.9", username="ubuntu", host_key_fingerprint="SHA256:pinned"
    )
    job = ModelDownload.objects.create(
        host=host,
        repo_id="acme/private",
        pattern="*.gguf",
        token="hf_secret",
        state=DownloadState.DONE,
        finished=timezone.now(),
        local_path="/home/ubuntu/.gateway-portal/models/acme--private",
        files=[{"name": "m.gguf", "size": 1, "done": 1}],
        total_bytes=1,
        done_bytes=1,
    )
    detail_url = f"{live_server.url}/downloads/{job.pk}/"
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    robot = Robot(page, live_server.url)
    robot.goto(f"/downloads/{job.pk}/")  # a bookmark: the login page first, then back to it
    robot.fill("#id_username", "admin")
    robot.fill("#id_password", "admin-pass-123")
    robot.click("main button[type=submit]")
    page.wait_for_url(detail_url)
    token_line = page.locator("dl.props dd", has_text="set (encrypted)")
    assert token_line.is_visible() and "hf_secret" not in page.content()

    # Cancel on the confirmation: back on the download's page, the token kept.
    robot.click("dl.props a:has-text('Forget the token')")
    page.wait_for_url(f"{detail_url}forget-token/")
    assert QUESTION in robot.text("article.confirm")
    assert not robot.axe_violations()
    page.screenshot(path=f"{screenshots}/forget_token_confirm.png", full_page=True)
    robot.click("article.confirm a:has-text('Cancel')")
    page.wait_for_url(detail_url)
    assert page.locator("dl.props dd", has_text="set (encrypted)").is_visible()
    job.refresh_from_db()
    assert job.token == "hf_secret"

    # Confirmed: the page says it is forgotten, and shows no token and no button any more.
    robot.click("dl.props a:has-text('Forget the token')")
    page.wait_for_url(f"{detail_url}forget-token/")
    robot.click("article.confirm button[type=submit]")
    page.wait_for_url(detail_url)
    assert robot.text(".flash-success") == f"The access token of download #{job.pk} is forgotten."
    assert "set (encrypted)" not in robot.text("dl.props")
    assert page.locator("a:has-text('Forget the token')").count() == 0
    page.screenshot(path=f"{screenshots}/forget_token_done.png", full_page=True)
    job.refresh_from_db()
    assert job.token == ""
    assert robot.console_errors == []
