"""A cold start that cannot succeed says why, at once, to the requests waiting for it and on the
deployment's page: against the real sshd "GPU hosts" (`tests/fakes/sshd.py`), the real gateway
under uvicorn, and servers on the host that fail the way real ones do.

- a host that cannot be reached over SSH (a port nobody listens on, a key it refuses, a host key
  other than the one confirmed) is named with the SSH error, not "no host has room", and when no
  host merely lacks room the start fails at once instead of waiting out its budget;
- a host without the model's file fails the start at once, saying so;
- a server that exits while it loads fails the start at once, with the end of its log;
- a server that runs but never answers its health check: the waiting request is answered at the end
  of its budget naming that budget and HOSTS_HEALTH_TIMEOUT, and the launch stops the server and
  fails the start once HOSTS_HEALTH_TIMEOUT is over (the deployment does not stay "starting").

No Celery worker runs here: a pinned deployment's placement and launch run in the gateway's
process (`HOSTS_ONDEMAND_PINNED_IN_PROCESS`), and the test plays the worker's placement where two
hosts are looked at. The budgets are long where the answer must come at once, so an answer within
the client's timeout can only be the failure itself.
"""

from __future__ import annotations

import concurrent.futures
import datetime

import httpx
import pytest
from django.utils import timezone

from hosts.choices import DeploymentStatus, JobState
from hosts.models import GPU, ColdStart, Deployment, Host, LaunchJob
from hosts.ondemand import activity
from hosts.ondemand import services as ondemand
from hosts.ondemand.models import ColdStartState
from hosts.remote import ssh
from keys.services import issue_key
from tests.fakes.llamacpp import install_llama_server
from tests.services import free_port

from .test_ondemand import (  # noqa: F401  (fixtures)
    chat,
    gateway,
    hosts,
    namespace,
    on_demand,
    servers,
    two_targets,
    wait_for,
)
from .test_ondemand_placement import TINY_NEED

pytestmark = [pytest.mark.slow]


def host_at(target, name: str, port: int) -> Host:
    """A host registered for the sshd `target` (its key pinned) but reached on `port` (nothing
    there, or a proxy in front of it), with one GPU on record as an inventory would leave it."""
    host = Host.objects.create(
        name=name,
        address=target.address,
        ssh_port=port,
        username=target.username,
        private_key=target.client_private_key,
        host_key_fingerprint=target.host_key_fingerprint,
    )
    GPU.objects.create(host=host, index=0, name="RTX 4090", memory_total_mib=24564, memory_used_mib=0)
    return host


def refused(reply, code: str) -> dict:
    """The 503's error object, once it is the one expected (`code`)."""
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert error["code"] == code, reply.text
    return error


WRONG_PIN = "SHA256:" + "A" * 43


@pytest.fixture
def in_process(settings):
    settings.HOSTS_ONDEMAND_PINNED_IN_PROCESS = True
    settings.HOSTS_HEALTH_POLL = 0.2
    ssh.close_pooled()  # no connection pooled by an earlier test under another pin or key
    yield
    ssh.close_pooled()


def ask(url: str, key: str, model: str) -> httpx.Response:
    """One request; a minute is far more than a failure that is told at once needs, and far less
    than the hour's budget these tests set where the answer must come at once."""
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
    )


def _page(admin_client, d: Deployment) -> str:
    return admin_client.get(f"/deployments/{d.pk}/").content.decode()


