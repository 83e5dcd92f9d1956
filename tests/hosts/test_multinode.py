"""Multi-node vLLM over Ray on two loopback "hosts": two real sshd on 127.0.0.2 and 127.0.0.3.

`ray` and `vllm` on their PATH are fakes that check the contract vLLM documents (tests/fakes/
ray_cli.py, vllm_cli.py): each Ray node gets VLLM_HOST_IP = its address and NCCL/Gloo the named
interface; `vllm serve` on the head gets RAY_ADDRESS, one Ray node per pipeline stage, each with
the tensor-parallel GPUs. Everything else is real: SSH, the detached processes, the job's states.
"""

from __future__ import annotations

import os
import socket
import subprocess

import openai
import pytest

from channels.models import Channel
from hosts.choices import DeploymentStatus, JobAction, JobState
from hosts.deployments import jobs, services
from hosts.models import Deployment, Host
from hosts.remote import commands, ssh
from tests.fakes.sshd import SSHTarget
from tests.hosts.conftest import registered_host
from tests.services import free_port, require_binary, unavailable


def _target(address: str):
    sshd = require_binary("/usr/sbin/sshd", "apt-get install openssh-server")
    target = SSHTarget(sshd=sshd, address=address)
    try:
        target.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        target.stop()
        unavailable(f"a test sshd could not start on {address}: {exc}")
    target.use_gpus("nvidia_smi_rtx4090")
    return target


@pytest.fixture(scope="module")
def two_targets():
    head, worker = _target("127.0.0.2"), _target("127.0.0.3")
    yield head, worker
    head.stop()
    worker.stop()


@pytest.fixture(autouse=True)
def quick_timings(settings):
    settings.HOSTS_HEALTH_TIMEOUT = 60
    settings.HOSTS_HEALTH_POLL = 0.1
    settings.HOSTS_STOP_GRACE = 5


@pytest.fixture
def cluster(db, two_targets):
    return registered_host("node-a", two_targets[0]), registered_host("node-b", two_targets[1])


@pytest.fixture
def started(cluster):
    """(host, pid) of whatever a test leaves running, killed by PID afterwards over SSH."""
    left: list[tuple[Host, int]] = []
    yield left
    for host, pid in left:
        try:
            with ssh.connect(host) as remote:
                remote.run(f"kill -KILL -- -{int(pid)} 2>/dev/null; true")
        except ssh.SSHError:
            pass


def deployment(cluster, **overrides):
    head, worker = cluster
    spec = {
        "host": head,
        "name": "qwen-two-nodes",
        "backend": "vllm",
        "model_path": "Qwen/Qwen3-8B",
        "served_model_name": "qwen3-8b",
        "gpu_indices": [0],
        "port": free_port(),
        "options": {"max_model_len": 8192},
        "extra_args": [],
        "worker_hosts": [worker],
        "network_interface": "lo",
        "ray_port": free_port(),
        **overrides,
    }
    return services.save_deployment(**spec)


def run(d, action=JobAction.LAUNCH):
    job = jobs.request_job(d, action)
    jobs.run_inline(job.pk)
    job.refresh_from_db()
    d.refresh_from_db()
    return job


def ray_pid(host: Host, d) -> int | None:
    with ssh.connect(host) as remote:
        pid = commands.read_pidfile(remote, commands.deployment_dir(d.remote_dir), "ray")
        return pid if pid and commands.is_alive(remote, pid) else None


