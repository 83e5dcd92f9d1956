"""An on-demand model busy with a request is not stopped by the idle sweep after Redis restarts.

The requests in flight to an on-demand model are counted in Redis (`hosts.ondemand.activity`); a
restart of Redis without its data empties those sets and the time of the last request. The model,
started long ago, then looks idle to the sweep with nothing in flight: it must not be stopped
under the request still being answered. The gateway's lease renewal puts the request back in the
set (as it puts back its parallel slot), so the sweep's reads, before and after it takes the model
out of routing, find it.

Real parts: the gateway under uvicorn, PostgreSQL, a private redis-server restarted by the test,
the sshd fake as the GPU host, and the deployment's server as a process of its own in front of the
fake upstream (see tests/hosts/test_ondemand_stop.py, whose fixtures these are).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import threading
import time
from collections.abc import Iterator

import pytest
from django.utils import timezone

from gateway.cache import namespace as gateway_namespace
from gateway.state import process
from hosts.choices import DeploymentStatus, JobAction
from hosts.models import LaunchJob
from hosts.ondemand import activity
from hosts.ondemand import services as ondemand
from keys.services import issue_key
from tests.fakes.redis_server import RedisServer
from tests.gateway.conftest import ThreadServer, wait_for
from tests.hosts import test_ondemand_stop as stop_tests
from tests.hosts.test_ondemand_stop import _ask, _in_thread, _run_queued_stops, _sweep

pytestmark = [pytest.mark.slow, pytest.mark.services]

namespace, served = stop_tests.namespace, stop_tests.served  # its fixtures


@pytest.fixture
def restartable(transactional_db, settings, monkeypatch, tmp_path):
    """A private Redis the test may restart, for the gateway and the workers' side alike."""
    with RedisServer() as server:
        settings.REDIS_URL = server.url
        monkeypatch.setattr(activity, "_client", None)  # the workers' client, made again for this Redis
        yield server


@pytest.fixture
def gateway(request, restartable, served, settings, tmp_path):
    """The gateway, its leases `request.param` seconds long (renewed every third of it)."""
    settings.GATEWAY_LEASE_SECONDS = request.param
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    server = ThreadServer().start()
    yield server.url
    server.stop()


def _uptime(server: RedisServer) -> int:
    return int(server.client.info("server")["uptime_in_seconds"])


@contextlib.contextmanager
def _in_flight_across_a_restart(server: RedisServer, gateway: str, served, alice) -> Iterator[None]:
    """A request being answered by the model (held at its server) while Redis restarts; on the
    way out it is answered in full."""
    d = served.deployment
    # A parallel limit: its slot, put back by the same renewal, says when the renewal has run.
    _key, key = issue_key(owner=alice, name="laptop", max_parallel_requests=5)
    served.upstream.gate = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        asked = pool.submit(_ask, gateway, key)
        try:
            wait_for(lambda: served.upstream.requests, 60)  # at the server, being answered
            assert server.client.zcard(activity.busy_key(d.pk)) == 1
            server.restart()  # every set and counter is gone
            yield
        finally:
            served.upstream.gate.set()
        reply = asked.result(timeout=120)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 3


def _kept_running(served, stopped: bool) -> None:
    d = served.deployment
    assert not stopped, "the sweep stopped a model with a request in flight"
    assert served.server.poll() is None, "the server was killed under its request"
    assert served.status() == DeploymentStatus.RUNNING and served.routed()
    assert not LaunchJob.objects.filter(deployment=d, action=JobAction.STOP).exists()


# Leases of 3 s, renewed each second: an entry put back lives a lease (RENEW_LUA), so a renewal a
# loaded machine delays by under 2 s does not let it lapse under the sweep.
@pytest.mark.parametrize("gateway", [3.0], indirect=True)
def test_the_gateways_renewal_puts_a_request_in_flight_back_after_a_redis_restart(
    restartable,
    gateway,
    served,
    alice,
):
    d = served.deployment
    with _in_flight_across_a_restart(restartable, gateway, served, alice):
        wait_for(lambda: _uptime(restartable) >= 3, 60)  # a lease: the sweep trusts the count again
        wait_for(lambda: restartable.client.keys(f"{gateway_namespace()}:*:p"), 60)  # the renewal has run
        assert activity.in_flight(d.pk) == 1
        stopped = _in_thread(_sweep, d)
        _run_queued_stops(d)
    _kept_running(served, stopped)

    # The request ended: nothing in flight, and no entry left behind keeps the model from its stop.
    limiter = process.limiter
    wait_for(lambda: limiter is not None and not limiter.in_flight and activity.in_flight(d.pk) == 0, 30)
    assert _in_thread(_sweep, d)


@pytest.mark.parametrize("gateway", [3600.0], indirect=True)  # no renewal in the test's time
def test_the_sweep_does_not_trust_an_empty_count_before_the_gateways_renewed_their_leases(
    restartable,
    gateway,
    served,
    alice,
):
    d = served.deployment
    with _in_flight_across_a_restart(restartable, gateway, served, alice):
        assert activity.in_flight(d.pk) is None  # Redis cannot say yet
        stopped = _in_thread(_sweep, d)
        _run_queued_stops(d)
    _kept_running(served, stopped)


@pytest.mark.parametrize("gateway", [1.0], indirect=True)
def test_a_model_used_just_before_a_redis_restart_gets_its_whole_ttl_from_the_restart(
    restartable, gateway, served, alice
):
    """The restart forgot when the model was last used: it is idle since Redis started, not since
    its own start (stopped at the next sweep, and its next user would wait for a cold start)."""
    d = served.deployment
    d.runs.update(started=timezone.now() - datetime.timedelta(hours=1))  # started long ago
    _key, key = issue_key(owner=alice, name="laptop")
    assert _ask(gateway, key).status_code == 200
    wait_for(lambda: activity.in_flight(d.pk) == 0 and activity.last_request(d.pk), 30)

    restartable.restart()
    wait_for(lambda: _uptime(restartable) >= 1, 60)  # a lease: the sweep trusts the count again
    assert activity.in_flight(d.pk) == 0 and activity.last_request(d.pk) is None
    assert ondemand.sweep_idle(now=time.time()) == []
    assert served.status() == DeploymentStatus.RUNNING and served.routed()

    assert _in_thread(_sweep, d)  # a TTL later it is idle: stopped
