"""Multi-node from the browser: an admin creates a vLLM deployment over two SSH hosts in the deploy
form (worker host, network interface, Ray port; the fit across both nodes shown live), is told what
is wrong field by field, launches it, and the deployment page shows both nodes with their Ray
state, PIDs and logs.

The two hosts are two real sshd on 127.0.0.2 and 127.0.0.3 (tests/hosts/test_multinode.py); `ray`
and `vllm` on their PATH are the fakes, which log the argv and environment each call received in the
target's HOME (tests/fakes/argv_log.py), read here from the files (no SSH from the test's thread,
where Playwright's event loop runs).
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from hosts.choices import DeploymentStatus, JobState, RayState
from hosts.models import Deployment, LaunchJob
from tests.browser.conftest import browser, screenshots  # noqa: F401 (fixtures)
from tests.browser.robot import Robot
from tests.fakes import argv_log
from tests.hosts.conftest import registered_host
from tests.hosts.test_fit_in_browser import eager_celery  # noqa: F401 (fixture)
from tests.hosts.test_multinode import quick_timings, two_targets  # noqa: F401 (fixtures)
from tests.services import free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def nodes(db, two_targets):  # noqa: F811
    """Inventoried before the browser starts: a head with two RTX 4090s, a worker with one."""
    head_target, worker_target = two_targets
    head_target.use_gpus("nvidia_smi_2xrtx4090")
    worker_target.use_gpus("nvidia_smi_rtx4090")
    for target in two_targets:
        (target.home / argv_log.NAME).unlink(missing_ok=True)
    return registered_host("node-a", head_target), registered_host("node-b", worker_target)


def _kill_what_it_started(deployment: Deployment | None) -> None:
    """By PID (the sshd targets run on this machine as this user), never by name."""
    if deployment is None:
        return
    pids = [deployment.pid, *deployment.nodes.values_list("ray_pid", flat=True)]
    for pid in filter(None, pids):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def test_admin_creates_and_launches_a_two_node_deployment_in_the_browser(
    nodes,
    two_targets,  # noqa: F811
    eager_celery,  # noqa: F811
    admin,
    live_server,
    browser,  # noqa: F811
    screenshots,  # noqa: F811
):
    head = nodes[0]
    page = browser.new_context(viewport={"width": 1280, "height": 1100}).new_page()
    robot = Robot(page, live_server.url)  # for its axe-core check and the console errors it keeps
    page.set_default_timeout(60_000)
    page.goto(live_server.url + "/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin-pass-123")
    page.click("main button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    page.goto(f"{live_server.url}/hosts/{head.pk}/deployments/new/")
    try:
        # The head is not offered as its own worker; its interfaces (from the inventory) are.
        page.click("#multinode summary")
        offered = page.locator("#worker-hosts").inner_text()
        assert "node-b (127.0.0.3, 1 GPU)" in offered and "node-a" not in offered
        assert "lo" in page.locator("#known-interfaces").inner_text()
        assert page.locator("#network-interfaces option[value=lo]").count() == 1

        page.fill("#id_name", "qwen-two-nodes")
        page.fill("#id_model_path", "Qwen/Qwen3-8B")
        page.fill("#id_served_model_name", "qwen3-8b")
        page.fill("#id_port", str(free_port()))
        page.check("#deploy-form input[name=gpu_indices][value='1']")  # GPUs 0 and 1: the worker has one
        page.check("#worker-hosts input[type=checkbox]")
        page.fill("#id_network_interface", "not an interface!")
        page.fill("#id_ray_port", str(free_port()))
        page.fill("#id_vllm__tensor_parallel_size", "2")  # vLLM's options are open: it is the backend
        page.fill("#id_vllm__pipeline_parallel_size", "4")
        page.click("button:has-text('Save')")

        # Every mistake on its own field.
        page.wait_for_selector("#id_worker_hosts_error")
        assert "GPU 1 not on node-b" in page.locator("#worker-hosts").inner_text()
        assert "not a network interface name" in page.locator("#id_network_interface_error").inner_text()
        tp_error = page.locator("#id_vllm__tensor_parallel_size_error").inner_text()
        assert "Tensor parallel 2 x pipeline parallel 4 = 8, but 4 GPUs are chosen." in tp_error
        page.screenshot(path=f"{screenshots}/multinode_form_errors.png", full_page=True)
        assert robot.axe_violations() == []

        # Fixed: one GPU on each node, TP and PP left to fill in; the live fit covers both nodes.
        page.uncheck("#deploy-form input[name=gpu_indices][value='1']")
        page.fill("#id_vllm__tensor_parallel_size", "")
        page.fill("#id_vllm__pipeline_parallel_size", "")
        # The ports the head's vLLM and Ray will bind, chosen now rather than a login and a form
        # earlier: a port free then could be another test's by the launch (the Ray head then exits:
        # ci1's job waited out its 60 s for `ray status`).
        port, ray_port = free_port(), free_port()
        page.fill("#id_port", str(port))
        page.fill("#id_ray_port", str(ray_port))
        page.fill("#id_network_interface", "lo")
        page.wait_for_selector("#fit-live #deploy-layout")
        layout = page.locator("#fit-live #deploy-layout").inner_text()
        assert "2 nodes" in layout and "node-a (head), node-b" in layout
        assert "Tensor parallel 1 × pipeline parallel 2 = 2 GPUs (GPU 0 on every node)" in layout
        devices = page.locator("#fit-live .fit-devices tbody tr td:first-child").all_inner_texts()
        assert devices == ["node-a GPU 0", "node-b GPU 0"]
        command = page.locator("#fit-live details pre").text_content() or ""
        assert "--pipeline-parallel-size 2 --distributed-executor-backend ray" in command
        page.screenshot(path=f"{screenshots}/multinode_form_fit.png", full_page=True)
        page.click("button:has-text('Save')")
        page.wait_for_url(re.compile(r"/deployments/\d+/$"))

        deployment = Deployment.objects.get(name="qwen-two-nodes")
        assert [h.name for h in deployment.worker_hosts.all()] == ["node-b"]
        assert (deployment.network_interface, deployment.ray_port) == ("lo", ray_port)
        rows = page.locator("#deployment-nodes tbody tr[data-role]")
        assert rows.count() == 2
        assert "Not started" in page.locator("#node-node-b").inner_text()

        page.click("a[role=button]:has-text('Launch')")
        page.click("button:has-text('Launch')")  # the confirmation
        page.wait_for_url("**/jobs/**")
        job = LaunchJob.objects.get(deployment=deployment)
        assert job.state == JobState.RUNNING, (job.message, job.log_tail)
        deployment.refresh_from_db()
        assert deployment.status == DeploymentStatus.RUNNING

        page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
        ray_pids = dict(deployment.nodes.values_list("host__name", "ray_pid"))
        head_row, worker_row = page.locator("#node-node-a"), page.locator("#node-node-b")
        assert head_row.get_attribute("data-role") == "head" and worker_row.get_attribute("data-role") == "worker"
        assert head_row.locator(".node-ray").inner_text().startswith(str(RayState.RUNNING.label))
        assert worker_row.locator(".node-ray").inner_text().startswith(str(RayState.RUNNING.label))
        assert head_row.locator(".node-ray-pid").inner_text() == str(ray_pids["node-a"])
        assert worker_row.locator(".node-ray-pid").inner_text() == str(ray_pids["node-b"])
        assert f"PID {deployment.pid}" in head_row.locator(".node-server").inner_text()
        assert "inside Ray" in worker_row.locator(".node-server").inner_text()

        worker_row.locator("button:has-text('Show log')").click()  # read over SSH by the server
        page.wait_for_selector(".node-log[data-host=node-b] pre")
        assert f"Joined 127.0.0.2:{ray_port} as 127.0.0.3" in page.locator(".node-log[data-host=node-b]").inner_text()
        head_row.locator("button:has-text('Show log')").click()
        page.wait_for_selector(".node-log[data-host=node-a] pre")
        head_logs = page.locator(".node-log[data-host=node-a]").inner_text()
        assert f"Head at 127.0.0.2:{ray_port}" in head_logs and "vLLM log on node-a" in head_logs
        page.screenshot(path=f"{screenshots}/multinode_deployment_page.png", full_page=True)
        assert robot.axe_violations() == [] and robot.console_errors == []
    finally:
        _kill_what_it_started(Deployment.objects.filter(name="qwen-two-nodes").first())

    # What each node received: Ray's head and worker with the port and the interface, vLLM on the head only.
    head_home, worker_home = (t.home for t in two_targets)
    head_ray = [c for c in argv_log.calls(head_home, "ray") if c["argv"][:1] == ["start"]]
    worker_ray = [c for c in argv_log.calls(worker_home, "ray") if c["argv"][:1] == ["start"]]
    interface = {"NCCL_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "lo"}
    assert head_ray == [
        {
            "prog": "ray",
            "argv": ["start", "--head", "--port", str(ray_port), "--node-ip-address", "127.0.0.2", "--block"],
            "env": {"VLLM_HOST_IP": "127.0.0.2", **interface},
        }
    ]
    assert worker_ray == [
        {
            "prog": "ray",
            "argv": ["start", "--address", f"127.0.0.2:{ray_port}", "--node-ip-address", "127.0.0.3", "--block"],
            "env": {"VLLM_HOST_IP": "127.0.0.3", **interface},
        }
    ]
    [vllm] = argv_log.calls(head_home, "vllm")
    assert argv_log.calls(worker_home, "vllm") == []
    argv = vllm["argv"]
    assert argv[:2] == ["serve", "Qwen/Qwen3-8B"]
    assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
    assert argv[argv.index("--port") + 1] == str(port)
    assert vllm["env"] == {
        "CUDA_VISIBLE_DEVICES": "0",
        "RAY_ADDRESS": f"127.0.0.2:{ray_port}",
        "VLLM_HOST_IP": "127.0.0.2",
        **interface,
    }