def test_a_deployment_over_two_hosts_runs_on_one_ray_cluster_and_stops_on_both(cluster, started, admin_client):
    head, worker = cluster
    d = deployment(cluster)
    assert d.options["tensor_parallel_size"] == 1 and d.options["pipeline_parallel_size"] == 2
    job = run(d)
    if job.pid:
        started.append((head, job.pid))
    for host in cluster:
        if pid := ray_pid(host, d):
            started.append((host, pid))
    assert job.state == JobState.RUNNING, (job.message, job.log_tail)
    port = d.ray_port
    assert job.command.startswith(
        f"CUDA_VISIBLE_DEVICES=0 RAY_ADDRESS=127.0.0.2:{port} VLLM_HOST_IP=127.0.0.2 NCCL_SOCKET_IFNAME=lo "
        "GLOO_SOCKET_IFNAME=lo vllm serve Qwen/Qwen3-8B --served-model-name qwen3-8b --tensor-parallel-size 1 "
    )
    assert "--pipeline-parallel-size 2 --distributed-executor-backend ray" in job.command
    assert f"Ray cluster 127.0.0.2:{port}: 2 nodes, TP 1" in job.log_tail  # what the fake vllm saw
    assert ray_pid(head, d) and ray_pid(worker, d)
    nodes = admin_client.get(f"/api/deployments/{d.pk}/").json()["nodes"]  # as the page lists them
    assert [(n["host_name"], n["role"], n["ray_state"], n["ray_pid"]) for n in nodes] == [
        ("node-a", "head", "running", ray_pid(head, d)),
        ("node-b", "worker", "running", ray_pid(worker, d)),
    ]
    # The estimate counts both nodes' GPUs: a pipeline stage on each.
    assert [x["name"] for x in d.last_fit["devices"]] == ["node-a GPU 0", "node-b GPU 0"] and d.last_fit[
        "pipeline_parallel"
    ] == 2

    assert Channel.objects.count() == 1 and d.channel.base_url == f"http://127.0.0.2:{d.port}/v1"
    client = openai.OpenAI(base_url=d.channel.base_url, api_key=d.upstream_api_key)
    assert [m.id for m in client.models.list().data] == ["qwen3-8b"]

    stop = run(d, JobAction.STOP)
    assert stop.state == JobState.STOPPED, stop.message
    assert ray_pid(head, d) is None and ray_pid(worker, d) is None
    assert set(d.nodes.values_list("ray_state", "ray_pid")) == {("stopped", None)}
    assert d.status == DeploymentStatus.STOPPED
    d.channel.refresh_from_db()
    assert d.channel.enabled is False


def test_an_interface_that_does_not_exist_is_refused_before_anything_starts(cluster):
    d = deployment(cluster, network_interface="nosuch0")
    job = run(d)
    assert job.state == JobState.FAILED and job.pid is None
    assert job.message == "node-a: network interface nosuch0 does not exist."
    assert ray_pid(cluster[0], d) is None


def test_an_interface_that_does_not_carry_the_nodes_address_is_refused(cluster):
    if not os.path.exists("/sys/class/net/eth0"):
        pytest.skip("no eth0 here")
    d = deployment(cluster, network_interface="eth0")
    job = run(d)
    assert job.state == JobState.FAILED
    assert job.message.startswith("node-a: 127.0.0.2 is not on interface eth0")
    assert ray_pid(cluster[0], d) is None


def test_a_worker_that_cannot_be_reached_tears_the_head_down(cluster, two_targets):
    head, worker = cluster
    Host.objects.filter(pk=worker.pk).update(ssh_port=free_port())  # nothing listens there
    d = deployment(cluster)
    job = run(d)
    assert job.state == JobState.FAILED and job.message.startswith("Could not reach a worker host:")
    assert ray_pid(head, d) is None  # the head Ray node it had started is gone


def test_a_head_that_exits_at_start_fails_the_job_at_once_with_its_output(cluster, admin_client, settings):
    """Ray's port is taken on the head: `ray start --head` exits at once. The job says so with the
    head's own words instead of polling `ray status` until HOSTS_HEALTH_TIMEOUT (an hour here,
    longer than the test's own timeout: the old wait could not pass)."""
    settings.HOSTS_HEALTH_TIMEOUT = 3600
    with socket.socket() as taken:
        taken.bind(("127.0.0.2", 0))
        taken.listen()
        d = deployment(cluster, ray_port=taken.getsockname()[1])
        job = run(d)
    assert job.state == JobState.FAILED and job.pid is None
    said = f"fake ray: cannot listen on 127.0.0.2:{d.ray_port}"
    assert job.message.startswith("Ray's head on node-a exited (code 1) before the cluster was up."), job.message
    assert said in job.message and said in job.log_tail
    assert job.message_code.startswith("Ray's head on %(host)s exited")  # translated when read
    assert said in admin_client.get(f"/api/jobs/{job.pk}/").json()["message"]
    page = admin_client.get(f"/jobs/{job.pk}/").content.decode()
    assert said in page
    assert ray_pid(cluster[0], d) is None and ray_pid(cluster[1], d) is None  # the worker it had started is gone


def test_a_worker_whose_ray_exits_at_start_fails_the_job_at_once_with_its_output(cluster, two_targets, settings):
    """A worker's `ray start` exits at once (here: a Ray of another version on its PATH). The job
    says so with the worker's own words instead of waiting for the head to list it until
    HOSTS_HEALTH_TIMEOUT (an hour here, longer than the test's own timeout: the old wait could not
    pass) and then asking about a firewall."""
    settings.HOSTS_HEALTH_TIMEOUT = 3600
    ray = two_targets[1].bin / "ray"
    fake = ray.read_text()
    said = "RuntimeError: Version mismatch: this node runs Ray 2.9.3, the cluster 2.40.0"
    ray.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
    try:
        d = deployment(cluster)
        job = run(d)
    finally:
        ray.write_text(fake)
    assert job.state == JobState.FAILED and job.pid is None
    assert job.message.startswith("Ray on worker node-b exited (code 1) before it joined the head."), job.message
    assert said in job.message and said in job.log_tail
    assert ray_pid(cluster[0], d) is None  # the head it had started is gone