# --- the host cannot be reached ---------------------------------------------------------------------
def test_a_pinned_host_that_refuses_ssh_fails_the_start_at_once_and_says_which_and_why(
    transactional_db,
    two_targets,  # noqa: F811
    gateway,  # noqa: F811
    in_process,
    alice,
    admin_client,
):
    target = two_targets[0]
    closed = free_port()  # nothing listens there: connection refused
    host = host_at(target, "gpu-gone", closed)
    d = on_demand(host, "od-gone", "od-gone", pin_host=True, cold_start_budget=3600)
    _key, key = issue_key(owner=alice, name="laptop")

    reply = ask(gateway, key, "od-gone")  # the budget is an hour: only the failure answers in time
    error = refused(reply, "model_start_failed")
    assert "Host gpu-gone could not be reached over SSH: Connection refused by " in error["message"], reply.text
    assert f"{target.address}:{closed}" in error["message"] and "room" not in error["message"], reply.text
    cold = ColdStart.objects.get(deployment=d)
    assert cold.state == ColdStartState.FAILED and "could not be reached over SSH" in cold.message
    assert any(line.startswith("gpu-gone: unreachable (Connection refused") for line in cold.reasons_english)
    page = _page(admin_client, d)
    assert "Host gpu-gone could not be reached over SSH: Connection refused by" in page
    assert "No host has room" not in page


def test_hosts_refusing_the_key_or_offering_another_host_key_fail_the_start_at_once_naming_each(
    hosts,  # noqa: F811
    two_targets,  # noqa: F811
    settings,
):
    """The worker's placement over both hosts: gpu-a refuses the portal's key, gpu-b offers a host
    key other than the one confirmed. Waiting cannot help: failed at once, both named, no secret."""
    a, b = hosts
    Host.objects.filter(pk=a.pk).update(private_key=two_targets[0].other_private_key())
    Host.objects.filter(pk=b.pk).update(host_key_fingerprint=WRONG_PIN)
    ssh.close_pooled()
    d = on_demand(a, "od-locked", "od-locked")
    cold = ColdStart.objects.get(pk=ondemand.demand(d.pk)["cold_start_id"])

    assert ondemand.place(cold.pk) is None  # not retried
    cold.refresh_from_db()
    assert cold.state == ColdStartState.FAILED, (cold.state, cold.message)
    assert cold.message.startswith("No host could be reached over SSH: gpu-a: Authentication failed for "), cold.message
    assert "; gpu-b: Host key changed: " in cold.message and WRONG_PIN in cold.message, cold.message
    secret = two_targets[0].other_private_key().splitlines()[1]
    assert secret not in cold.message and all(secret not in line for line in cold.reasons_english)
    seen = ondemand.observe(cold.pk)
    assert seen["state"] == "failed" and seen["message"] == cold.message


def test_a_full_host_and_an_unreachable_one_wait_for_room_and_the_answer_names_both(
    hosts,  # noqa: F811
    gateway,  # noqa: F811
    alice,
    settings,
):
    """gpu-a has no room (an on-demand model that has just served holds it), gpu-b offers the wrong
    host key: room may still come on gpu-a, so the start waits, and the request that waited its
    budget is told both; at the budget the start gives up saying both."""
    settings.HOSTS_ONDEMAND_EVICT_IDLE_SECONDS = 3600
    a, b = hosts
    holder = on_demand(a, "od-holder", "od-holder")
    Deployment.objects.filter(pk=holder.pk).update(status=DeploymentStatus.RUNNING, last_fit={"devices": TINY_NEED})
    activity.touch(holder.pk)
    Host.objects.filter(pk=b.pk).update(host_key_fingerprint=WRONG_PIN)
    ssh.close_pooled()
    d = on_demand(a, "od-mixed", "od-mixed", cold_start_budget=5)
    cold = ColdStart.objects.get(pk=ondemand.demand(d.pk)["cold_start_id"])  # as the first request would

    assert ondemand.place(cold.pk) == settings.HOSTS_ONDEMAND_RETRY_SECONDS  # the worker's first attempt
    cold.refresh_from_db()
    assert cold.state == ColdStartState.WAITING_ROOM
    assert cold.message.startswith("No host has room for it now"), cold.message
    assert "could not be reached over SSH: gpu-b: Host key changed: " in cold.message, cold.message

    _key, key = issue_key(owner=alice, name="laptop")
    reply = chat(gateway, key, "od-mixed")
    error = refused(reply, "model_starting")
    assert "did not start within 5 s, the cold-start budget set on its deployment" in error["message"], reply.text
    assert "No host has room for it now" in error["message"] and "gpu-b: Host key changed" in error["message"]
    shorter = chat(gateway, key, "od-mixed", headers={"Prefer": "wait=1"})
    assert shorter.status_code == 503, shorter.text
    said = shorter.json()["error"]["message"]
    assert "did not start within 1 s, the wait the request asked for (Prefer: wait)" in said, said
    assert "gpu-b: Host key changed" in said, said

    ColdStart.objects.filter(pk=cold.pk).update(deadline=timezone.now() - datetime.timedelta(seconds=1))
    assert ondemand.place(cold.pk) is None
    cold.refresh_from_db()
    assert cold.state == ColdStartState.FAILED and "gpu-b: Host key changed" in cold.message
    assert "cold-start budget" in cold.message


