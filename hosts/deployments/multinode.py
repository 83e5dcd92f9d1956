"""Multi-node vLLM: one deployment over several registered hosts, the way vLLM documents it.

vLLM runs a model across nodes on a Ray cluster ("Distributed inference and serving": start a Ray
head and join the workers, then `vllm serve` on the head with TP = GPUs per node and PP = nodes).
The launch job does exactly that over SSH, every process detached in the deployment's folder on
its host with its pid file and log (`ray.pid`, `ray.log`):

    head     VLLM_HOST_IP=HEAD NCCL_SOCKET_IFNAME=IF GLOO_SOCKET_IFNAME=IF
             ray start --head --port P --node-ip-address HEAD --block
    worker   VLLM_HOST_IP=W NCCL_SOCKET_IFNAME=IF GLOO_SOCKET_IFNAME=IF
             ray start --address HEAD:P --node-ip-address W --block
    head     RAY_ADDRESS=HEAD:P NCCL_SOCKET_IFNAME=IF GLOO_SOCKET_IFNAME=IF VLLM_HOST_IP=HEAD
             vllm serve … --tensor-parallel-size GPUS_PER_NODE --pipeline-parallel-size NODES
             --distributed-executor-backend ray

Before anything starts, each node's network interface is checked: it exists and carries the
address the node is registered with (NCCL and Gloo are told to use it). The cluster is up when
`ray status` lists every node. One channel serves the whole deployment (the head's API server);
stopping it stops Ray on every node (`ray stop`, then the process group).

Each node is a `DeploymentNode` row (role, Ray PID and state) the deployment page lists: the launch
job writes it, a stop job marks it stopped, and the supervisor (`check_nodes`) marks a node whose
Ray process is gone as dead, which crashes the deployment naming that node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal.i18n import Message, as_message, cleared

from ..choices import NodeRole, RayState
from ..models import Deployment, DeploymentNode, Host
from ..remote import commands, ssh

logger = logging.getLogger(__name__)

RAY = "ray"
_NODE_LINE = re.compile(r"^\s*\d+\s+node_\S+", re.M)


class ClusterError(Exception):
    """The Ray cluster could not be started; `message` says why and what to do, `log` is the end of
    the log of the Ray node that failed, when there is one (the job shows it)."""

    def __init__(self, text: Message | str, *, log: str = "") -> None:
        self.text = as_message(text)
        self.log = log
        super().__init__(self.text.english)

    @property
    def message(self) -> str:
        return self.text.render()


def workers(deployment: Deployment) -> list[Host]:
    """The worker hosts; for an unsaved deployment (the form's live preview) the ones it was given
    as `unsaved_workers`, since an unsaved row cannot hold a relation."""
    if not deployment.pk:
        return list(getattr(deployment, "unsaved_workers", []))
    return list(deployment.worker_hosts.order_by("name"))


def layout(deployment: Deployment) -> dict[str, Any] | None:
    """How a multi-node deployment spreads over its nodes (None for one node), for the pages:
    the nodes, the GPU indices each runs on, tensor x pipeline parallel and the GPUs in all."""
    nodes = workers(deployment)
    if not nodes:
        return None
    options = deployment.options or {}
    return {
        "nodes": [deployment.host, *nodes],
        "gpu_indices": list(deployment.gpu_indices),
        "tensor_parallel": options.get("tensor_parallel_size") or len(deployment.gpu_indices),
        "pipeline_parallel": options.get("pipeline_parallel_size") or 1 + len(nodes),
        "gpus": len(deployment.gpu_indices) * (1 + len(nodes)),
    }


def _record_node(deployment: Deployment, host: Host, pid: int | None, state: str, message: Message | str = "") -> None:
    role = NodeRole.HEAD if host.pk == deployment.host_id else NodeRole.WORKER
    DeploymentNode.objects.update_or_create(
        deployment=deployment,
        host=host,
        defaults={
            "role": role,
            "ray_pid": pid,
            "ray_state": state,
            **as_message(message).columns("message", 300),
            "last_checked": timezone.now(),
        },
    )


def sync_nodes(deployment: Deployment) -> list[DeploymentNode]:
    """The deployment's node rows, one per host it spans now (an edit may have changed them)."""
    hosts = [deployment.host, *workers(deployment)] if workers(deployment) else []
    DeploymentNode.objects.filter(deployment=deployment).exclude(host__in=hosts).delete()
    for host in hosts:
        role = NodeRole.HEAD if host.pk == deployment.host_id else NodeRole.WORKER
        DeploymentNode.objects.get_or_create(deployment=deployment, host=host, defaults={"role": role})
    return list(DeploymentNode.objects.filter(deployment=deployment).select_related("host"))


def _env(deployment: Deployment, node_address: str) -> dict[str, str]:
    iface = deployment.network_interface
    return {"VLLM_HOST_IP": node_address, "NCCL_SOCKET_IFNAME": iface, "GLOO_SOCKET_IFNAME": iface}


def head_address(deployment: Deployment) -> str:
    return f"{deployment.host.address}:{deployment.ray_port}"


def head_env(deployment: Deployment) -> dict[str, str]:
    """What `vllm serve` on the head gets besides CUDA_VISIBLE_DEVICES ({} for one node)."""
    if not workers(deployment):
        return {}
    return {"RAY_ADDRESS": head_address(deployment), **_env(deployment, deployment.host.address)}


def check_interface(remote: ssh.Remote, iface: str, address: str) -> str:
    """Why `iface` cannot carry the cluster's traffic for `address` on this node, or ""."""
    q = shlex.quote(iface)
    out = remote.run(
        f"if [ -d /sys/class/net/{q} ]; then echo present; ip -o addr show dev {q} 2>/dev/null; else echo absent; fi"
    ).stdout
    if not out.startswith("present"):
        return f"{remote.host}: network interface {iface} does not exist."
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return ""  # registered by name: nothing to compare with
    nets = [ipaddress.ip_interface(m) for m in re.findall(r"inet6?\s+(\S+)", out)]
    if nets and not any(ip in n.network for n in nets):
        have = ", ".join(str(n) for n in nets)
        return f"{remote.host}: {address} is not on interface {iface} ({have}); NCCL would use the wrong network."
    return ""


def _start_node(deployment: Deployment, remote: ssh.Remote, argv: list[str], address: str) -> int:
    folder = commands.deployment_dir(deployment.remote_dir)
    old = commands.read_pidfile(remote, folder, "ray")
    if old and commands.is_alive(remote, old):
        commands.kill(remote, old, grace=5)
    pid, said = commands.start_detached(remote, folder, argv, _env(deployment, address), name="ray")
    if pid is None:
        raise ClusterError(
            Message(gettext_noop("Could not start Ray on %(host)s: %(said)s"), host=remote.host, said=said[:300])
        )
    return pid


def _exit_probe(deployment: Deployment, pid: int) -> list[list[str] | str]:
    """Is the node's Ray process `pid` alive, its log's end and its exit code: what says why it went."""
    folder = commands.deployment_dir(deployment.remote_dir)
    return [
        commands.alive_test(pid),
        f"tail -c {commands.LOG_TAIL_BYTES} {folder}/ray.log 2>/dev/null",
        f"cat {folder}/ray.exit_code 2>/dev/null",
    ]


def _exited(text: str, host: object, log: ssh.Result, exit_code: ssh.Result) -> ClusterError:
    """The error of a Ray node gone before the cluster was up: `text` (host, code, its last line)."""
    said = log.stdout.strip().splitlines()
    line = said[-1][:300] if said else "-"
    return ClusterError(Message(text, host=host, code=exit_code.stdout.strip() or "?", line=line), log=log.stdout)


def _count_nodes(remote: ssh.Remote, deployment: Deployment, head_pid: int) -> int:
    """How many nodes `ray status` lists; raises ClusterError with the head's output as soon as
    the head's process is gone (a taken port, a bad flag): waiting on would only time out."""
    status, alive, log, exit_code = remote.run_many(
        [[RAY, "status", "--address", head_address(deployment)], *_exit_probe(deployment, head_pid)], timeout=30
    )
    if status.ok:
        return len(_NODE_LINE.findall(status.stdout))
    if alive.exit_status == 1:  # ran and said "gone" (-1: the session broke first, which says nothing)
        text = gettext_noop(
            "Ray's head on %(host)s exited (code %(code)s) before the cluster was up. Its last line: %(line)s"
        )
        raise _exited(text, deployment.host, log, exit_code)
    return 0


def _worker_gone(remote: ssh.Remote, deployment: Deployment, node: Host, pid: int) -> None:
    """Raise ClusterError with the worker's own last line when its Ray process has exited (a Ray
    that cannot reach the head, another Ray version, no `ray` on its PATH): waiting on for the head
    to list it would only run out HOSTS_HEALTH_TIMEOUT."""
    alive, log, exit_code = remote.run_many(_exit_probe(deployment, pid), timeout=30)
    if alive.exit_status == 1:  # 0: alive; -1: the session broke first, which says nothing
        text = gettext_noop(
            "Ray on worker %(host)s exited (code %(code)s) before it joined the head. Its last line: %(line)s"
        )
        raise _exited(text, node.name, log, exit_code)


def start_cluster(deployment: Deployment, head: ssh.Remote) -> None:
    """Start the Ray head and join every worker; returns when `ray status` lists them all.
    On failure everything started is stopped and ClusterError says why."""
    nodes = workers(deployment)
    if not nodes:
        return
    address = deployment.host.address
    if problem := check_interface(head, deployment.network_interface, address):
        raise ClusterError(problem)
    started: list[tuple[Host, int]] = []
    sync_nodes(deployment)
    try:
        argv = [RAY, "start", "--head", "--port", str(deployment.ray_port), "--node-ip-address", address, "--block"]
        head_pid = _start_node(deployment, head, argv, address)
        started.append((deployment.host, head_pid))
        _record_node(deployment, deployment.host, started[-1][1], RayState.RUNNING)
        with contextlib.ExitStack() as connections:  # each worker's, kept for the wait below
            joining: list[tuple[ssh.Remote, Host, int]] = []
            for node in nodes:
                remote = connections.enter_context(ssh.connect(node))
                if problem := check_interface(remote, deployment.network_interface, node.address):
                    raise ClusterError(problem)
                argv = [RAY, "start", "--address", head_address(deployment), "--node-ip-address", node.address]
                started.append((node, _start_node(deployment, remote, [*argv, "--block"], node.address)))
                _record_node(deployment, node, started[-1][1], RayState.RUNNING)
                joining.append((remote, node, started[-1][1]))
            _wait_for_nodes(deployment, head, head_pid, joining)
    except ClusterError:
        stop_cluster(deployment, head)
        raise
    except ssh.SSHError as exc:
        stop_cluster(deployment, head)
        raise ClusterError(Message(gettext_noop("Could not reach a worker host: %(error)s"), error=exc.text)) from None
    logger.info("ray cluster of deployment %s is up on %s nodes", deployment.pk, len(started))


def _wait_for_nodes(
    deployment: Deployment, head: ssh.Remote, head_pid: int, joining: list[tuple[ssh.Remote, Host, int]]
) -> None:
    """Until `ray status` on the head lists every node; a head or worker whose Ray exits ends it at
    once with that node's last line."""
    deadline = time.monotonic() + settings.HOSTS_HEALTH_TIMEOUT
    want = 1 + len(joining)
    while (seen := _count_nodes(head, deployment, head_pid)) < want:
        for remote, node, pid in joining:
            _worker_gone(remote, deployment, node, pid)
        if time.monotonic() > deadline:
            raise ClusterError(
                Message(
                    gettext_noop(
                        "Ray lists %(seen)s of %(want)s nodes after %(seconds)s s: can the workers reach "
                        "%(head)s over %(interface)s (firewall)?"
                    ),
                    seen=seen,
                    want=want,
                    seconds=f"{settings.HOSTS_HEALTH_TIMEOUT:g}",
                    head=head_address(deployment),
                    interface=deployment.network_interface,
                )
            )
        time.sleep(settings.HOSTS_HEALTH_POLL)  # Ray offers nothing to wait on over SSH


def stop_cluster(deployment: Deployment, head: ssh.Remote | None = None) -> list[str]:
    """`ray stop` and the Ray process group on every node; returns what could not be stopped."""
    nodes = workers(deployment)
    if not nodes:
        return []
    problems = []
    for node in [deployment.host, *nodes]:
        try:
            if node == deployment.host and head is not None:
                _stop_node(deployment, head)
            else:
                with ssh.connect(node) as remote:
                    _stop_node(deployment, remote)
        except ssh.SSHError as exc:
            problems.append(f"{node}: {exc.text.english}")
            _record_node(deployment, node, None, RayState.UNREACHABLE, exc.text)
        else:  # a node the supervisor found dead stays so on the page: that is why it was stopped
            DeploymentNode.objects.filter(deployment=deployment, host=node).exclude(ray_state=RayState.DEAD).update(
                ray_pid=None,
                ray_state=RayState.STOPPED,
                last_checked=timezone.now(),
                **cleared("message"),
            )
    return problems


def _stop_node(deployment: Deployment, remote: ssh.Remote) -> None:
    folder = commands.deployment_dir(deployment.remote_dir)
    remote.run([RAY, "stop", "--force"], timeout=60)
    pid = commands.read_pidfile(remote, folder, "ray")
    if pid and commands.is_alive(remote, pid):
        commands.kill(remote, pid, grace=5)
    commands.remove_pidfile(remote, folder, "ray")


@dataclass
class DeadNode:
    """A node whose Ray process the supervisor found gone: which, and what its log said last."""

    node: DeploymentNode
    reason: Message
    log: str


def check_nodes(deployment: Deployment, head: ssh.Remote) -> DeadNode | None:
    """The supervisor's look at every node's Ray process (the head's over `head`, each worker over
    its own connection); records what it saw on each node and returns the first dead one. A worker
    that cannot be reached is recorded as such, not as dead (the host's status says why)."""
    if not workers(deployment):
        return None
    folder = commands.deployment_dir(deployment.remote_dir)
    now = timezone.now()
    dead: DeadNode | None = None
    for node in sync_nodes(deployment):
        try:
            if node.host_id == deployment.host_id:
                found = _look_at_node(node, head, folder)
            else:
                with ssh.connect(node.host) as remote:
                    found = _look_at_node(node, remote, folder)
        except ssh.SSHError as exc:
            ssh.mark_contact(node.host, status=exc.status, message=exc.text)
            DeploymentNode.objects.filter(pk=node.pk).update(
                ray_state=RayState.UNREACHABLE, last_checked=now, **exc.text.columns("message", 300)
            )
            continue
        if found is None:
            DeploymentNode.objects.filter(pk=node.pk).update(
                ray_state=RayState.RUNNING, last_checked=now, **cleared("message")
            )
        elif dead is None:
            dead = found
    return dead


def _look_at_node(node: DeploymentNode, remote: ssh.Remote, folder: str) -> DeadNode | None:
    pid = node.ray_pid or commands.read_pidfile(remote, folder, "ray")
    if pid and commands.is_alive(remote, pid):
        return None
    log = commands.log_tail(remote, folder, "", name="ray")
    if node.role == NodeRole.HEAD:
        code = gettext_noop("Ray on the head node %(host)s (%(address)s) is gone (PID %(pid)s).")
    else:
        code = gettext_noop("Ray on the worker node %(host)s (%(address)s) is gone (PID %(pid)s).")
    reason = Message(code, host=node.host.name, address=node.host.address, pid=pid or "?")
    DeploymentNode.objects.filter(pk=node.pk).update(
        ray_state=RayState.DEAD, ray_pid=None, last_checked=timezone.now(), **reason.columns("message", 300)
    )
    return DeadNode(node=node, reason=reason, log=log)
