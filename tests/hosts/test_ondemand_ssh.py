"""What a cold start costs the hosts in SSH, counted by the two real sshd "GPU hosts" themselves
(their own log: connections authenticated, sessions started), not by our client.

The placement (a fresh nvidia-smi, the model file and its header on each host) and the launch job
it runs (checks, start, the looks at the process while /health comes up, the inventory after) share
ONE connection per host; a second cold start within HOSTS_SSH_KEEP_SECONDS opens none at all; a
changed pin (the host's key confirmed again) is never served by the old connection.
"""

from __future__ import annotations

import pytest

from hosts.choices import DeploymentStatus, JobAction, JobState
from hosts.deployments import jobs
from hosts.models import Host
from hosts.ondemand import services as ondemand
from hosts.remote import ssh

from .test_ondemand import hosts, namespace, on_demand, servers, two_targets  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow]


def _counts(targets) -> list[tuple[int, int]]:
    return [t.counts() for t in targets]


def _new(after, before) -> tuple[list[int], list[int]]:
    pairs = list(zip(after, before, strict=True))
    return [a[0] - b[0] for a, b in pairs], [a[1] - b[1] for a, b in pairs]


def _cold_start(d) -> None:
    """The placement task's body, run here: place, then the launch job it runs with its watch."""
    cold_id = ondemand.demand(d.pk)["cold_start_id"]
    assert ondemand.place(cold_id) is None
    launched = ondemand.launch(cold_id)
    assert launched is not None and launched[1] is None  # healthy within the watch: nothing re-scheduled
    d.refresh_from_db()
    assert d.status == DeploymentStatus.RUNNING, d.status_message
    assert ondemand.observe(cold_id)["state"] == "ready"


def test_a_cold_start_uses_one_ssh_connection_per_host_and_the_next_one_none(
    hosts,  # noqa: F811
    two_targets,  # noqa: F811
    servers,  # noqa: F811
    settings,
):
    settings.HOSTS_HEALTH_POLL = 0.2
    a, _b = hosts
    d = on_demand(a, "od-ssh", "od-ssh")
    ssh.close_pooled()  # nothing pooled by an earlier test
    before = _counts(two_targets)

    _cold_start(d)
    connections, sessions = _new(_counts(two_targets), before)
    assert d.host == a
    assert connections == [1, 1], (connections, sessions)
    # gpu-b was only assessed: nvidia-smi, the model file and its header, in one session.
    assert sessions[1] == 1, sessions

    stop = jobs.request_job(d, JobAction.STOP, queue=False)
    assert jobs.run_job(stop.pk) is None
    stop.refresh_from_db()
    assert stop.state == JobState.STOPPED, stop.message

    before = _counts(two_targets)
    _cold_start(d)
    connections, sessions = _new(_counts(two_targets), before)
    assert connections == [0, 0], (connections, sessions)  # the pooled ones served it all
    assert sessions[1] == 1, sessions


def test_a_pooled_connection_is_not_used_once_the_pin_changed(hosts, two_targets):  # noqa: F811
    """The pooled connection belongs to the pin it was checked against: confirm another key and the
    next use opens a new connection, which the host's real key then fails."""
    a, _b = hosts
    ssh.close_pooled()
    with ssh.connect(a, reuse=True) as remote:
        assert remote.run(["true"]).ok
    before = two_targets[0].counts()[0]
    with ssh.connect(a, reuse=True) as remote:
        assert remote.run(["true"]).ok
    assert two_targets[0].counts()[0] == before  # reused

    Host.objects.filter(pk=a.pk).update(host_key_fingerprint="SHA256:" + "A" * 43)
    a.refresh_from_db()
    with pytest.raises(ssh.HostKeyChanged), ssh.connect(a, reuse=True):
        pass
