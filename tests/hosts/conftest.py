import os
import signal
import subprocess

import pytest

from hosts.models import Host
from tests.fakes.sshd import SSHTarget
from tests.services import require_binary, unavailable


@pytest.fixture(scope="session")
def ssh_target():
    """One real sshd for the whole session (starting one costs ~0.2 s, but keys and files add up)."""
    sshd = require_binary("/usr/sbin/sshd", "apt-get install openssh-server")
    require_binary("ssh-keygen", "apt-get install openssh-client")
    target = SSHTarget(sshd=sshd)
    try:
        target.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        target.stop()
        unavailable(f"a test sshd could not start here: {exc}")
    yield target
    target.stop()


@pytest.fixture
def gpu_host(db, ssh_target):
    """A host registered for the sshd target with its key already confirmed and an RTX 3080 Ti."""
    ssh_target.use_gpus("nvidia_smi_rtx3080ti")
    return Host.objects.create(
        name="gpu-box",
        address="127.0.0.1",
        ssh_port=ssh_target.port,
        username=ssh_target.username,
        private_key=ssh_target.client_private_key,
        host_key_fingerprint=ssh_target.host_key_fingerprint,
    )


@pytest.fixture
def started_pids():
    """Whatever a test leaves running is killed by PID afterwards (never by name)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def registered_host(name: str, target: SSHTarget) -> Host:
    """A host registered for the sshd `target` (its key pinned) and inventoried, as an admin's
    "add host" then "refresh" leaves it."""
    from hosts.remote import inventory

    host = Host.objects.create(
        name=name,
        address=target.address,
        ssh_port=target.port,
        username=target.username,
        private_key=target.client_private_key,
        host_key_fingerprint=target.host_key_fingerprint,
    )
    inventory.refresh(host)
    return host