# --- the host lacks the model -----------------------------------------------------------------------
def test_a_pinned_host_without_the_model_file_fails_the_start_at_once_saying_so(
    hosts,  # noqa: F811
    gateway,  # noqa: F811
    in_process,
    alice,
    tmp_path,
):
    a, _b = hosts
    d = on_demand(a, "od-nofile", "od-nofile", pin_host=True, cold_start_budget=3600)
    Deployment.objects.filter(pk=d.pk).update(model_path=str(tmp_path / "gone.gguf"))
    _key, key = issue_key(owner=alice, name="laptop")

    reply = ask(gateway, key, "od-nofile")
    error = refused(reply, "model_start_failed")
    assert "No host can run it: gpu-a: the model file is not on this host" in error["message"], reply.text
    assert ColdStart.objects.get(deployment=d).state == ColdStartState.FAILED


# --- the server starts, then fails --------------------------------------------------------------------
EXITS_WHILE_LOADING = """#!{python}
import sys, time
print("llama_model_loader: loaded meta data with 24 key-value pairs", file=sys.stderr, flush=True)
time.sleep(1)
print("llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' data is not within the file bounds",
      file=sys.stderr, flush=True)
print("main: exiting due to model loading error", file=sys.stderr, flush=True)
sys.exit(1)
"""

NEVER_HEALTHY = """#!{python}
import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
host = sys.argv[sys.argv.index("--host") + 1]


class Loading(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # what llama-server answers while it loads its weights
        body = b'{{"error":{{"code":503,"message":"Loading model","type":"unavailable_error"}}}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


print("main: loading model", file=sys.stderr, flush=True)
http.server.HTTPServer((host, port), Loading).serve_forever()
"""


@pytest.fixture
def server_on_a(two_targets):  # noqa: F811
    """Put another `llama-server` on gpu-a's PATH for one test; the real one again afterwards."""
    import sys

    def use(script: str) -> None:
        path = two_targets[0].bin / "llama-server"
        path.write_text(script.format(python=sys.executable))
        path.chmod(0o755)

    yield use
    install_llama_server(two_targets[0].bin)


def test_a_server_that_exits_while_loading_answers_the_waiting_requests_at_once_with_its_log(
    hosts,  # noqa: F811
    gateway,  # noqa: F811
    in_process,
    servers,  # noqa: F811
    server_on_a,
    alice,
):
    server_on_a(EXITS_WHILE_LOADING)
    a, _b = hosts
    d = on_demand(a, "od-exits", "od-exits", pin_host=True, cold_start_budget=3600)
    _key, key = issue_key(owner=alice, name="laptop")

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(pool.map(lambda _i: ask(gateway, key, "od-exits"), range(3)))
    for reply in replies:
        error = refused(reply, "model_start_failed")
        assert "The model could not be loaded (exit code 1)" in error["message"], reply.text
        assert "data is not within the file bounds" in error["message"], reply.text
    d.refresh_from_db()
    assert d.status == DeploymentStatus.FAILED
    assert ColdStart.objects.get(deployment=d).state == ColdStartState.FAILED


