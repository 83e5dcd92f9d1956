"""Models on demand end to end: two real sshd "GPU hosts" (fake nvidia-smi: 390 and 290 MiB free,
room for one tiny llama.cpp model each), a real Celery worker (Redis broker) running the placement
and the launch jobs, the real gateway under uvicorn, and real llama.cpp servers started over SSH.

Three on-demand models where only two fit: the first is asked by 20 requests at once (one launch,
every request answered, a stream kept alive with `: waiting for model`), the second goes to the
other host, the third evicts the idle one and not the busy one; past its TTL a model is stopped and
its GPU memory counts as free again. A key over its quota never starts a model.
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import os
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from django.conf import settings

from hosts.choices import DeploymentStatus, JobAction
from hosts.deployments import services
from hosts.models import GPU, ColdStart, Deployment, Host, LaunchJob
from hosts.ondemand import activity
from hosts.ondemand import services as ondemand
from hosts.ondemand.models import ColdStartState
from keys.models import UsageRecord
from keys.services import issue_key
from portal.env import celery_broker_url
from tests.fakes.llamacpp import tiny_gguf_path
from tests.fakes.sshd import SSHTarget
from tests.gateway.conftest import ThreadServer, database_url
from tests.hosts.conftest import registered_host
from tests.services import free_port, redis_url, require_binary, unavailable

pytestmark = [pytest.mark.slow]

EXACT = {"ignore_eos": True}


def _target(gpus: str) -> SSHTarget:
    sshd = require_binary("/usr/sbin/sshd", "apt-get install openssh-server")
    target = SSHTarget(sshd=sshd)
    try:
        target.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        target.stop()
        unavailable(f"a test sshd could not start: {exc}")
    target.use_gpus(gpus)
    return target


@pytest.fixture(scope="module")
def two_targets():
    a, b = _target("nvidia_smi_small_a"), _target("nvidia_smi_small_b")
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(autouse=True)
def namespace(monkeypatch):
    """Our own Redis key namespace, shared with the worker (its environment is copied from ours)."""
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "odtest-" + uuid.uuid4().hex[:10])


@pytest.fixture
def hosts(transactional_db, two_targets):
    return registered_host("gpu-a", two_targets[0]), registered_host("gpu-b", two_targets[1])


@pytest.fixture
def gateway(transactional_db, settings):
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    server = ThreadServer().start()
    yield server.url
    server.stop()


@pytest.fixture
def worker(transactional_db, tmp_path):
    """A real Celery worker on our own queue: the placement and the launch jobs run there."""
    from portal.celery import app

    queue = f"ondemand-test-{uuid.uuid4().hex[:8]}"
    before = (app.conf.task_default_queue, app.conf.task_always_eager)
    app.conf.task_default_queue, app.conf.task_always_eager = queue, False
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_BROKER_URL": celery_broker_url(redis_url()),
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "PORTAL_DATA_DIR": str(settings.DATA_DIR),
        "HOSTS_HEALTH_POLL": "0.2",
        "HOSTS_HEALTH_TIMEOUT": "120",
        "HOSTS_STOP_GRACE": "5",
        # No grace: a model with no request in flight may be evicted at once. With a grace of a few
        # seconds the placements below would depend on how fast the box ran the requests before
        # them (the grace itself is tested in test_ondemand_placement.py, on a clock it sets).
        "HOSTS_ONDEMAND_EVICT_IDLE_SECONDS": "0",
        "HOSTS_ONDEMAND_RETRY_SECONDS": "0.5",
    }
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", queue, "-c", "2", "-l", "info"),
                *("--without-gossip", "--without-mingle", "--without-heartbeat"),
            ],
            env=env,
            cwd=settings.BASE_DIR,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield log_path
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
            app.conf.task_default_queue, app.conf.task_always_eager = before


@pytest.fixture
def servers():
    """Every llama-server a deployment ran is killed by its process group afterwards."""
    yield
    for pid in Deployment.objects.exclude(pid=None).values_list("pid", flat=True):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def on_demand(host: Host, name: str, served: str, **fields) -> Deployment:
    return services.save_deployment(
        host=host,
        name=name,
        backend="llamacpp",
        model_path=str(tiny_gguf_path()),
        served_model_name=served,
        gpu_indices=[0],
        port=free_port(),
        options={"ctx_size": 1024, "threads": 1, "parallel": 1},
        extra_args=[],
        on_demand=True,
        idle_ttl=30,
        **{"cold_start_budget": 150, **fields},
    )


def on_demand_far(name: str, **fields) -> Deployment:
    """An on-demand deployment of `name` on a GPU host no test reaches over SSH: for the tests that
    play the worker's side themselves (the gateway's side of a cold start is what they test)."""
    host = Host.objects.create(
        name="gpu-far", address="127.0.0.1", ssh_port=free_port(), username="gpu", private_key="unused"
    )
    GPU.objects.create(host=host, index=0, name="RTX 4090", memory_total_mib=24564, memory_used_mib=0)
    return on_demand(host, name, name, **fields)


def serving(d: Deployment, base_url: str, api_key: str, pid: int | None = None) -> None:
    """What the launch job leaves behind once the deployment's server answers (at `base_url`): its
    channel registered, the deployment running (announced to the gateway after the commit)."""
    from channels import services as channel_services

    channel = channel_services.register_served_model(
        channel=None,
        name=f"{d.served_model_name}@{d.host.name}",
        kind="vllm",
        base_url=base_url,
        api_key=api_key,
        model_name=d.served_model_name,
        upstream_model="fake-model",
        context_window=8192,
        status_message="test",
    )
    Deployment.objects.filter(pk=d.pk).update(channel=channel)
    d.refresh_from_db()
    services.set_status(d, DeploymentStatus.RUNNING, "Serving (test).", **({"pid": pid} if pid else {}))


def wait_for(predicate, timeout: float, what: str, log_path=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            log = log_path.read_text()[-4000:] if log_path else ""
            pytest.fail(f"{what} not reached in {timeout}s\n{log}")
        time.sleep(0.2)


def chat(url: str, key: str, model: str, **extra) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", **extra.pop("headers", {})},
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, **EXACT, **extra},
        timeout=200,
    )


def status(d: Deployment) -> str:
    d.refresh_from_db()
    return d.status


def test_three_models_two_fit_one_launch_for_twenty_evict_the_idle_never_the_busy_stop_after_ttl(
    hosts, gateway, worker, servers, alice, admin_client
):
    a, b = hosts
    one = on_demand(a, "od-one", "od-one")
    two = on_demand(a, "od-two", "od-two")
    three = on_demand(a, "od-three", "od-three")
    _key, key = issue_key(owner=alice, name="laptop")

    # Listed while stopped, flagged cold.
    listed = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    cold = {m["id"]: m.get("cold") for m in listed}
    assert cold == {"od-one": True, "od-two": True, "od-three": True}

    # 20 first requests at once (one a stream): one cold start, one launch, every one answered.
    def stream() -> tuple[int, list[str]]:
        lines = []
        with httpx.stream(
            "POST",
            f"{gateway}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "od-one", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
            | EXACT,
            timeout=200,
        ) as resp:
            for line in resp.iter_lines():
                lines.append(line)
            return resp.status_code, lines

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        streamed = pool.submit(stream)
        answers = list(pool.map(lambda _i: chat(gateway, key, "od-one"), range(19)))
        code, lines = streamed.result()
    assert [r.status_code for r in answers] == [200] * 19, [r.text for r in answers if r.status_code != 200]
    assert all(r.json()["usage"]["completion_tokens"] == 3 for r in answers)
    assert code == 200 and lines[0] == ": waiting for model" and "data: [DONE]" in lines, lines
    assert any(line.startswith("data: {") and '"choices"' in line for line in lines)
    assert LaunchJob.objects.filter(deployment=one, action=JobAction.LAUNCH).count() == 1
    assert ColdStart.objects.filter(deployment=one).count() == 1
    one.refresh_from_db()
    assert one.status == DeploymentStatus.RUNNING and one.host == a  # the host with the most free memory
    wait_for(
        lambda: UsageRecord.objects.filter(model="od-one", cold_start_ms__isnull=False).count() == 20,
        30,
        "20 usage records marked as having waited for the cold start",
    )

    # The second model: gpu-a has room only by stopping od-one, gpu-b without stopping anything.
    assert chat(gateway, key, "od-two").status_code == 200
    two.refresh_from_db()
    assert two.status == DeploymentStatus.RUNNING and two.host == b
    placement = ColdStart.objects.get(deployment=two)
    assert any(
        line.startswith("gpu-a: fits") and "after stopping od-one" in line for line in placement.reasons_english
    ), placement.reasons_english
    assert placement.reasons_english[-1] == "chosen gpu-b" and placement.evicted == []

    # The third: both hosts full. od-two has a request in flight (as the gateway counts it),
    # od-one is idle: od-one is stopped to make room, od-two is not.
    import redis

    r = redis.Redis.from_url(settings.REDIS_URL)
    r.zadd(activity.busy_key(two.pk), {"held-request": time.time() + 600})
    wait_for(lambda: time.time() - (activity.last_request(one.pk) or 0) > 1.5, 10, "od-one idle past the grace")
    reply = chat(gateway, key, "od-three")
    assert reply.status_code == 200, reply.text
    assert status(one) == DeploymentStatus.STOPPED and status(two) == DeploymentStatus.RUNNING
    three.refresh_from_db()
    assert three.status == DeploymentStatus.RUNNING and three.host == a
    third = ColdStart.objects.get(deployment=three)
    assert third.evicted == [{"name": "od-one", "host": "gpu-a"}], third.reasons_english
    assert any("after stopping od-one" in line for line in third.reasons_english), third.reasons_english

    # The admin sees it on the deployment's page: state, last host, p50/p95, placements.
    page = admin_client.get(f"/deployments/{three.pk}/").content.decode()
    assert 'id="on-demand"' in page and "gpu-a" in page and "after stopping od-one" in page
    assert "No cold start yet." not in page

    # Past the TTL (30 s, the sweep's clock moved on): both running ones stop, nothing in flight;
    # the busy one only once its request ended.
    later = time.time() + 31
    assert ondemand.sweep_idle(now=later) == ["od-three"]
    r.zrem(activity.busy_key(two.pk), "held-request")
    assert ondemand.sweep_idle(now=later) == ["od-two"]
    wait_for(
        lambda: status(three) == DeploymentStatus.STOPPED and status(two) == DeploymentStatus.STOPPED,
        60,
        "idle deployments stopped",
        worker,
    )
    # gpu-a's memory is free again: od-one fits there without stopping anything.
    assert ondemand.assess(one, a).reason.english.startswith("fits on GPU 0;")

    def all_cold() -> bool:  # the listing follows at the gateway's next catalog load
        listed = httpx.get(f"{gateway}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"]
        return {m["id"]: m.get("cold") for m in listed} == {"od-one": True, "od-two": True, "od-three": True}

    wait_for(all_cold, 60, "every model listed as cold again")


def test_a_key_over_its_quota_never_starts_a_model(transactional_db, hosts, gateway, alice):
    d = on_demand(hosts[0], "od-quota", "od-quota")
    _key, key = issue_key(owner=alice, name="tiny", tokens_per_day=1)
    reply = chat(gateway, key, "od-quota")
    assert reply.status_code == 429, reply.text
    assert not ColdStart.objects.filter(deployment=d).exists()
    assert not LaunchJob.objects.filter(deployment=d).exists()


def test_a_client_that_cannot_wait_gets_503_with_an_estimate_and_the_start_goes_on(
    transactional_db, hosts, gateway, alice
):
    d = on_demand(hosts[0], "od-nowait", "od-nowait")
    _key, key = issue_key(owner=alice, name="laptop")
    reply = chat(gateway, key, "od-nowait", headers={"Prefer": "wait=0"})
    assert reply.status_code == 503, reply.text
    assert reply.json()["error"]["code"] == "model_starting"
    assert int(reply.headers["retry-after"]) >= 1
    wait_for(lambda: ColdStart.objects.filter(deployment=d).count() == 1, 30, "the start under way")
    wait_for(lambda: UsageRecord.objects.filter(model="od-nowait").exists(), 30, "the refusal on the record")
    record = UsageRecord.objects.get(model="od-nowait")
    assert record.http_status == 503


def test_what_cannot_start_in_its_budget_is_refused_never_dropped(transactional_db, hosts, gateway, alice, settings):
    """No worker runs the placement here, so the model never starts: with a queue of one per
    process, of two requests at once one is refused at once (queue full), the other (a stream, kept
    alive meanwhile) after the 5 s budget, as an error event; both 503 with Retry-After."""
    settings.GATEWAY_ONDEMAND_QUEUE = 1
    on_demand(hosts[0], "od-slow", "od-slow", cold_start_budget=5)
    _key, key = issue_key(owner=alice, name="laptop")

    def stream() -> list[str]:
        with httpx.stream(
            "POST",
            f"{gateway}/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "od-slow", "messages": [{"role": "user", "content": "hi"}], "stream": True},
            timeout=60,
        ) as resp:
            assert resp.status_code == 200  # the SSE headers went out before the wait
            return list(resp.iter_lines())

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        streamed = pool.submit(stream)
        wait_for(lambda: ColdStart.objects.filter(deployment__name="od-slow").exists(), 30, "the stream waiting")
        refused = chat(gateway, key, "od-slow")
        lines = streamed.result()
    assert refused.status_code == 503 and "queue is full" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert lines[0] == ": waiting for model"
    errors = [line for line in lines if line.startswith("data: {")]
    assert len(errors) == 1 and '"code":"model_starting"' in errors[0] and "did not start within 5 s" in errors[0]
    assert lines[-2:] == ["data: [DONE]", ""] or "data: [DONE]" in lines
    wait_for(lambda: UsageRecord.objects.filter(model="od-slow", http_status=503).count() == 2, 30, "two refusals")


@pytest.fixture
def cloud(transactional_db):
    """An external channel (a cloud provider's, running and healthy) serving the model `cloud-coder`."""
    from channels.models import Model
    from tests.fakes.upstream import FakeUpstream
    from tests.gateway.conftest import add_channel

    with FakeUpstream(api_key="cloud-key") as upstream:
        add_channel(upstream, "cloud", model=Model.objects.create(name="cloud-coder"))
        yield upstream


@pytest.mark.parametrize("local_only", ["alias", "key"])
def test_a_local_request_to_an_alias_served_now_only_externally_starts_its_on_demand_target(
    local_only, hosts, gateway, servers, cloud, alice
):
    """The alias `coder` falls through `cloud-coder` (served now, by an external channel only) to
    `od-local` (on demand, stopped, on our host). A local-only request (the alias is local-only, or
    the key is) may not use the external channel: the request starts `od-local` (placed and launched
    by the gateway itself, the deployment being pinned), as a request for it by name would, and is
    answered once it runs (was: 403 `local_only`, as if the external channel were what serves the
    alias now); the key's model list offers the alias, as its client configs do. Another key on the
    alias that is not local-only is served by the cloud at once, nothing started."""
    from channels.services import save_alias
    from clientconfigs.services import usable_models

    d = on_demand(hosts[0], "od-local", "od-local", pin_host=True)
    save_alias(name="coder", targets=["cloud-coder", "od-local"], local_only=local_only == "alias")
    if local_only == "key":
        _key, anywhere = issue_key(owner=alice, name="desktop")
        reply = chat(gateway, anywhere, "coder")
        assert reply.status_code == 200, reply.text
        assert len(cloud.requests) == 1 and not ColdStart.objects.exists()
    stored, key = issue_key(owner=alice, name="laptop", local_only=local_only == "key")
    auth = {"Authorization": f"Bearer {key}"}
    listed = {m["id"] for m in httpx.get(f"{gateway}/v1/models", headers=auth).json()["data"]}
    one = httpx.get(f"{gateway}/v1/models/coder", headers=auth)
    sent_to_cloud = len(cloud.requests)

    reply = chat(gateway, key, "coder")

    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] == 3
    assert status(d) == DeploymentStatus.RUNNING and d.host == hosts[0]
    assert ColdStart.objects.get(deployment=d).state == ColdStartState.READY
    assert len(cloud.requests) == sent_to_cloud  # never sent to the external channel
    assert {"coder", "od-local"} <= listed, listed
    assert one.status_code == 200, one.text
    assert "coder" in {m.name for m in usable_models(alice, stored)}
    wait_for(
        lambda: UsageRecord.objects.filter(model="coder", key=stored, cold_start_ms__isnull=False).exists(),
        30,
        "the request's record, as having waited for the cold start",
    )


