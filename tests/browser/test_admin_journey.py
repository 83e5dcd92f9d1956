"""The admin's whole setup in a real browser, by clicking: log in → add a channel with a messy URL →
add its models from what the channel lists → add a GPU host (a real sshd) → confirm its host key →
refresh the inventory → a deployment through the form, its VRAM fit live → Launch (real llama.cpp
over SSH) → the job page → the channel healthy → Stop → the channel no longer says Healthy.

Launch jobs and inventory refreshes run eagerly (inside the request that queues them, as a worker
would run them); everything they touch is real. The note for issue 13 quotes the clicks and seconds
this prints."""

from __future__ import annotations

import os
import re
import signal

import pytest

from channels.choices import ChannelStatus
from channels.models import Channel, ModelRoute
from hosts.models import Deployment, Host, LaunchJob
from tests.browser.robot import Robot
from tests.fakes.llamacpp import tiny_gguf_path
from tests.fakes.upstream import FakeUpstream
from tests.services import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def quick(settings):
    settings.HOSTS_HEALTH_TIMEOUT = 60
    settings.HOSTS_HEALTH_POLL = 0.1
    settings.HOSTS_STOP_GRACE = 5
    settings.PORTAL_PROBE_TIMEOUT = 10.0
    settings.PORTAL_PROBE_CONNECT_TIMEOUT = 2.0


@pytest.fixture
def eager_celery():
    from portal.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def upstream():
    up = FakeUpstream(models=["Qwen/Qwen3-32B"], max_model_len=32768).start()
    yield up
    up.stop()