def test_a_server_that_never_turns_healthy_is_refused_at_the_budget_then_stopped_at_the_health_timeout(
    hosts,  # noqa: F811
    gateway,  # noqa: F811
    in_process,
    servers,  # noqa: F811
    server_on_a,
    alice,
    settings,
    admin_client,
):
    """The budget (5 s) is shorter than HOSTS_HEALTH_TIMEOUT (20 s here): the request is answered
    at its budget naming both, the server keeps its chance to come up until the timeout, then
    it is stopped and the start fails; the deployment is not left "starting"."""
    settings.HOSTS_HEALTH_TIMEOUT = 20
    server_on_a(NEVER_HEALTHY)
    a, _b = hosts
    d = on_demand(a, "od-hung", "od-hung", pin_host=True, cold_start_budget=5)
    _key, key = issue_key(owner=alice, name="laptop")
    # A first request starts the model and does not wait; the one measured waits its whole budget
    # once the server runs (a loaded machine may take longer than 5 s to get there).
    assert chat(gateway, key, "od-hung", headers={"Prefer": "wait=0"}).status_code == 503
    wait_for(
        lambda: ColdStart.objects.filter(deployment=d, state=ColdStartState.LAUNCHING).exists(),
        60,
        "the server started",
    )

    reply = chat(gateway, key, "od-hung")
    error = refused(reply, "model_starting")
    message = error["message"]
    assert "did not start within 5 s, the cold-start budget set on its deployment" in message, message
    assert "has not answered its health check yet" in message and "Launching on gpu-a" in message, message
    assert "up to 20 s for it, HOSTS_HEALTH_TIMEOUT" in message, message

    cold = ColdStart.objects.get(deployment=d)
    wait_for(lambda: ColdStart.objects.get(pk=cold.pk).state == ColdStartState.FAILED, 120, "the start given up")
    d.refresh_from_db()
    assert d.status == DeploymentStatus.FAILED and d.pid is None
    assert "No healthy answer from" in d.status_message and "within 20 s" in d.status_message
    cold.refresh_from_db()
    assert "No healthy answer from" in cold.message
    assert "No healthy answer from" in _page(admin_client, d)


# --- the host goes away mid-start ---------------------------------------------------------------------
def test_a_host_that_goes_away_while_its_server_loads_fails_the_start_at_once_saying_so(
    two_targets,  # noqa: F811
    gateway,  # noqa: F811
    in_process,
    servers,  # noqa: F811
    server_on_a,
    alice,
    settings,
):
    """gpu-a is reached through a TCP proxy; once its server was started and the launch waits for
    its health, the proxy drops the SSH connection and refuses new ones (the host went off the
    network): the waiting request is told at once that contact with the host was lost while the
    server was starting, and that the server may still run there."""
    from tests.fakes.tcp_proxy import TcpProxy

    settings.HOSTS_HEALTH_TIMEOUT = 600
    server_on_a(NEVER_HEALTHY)
    target = two_targets[0]
    with TcpProxy(f"tcp://{target.address}:{target.port}") as proxy:
        host = host_at(target, "gpu-flaky", proxy.port)
        d = on_demand(host, "od-flaky", "od-flaky", pin_host=True, cold_start_budget=3600)
        _key, key = issue_key(owner=alice, name="laptop")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(ask, gateway, key, "od-flaky")
            wait_for(
                lambda: LaunchJob.objects.filter(deployment=d, state=JobState.WAITING_HEALTH).exists(),
                60,
                "the server started, its health awaited",
            )
            proxy.set("refuse")
            reply = waiting.result(timeout=120)
    error = refused(reply, "model_start_failed")
    message = error["message"]
    assert "Lost contact with gpu-flaky over SSH while its server was starting" in message, message
    assert "it may still be running there" in message, message
    d.refresh_from_db()
    assert d.status == DeploymentStatus.FAILED and "Lost contact with gpu-flaky" in d.status_message