def test_a_request_through_an_alias_is_a_use_of_the_on_demand_target_that_served_it(
    hosts, gateway, servers, cloud, alice
):
    """The idle sweep stops an on-demand model whose last request is older than its TTL. `coder`
    (local-only) and `coder-any` both fall through `cloud-coder` (external) to `od-local` (on
    demand, running, its start and last request an hour ago). A request through `coder-any` is
    served by the cloud: it passed `od-local` by, which stays as idle as it was. One through
    `coder` is served by `od-local`: its last request now, the sweep leaves it running."""
    from django.utils import timezone

    from channels.services import save_alias
    from hosts.models import DeploymentRun

    d = on_demand(hosts[0], "od-local", "od-local", pin_host=True)
    save_alias(name="coder", targets=["cloud-coder", "od-local"], local_only=True)
    save_alias(name="coder-any", targets=["cloud-coder", "od-local"])
    _key, key = issue_key(owner=alice, name="laptop")
    assert chat(gateway, key, "od-local").status_code == 200  # started by name
    wait_for(lambda: activity.in_flight(d.pk) == 0, 30, "the start's request no longer in flight")
    hour_ago = time.time() - 3600
    ColdStart.objects.filter(deployment=d).update(finished=timezone.now() - dt.timedelta(hours=1))
    DeploymentRun.objects.filter(deployment=d).update(started=timezone.now() - dt.timedelta(hours=1))
    activity.touch(d.pk, when=hour_ago)
    assert ondemand._idle_since(d) == pytest.approx(hour_ago, abs=1)

    reply = chat(gateway, key, "coder-any")
    assert reply.status_code == 200 and len(cloud.requests) == 1, reply.text
    wait_for(lambda: activity.in_flight(d.pk) == 0, 30, "the request through coder-any no longer in flight")
    assert activity.last_request(d.pk) == hour_ago  # not a use of od-local

    sent = time.time()
    reply = chat(gateway, key, "coder")
    assert reply.status_code == 200 and len(cloud.requests) == 1, reply.text
    wait_for(lambda: (activity.last_request(d.pk) or 0) >= sent, 30, "the request through coder a use of od-local")
    assert ondemand.sweep_idle(now=sent + d.idle_ttl - 1) == []
    assert status(d) == DeploymentStatus.RUNNING