def test_multi_node_needs_vllm_an_interface_and_the_gpus_on_every_node(cluster):
    from django.core.exceptions import ValidationError

    head = cluster[0]
    with pytest.raises(ValidationError) as err:
        deployment(cluster, network_interface="")
    assert "network_interface" in err.value.message_dict
    with pytest.raises(ValidationError) as err:
        deployment(cluster, gpu_indices=[0, 1])  # an RTX 4090 box has one GPU
    assert any("node-b" in m for m in err.value.message_dict["worker_hosts"])
    with pytest.raises(ValidationError) as err:
        deployment(cluster, backend="llamacpp", model_path="/models/m-Q4_K_M.gguf", options={}, network_interface="lo")
    assert "worker_hosts" in err.value.message_dict
    with pytest.raises(ValidationError) as err:
        deployment(cluster, worker_hosts=[head])
    assert "worker_hosts" in err.value.message_dict


def test_a_dead_worker_ray_node_crashes_the_deployment_naming_the_worker(cluster, started):
    """The supervisor looks at every node's Ray process, not only the head's server."""
    from hosts.choices import RayState
    from hosts.deployments import supervisor

    head, worker = cluster
    d = deployment(cluster, auto_restart=False)
    job = run(d)
    if job.pid:
        started.append((head, job.pid))
    pids = {host.name: ray_pid(host, d) for host in cluster}
    started.extend((host, pid) for host in cluster if (pid := pids[host.name]))
    assert job.state == JobState.RUNNING, (job.message, job.log_tail)
    nodes = {n.host.name: n for n in d.nodes.select_related("host")}
    assert {name: (n.role, n.ray_state, n.ray_pid) for name, n in nodes.items()} == {
        "node-a": ("head", RayState.RUNNING, pids["node-a"]),
        "node-b": ("worker", RayState.RUNNING, pids["node-b"]),
    }
    assert supervisor.supervise()["crashed"] == 0  # all alive: nothing to say

    os.killpg(pids["node-b"], 9)  # the worker's Ray dies on its host, nobody asked
    assert supervisor.supervise()["crashed"] == 1
    d.refresh_from_db()
    assert d.status == DeploymentStatus.CRASHED
    assert d.status_message.startswith(
        f"Crashed: Ray on the worker node node-b (127.0.0.3) is gone (PID {pids['node-b']})."
    ), d.status_message
    event = d.events.first()
    assert event.automatic and f"Joined 127.0.0.2:{d.ray_port} as 127.0.0.3" in event.log_tail  # its Ray log
    dead = d.nodes.get(host=worker)
    assert dead.ray_state == RayState.DEAD and "node-b" in dead.message
    # The rest of the cluster and the server on the head were stopped: a restart starts it afresh.
    assert d.nodes.get(host=head).ray_state == RayState.STOPPED
    assert ray_pid(head, d) is None
    with ssh.connect(head) as remote:
        assert not commands.is_alive(remote, job.pid)
    d.channel.refresh_from_db()
    assert d.channel.status == "down"


def test_the_form_names_the_head_posted_as_its_own_worker_on_the_worker_field(cluster, admin_client):
    """The head is not offered as a worker; posted anyway, the answer is a clear field error, not a 500."""
    head, worker = cluster
    url = f"/hosts/{head.pk}/deployments/new/"
    form = admin_client.get(url).content.decode()
    assert f'value="{worker.pk}"' in form and f'name="worker_hosts" value="{head.pk}"' not in form
    data = {
        "name": "self-worker",
        "backend": "vllm",
        "model_path": "Qwen/Qwen3-8B",
        "served_model_name": "qwen3-8b",
        "gpu_indices": ["0"],
        "port": "8000",
        "worker_hosts": [str(head.pk)],
        "network_interface": "lo",
        "ray_port": "6379",
        "max_restarts_per_hour": "3",
    }
    page = admin_client.post(url, data)
    assert page.status_code == 200
    errors = page.context["form"].errors
    assert errors["worker_hosts"] == ["Each worker host once, and not the head host node-a itself."]
    assert not Deployment.objects.filter(name="self-worker").exists()


def test_the_inventory_keeps_the_hosts_network_interfaces(cluster):
    head = cluster[0]
    names = [i["name"] for i in head.network_interfaces]
    assert "lo" in names  # the sshd targets run on this machine: its interfaces, loopback first
    lo = next(i for i in head.network_interfaces if i["name"] == "lo")
    assert "127.0.0.1/8" in lo["addresses"]