def test_admin_sets_up_a_channel_and_a_gpu_deployment_by_clicking(
    live_server, browser, admin, ssh_target, upstream, quick, eager_celery, screenshots
):
    ssh_target.use_gpus("nvidia_smi_rtx3080ti")
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.on("dialog", lambda d: d.accept())  # hx-confirm on "Confirm host key"
    robot = Robot(page, live_server.url)
    pids: list[int] = []
    try:
        robot.goto("/")
        robot.log_in("admin", "admin-pass-123")

        # A channel, pasted the way a provider documents it.
        robot.click("nav >> text=Channels")
        robot.click("text=Add channel")
        robot.fill("#id_name", "cloud-qwen")
        robot.page.select_option("#id_kind", "vllm")
        messy = f"  {upstream.base_url.replace('http://', 'HTTP://')}/chat/completions/ "
        robot.fill("#id_base_url", messy)
        robot.page.wait_for_selector("#base-url-preview >> text=/v1")
        robot.click("button:has-text('Add channel')")
        assert f"We stored {upstream.base_url}" in robot.text(".flash-success")

        # Its models, from what it lists: one click for the model and its route.
        robot.click("text=Add models from this channel")
        row = robot.page.locator("#served-models tr", has_text="Qwen/Qwen3-32B")
        assert row.locator("input[name$='-context_window']").input_value() == "32768"
        assert row.locator("input[name$='-name']").input_value() == "qwen3-32b"
        robot.click("#served-models button:has-text('Add model')")
        assert "Model qwen3-32b added" in robot.text(".flash-success")
        route = ModelRoute.objects.get(channel__name="cloud-qwen")
        assert (route.model.name, route.upstream_model, route.context_window) == ("qwen3-32b", "Qwen/Qwen3-32B", 32768)

        # The channel's status: shown once, and what Check now says is what the page says.
        robot.click("a:text-is('cloud-qwen')")
        robot.click(".health-detail button:has-text('Check now')")
        robot.page.wait_for_selector("#health-check-result >> text=OK")
        assert "Healthy" in robot.text("#health-status") and "never checked" not in robot.text("#health-status")
        assert robot.page.locator(".health-badge").count() == 1  # one status on the page, the one updated
        assert "never" not in robot.text("main")

        # A GPU host: the real sshd on 127.0.0.1.
        robot.click("nav >> text=Hosts")
        robot.click("text=Add host")
        robot.fill("#id_name", "gpu-box")
        robot.fill("#id_address", "127.0.0.1")
        robot.fill("#id_ssh_port", str(ssh_target.port))
        robot.fill("#id_username", ssh_target.username)
        robot.fill("#id_private_key", ssh_target.client_private_key)
        robot.click("button:has-text('Add host')")
        robot.page.wait_for_selector("h1:has-text('gpu-box')")

        # First contact records the key offered; the admin compares and confirms it, then refreshes.
        robot.click("button:has-text('Refresh now')")
        robot.page.wait_for_selector(f"code:has-text('{ssh_target.host_key_fingerprint}')")
        robot.click("button:has-text('Confirm host key')")
        robot.page.wait_for_selector("text=Host key " + ssh_target.host_key_fingerprint + " confirmed")
        robot.click("button:has-text('Refresh now')")
        robot.page.wait_for_selector("section[id^=host-gpus] >> text=NVIDIA GeForce RTX 3080 Ti", timeout=30_000)
        assert Host.objects.get().status == "online"
        robot.page.screenshot(path=f"{screenshots}/admin_host.png", full_page=True)

        # A deployment through the form: the fit is estimated live, beside the options.
        robot.click("text=New deployment")
        robot.fill("#id_name", "tiny")
        robot.page.select_option("#id_backend", "llamacpp")
        robot.fill("#id_model_path", str(tiny_gguf_path()))
        robot.fill("#id_served_model_name", "tiny-chat")
        robot.fill("#id_port", str(free_port()))
        robot.page.check("#id_gpu_indices_0")
        robot.fill("#id_llamacpp__ctx_size", "1024")
        robot.fill("#id_llamacpp__threads", "1")
        robot.page.wait_for_selector("#fit-live >> text=Fits")
        robot.page.screenshot(path=f"{screenshots}/admin_deploy_form.png", full_page=True)
        robot.click("button:text-is('Save')")
        assert "Deployment tiny" in robot.text(".flash-success")
        assert "No estimate yet" not in robot.text("main") and "Fits" in robot.text("article.fit")

        # Launch: the confirm page's button posts to the page itself (it once posted to …/launch/launch).
        robot.click("a[role=button]:text-is('Launch')")
        robot.click("article.confirm button:text-is('Launch')")
        robot.page.wait_for_url(re.compile(r"/jobs/\d+/$"))
        robot.page.wait_for_selector("#job-progress >> text=Running", timeout=90_000)
        job = LaunchJob.objects.get()
        if job.pid:
            pids.append(job.pid)
        assert job.state == "running", job.message

        robot.click("text=Back to tiny")
        robot.page.wait_for_selector("#deployment-channel-status >> text=Healthy")
        deployment = Deployment.objects.get()
        assert deployment.channel.status == ChannelStatus.HEALTHY
        robot.page.screenshot(path=f"{screenshots}/admin_running.png", full_page=True)
        setup_clicks, setup_seconds = robot.clicks, robot.seconds

        # Stop: the channel goes out of routing and says so.
        robot.click("a[role=button]:text-is('Stop')")
        robot.click("article.confirm button:text-is('Stop')")
        robot.page.wait_for_selector("#job-progress >> text=Stopped", timeout=60_000)
        robot.click("text=Back to tiny")
        assert "Disabled" in robot.text("#deployment-channel-status")
        assert "Healthy" not in robot.text("#deployment-channel-status")
        channel = Channel.objects.get(pk=deployment.channel_id)
        assert channel.enabled is False
        robot.click("#deployment-channel-status >> xpath=preceding-sibling::a[1]")
        assert "Disabled" in robot.text("#health-status") and "Healthy" not in robot.text("#health-status")
        assert robot.console_errors == [], "\n".join(robot.console_errors)
        print(f"\nadmin setup (login → launched and healthy): {setup_clicks} clicks, {setup_seconds:.1f} s")
    except Exception:
        page.screenshot(path=f"{screenshots}/admin_journey_failure.png", full_page=True)
        raise
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
