"""The placement's rules against two real sshd "GPU hosts" (fake nvidia-smi: 390 and 290 MiB free,
room for one tiny llama.cpp model each): what may be evicted and in which order, a pinned host,
and the no-thrash rule (a cold model whose room is held by a busy or just-used model waits, and is
refused when its cold-start budget runs out). The placement runs here, as the worker's task does;
the deployments said to be running hold their memory through their stored estimates."""

from __future__ import annotations

import datetime
import re
import time
import uuid

import pytest
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.html import escape

from hosts.choices import DeploymentStatus
from hosts.deployments import services
from hosts.models import ColdStart, Deployment, Host, LaunchJob
from hosts.ondemand import activity
from hosts.ondemand import services as ondemand
from hosts.ondemand.models import ColdStartState
from tests.fakes.llamacpp import tiny_gguf_path
from tests.hosts.conftest import registered_host
from tests.services import free_port

from .test_ondemand import two_targets  # noqa: F401  (the module-scoped sshd pair)

TINY_NEED = [{"name": "GPU 0", "index": 0, "need_gib": 0.2508, "have_gib": 0.38}]


@pytest.fixture(autouse=True)
def namespace(monkeypatch):
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "odplace-" + uuid.uuid4().hex[:10])


@pytest.fixture
def hosts(db, two_targets):  # noqa: F811
    return registered_host("gpu-a", two_targets[0]), registered_host("gpu-b", two_targets[1])


def deployment(host, name, *, on_demand=True, running=False, **fields) -> Deployment:
    d = services.save_deployment(
        host=host,
        name=name,
        backend="llamacpp",
        model_path=str(tiny_gguf_path()),
        served_model_name=name,
        gpu_indices=[0],
        port=free_port(),
        options={"ctx_size": 1024, "threads": 1, "parallel": 1},
        extra_args=[],
        on_demand=on_demand,
        **fields,
    )
    if running:
        Deployment.objects.filter(pk=d.pk).update(status=DeploymentStatus.RUNNING, last_fit={"devices": TINY_NEED})
        d.refresh_from_db()
    return d


def test_evictable_are_idle_on_demand_ones_idle_longest_first_never_busy_or_not_on_demand(hosts, settings):
    settings.HOSTS_ONDEMAND_EVICT_IDLE_SECONDS = 10
    a, _b = hosts
    older = deployment(a, "idle-longest", running=True)
    newer = deployment(a, "idle-shorter", running=True)
    busy = deployment(a, "busy", running=True)
    recent = deployment(a, "just-used", running=True)
    fixed = deployment(a, "not-on-demand", on_demand=False, running=True)
    now = time.time()
    activity.touch(older.pk, now - 600)
    activity.touch(newer.pk, now - 60)
    activity.touch(busy.pk, now - 900)
    activity.touch(recent.pk, now - 2)  # within the grace: it just served the requests that started it
    activity.touch(fixed.pk, now - 3600)
    import redis
    from django.conf import settings as django_settings

    redis.Redis.from_url(django_settings.REDIS_URL).zadd(activity.busy_key(busy.pk), {"r1": now + 600})
    assert [d.name for d in ondemand._evictable(a, exclude=0)] == ["idle-longest", "idle-shorter"]


def test_a_cold_model_whose_room_is_held_waits_then_is_refused_at_its_budget(hosts, settings):
    """No thrash: gpu-a holds an on-demand model that has just served (within the grace), gpu-b a
    model that is not on demand. The new one waits for room, never evicting either, and gives up
    when its budget is spent."""
    settings.HOSTS_ONDEMAND_EVICT_IDLE_SECONDS = 30
    a, b = hosts
    first = deployment(a, "first", running=True)
    activity.touch(first.pk)
    deployment(b, "always-on", on_demand=False, running=True)
    second = deployment(a, "second")
    cold = ColdStart.objects.get(pk=ondemand.demand(second.pk)["cold_start_id"])

    assert ondemand.place(cold.pk) == settings.HOSTS_ONDEMAND_RETRY_SECONDS  # it waits, retried
    cold.refresh_from_db()
    assert cold.state == ColdStartState.WAITING_ROOM and cold.evicted == []
    assert any(line.startswith("gpu-a: no room") for line in cold.reasons_english), cold.reasons_english
    assert any(line.startswith("gpu-b: no room") for line in cold.reasons_english), cold.reasons_english
    first.refresh_from_db()
    assert first.status == DeploymentStatus.RUNNING

    ColdStart.objects.filter(pk=cold.pk).update(deadline=timezone.now() - datetime.timedelta(seconds=1))
    assert ondemand.place(cold.pk) is None
    cold.refresh_from_db()
    assert cold.state == ColdStartState.FAILED and "cold-start budget" in cold.message
    seen = ondemand.observe(cold.pk)
    assert seen["state"] == "failed" and seen["retry_after"] >= 1


def test_a_request_refused_while_the_start_runs_is_told_to_come_back_when_it_should_be_done(hosts):
    """At its median, past that at its 95th percentile, past both every tenth of what it has taken
    (at least 5 s): a start that ran past its median told every waiting client "retry in 1 s"."""
    a, _b = hosts
    d = deployment(a, "late")
    past = timezone.now() - datetime.timedelta(hours=1)
    for seconds in [20.0] * 10 + [40.0] * 8 + [100.0] * 2:  # median 30, 95th percentile 100
        ColdStart.objects.create(deployment=d, state=ColdStartState.READY, seconds=seconds, deadline=past)
    cold = ColdStart.objects.get(pk=ondemand.demand(d.pk)["cold_start_id"])

    def told(elapsed: float) -> float:
        started = timezone.now() - datetime.timedelta(seconds=elapsed)
        ColdStart.objects.filter(pk=cold.pk).update(created=started, deadline=started + datetime.timedelta(hours=1))
        return ondemand.observe(cold.pk)["retry_after"]

    median, p95 = ondemand.estimate_seconds(d.pk), ondemand.estimate_seconds(d.pk, 0.95)
    assert (median, p95) == (30.0, 100.0)
    # (the start's age is read again inside: a loaded machine adds a little to each)
    assert 18 <= told(10) <= 20  # the median, 20 s away
    assert 48 <= told(50) <= 50  # past it: the 95th percentile, 50 s away
    assert 12 <= told(120) <= 12.2  # past both: a tenth of the 120 s it has taken
    ColdStart.objects.filter(deployment=d, state=ColdStartState.READY).update(seconds=3.0)  # a quick model
    assert told(10) == ondemand.RETRY_FLOOR_SECONDS == 5.0  # late too, but never sooner than that


def test_a_pinned_deployment_is_only_placed_on_its_host(hosts):
    a, b = hosts
    deployment(a, "holds-a", on_demand=False, running=True)
    pinned = deployment(a, "pinned", pin_host=True)
    cold = ColdStart.objects.get(pk=ondemand.demand(pinned.pk)["cold_start_id"])
    ondemand.place(cold.pk)
    cold.refresh_from_db()
    assert [line.split(":")[0] for line in cold.reasons_english] == ["gpu-a"]  # gpu-b (room) was not considered
    assert cold.state == ColdStartState.WAITING_ROOM

    free = deployment(a, "free-to-move")
    cold = ColdStart.objects.get(pk=ondemand.demand(free.pk)["cold_start_id"])
    ondemand.place(cold.pk)
    cold.refresh_from_db()
    assert cold.reasons_english[-1] == "chosen gpu-b" and cold.state == ColdStartState.LAUNCHING
    free.refresh_from_db()
    assert free.host == b


def test_a_cold_start_that_ends_while_its_hosts_are_surveyed_launches_nothing(hosts, monkeypatch):
    """The survey asks every host over SSH, which takes seconds; meanwhile the cold start may end (its
    budget ran out and the gateway's `observe` failed it, so its requests were told). The placement's
    last step used to move it to `launching` regardless, undoing the failure, and launched a model no
    request waits for. Now that step is guarded by the state the placement read."""
    a, _b = hosts
    d = deployment(a, "ends-meanwhile")
    cold = ColdStart.objects.get(pk=ondemand.demand(d.pk)["cold_start_id"])
    survey_all = ondemand.survey_all

    def surveyed_while_it_ends(*args, **kwargs):
        found = survey_all(*args, **kwargs)
        ondemand.finish(ColdStart.objects.get(pk=cold.pk), ColdStartState.FAILED, ondemand.Message.verbatim("budget"))
        return found

    monkeypatch.setattr(ondemand, "survey_all", surveyed_while_it_ends)
    assert ondemand.place(cold.pk) is None

    cold.refresh_from_db()
    assert cold.state == ColdStartState.FAILED and cold.message == "budget"
    assert not LaunchJob.objects.filter(deployment=d).exists()
    assert ondemand.launch(cold.pk) is None


def test_the_placement_reasons_are_stored_as_messages_and_read_in_the_readers_language(hosts, admin_client):
    """Issue 30: each reason is stored as its English text and its msgid and values (nested: the
    host's line, the reason, an SSH failure's own sentence); the deployment's page in zh-Hans renders
    them through the catalog, and a cold start from before (plain strings) shows them as stored."""
    a, _b = hosts
    Host.objects.create(  # registered, but nothing listens on its port: the connection is refused
        name="gpu-c",
        address="127.0.0.1",
        ssh_port=free_port(),
        username=a.username,
        private_key=a.private_key,
        host_key_fingerprint=a.host_key_fingerprint,
    )
    deployment(a, "holds-a", on_demand=False, running=True)
    d = deployment(a, "moves")
    ColdStart.objects.create(
        deployment=d,
        state=ColdStartState.FAILED,
        deadline=timezone.now(),
        reasons=["gpu-x: no room: written before"],
    )
    cold = ColdStart.objects.get(pk=ondemand.demand(d.pk)["cold_start_id"])
    ondemand.place(cold.pk)
    cold.refresh_from_db()
    assert cold.state == ColdStartState.LAUNCHING, cold.reasons_english
    *lines, chosen = cold.reasons
    assert chosen == {"text": "chosen gpu-b", "code": "chosen %(host)s", "params": {"host": "gpu-b"}}
    by_host = {r["params"]["host"]: r for r in lines}
    assert set(by_host) == {"gpu-a", "gpu-b", "gpu-c"}
    assert {r["code"] for r in lines} == {"%(host)s: %(reason)s"}
    unreachable, fits = by_host["gpu-c"], by_host["gpu-b"]
    reason = unreachable["params"]["reason"]
    why = reason["params"]["why"]
    assert reason["code"] == "unreachable (%(why)s)" and why["code"].startswith("Connection refused by %(address)s")
    english = "gpu-c: " + reason["code"] % {"why": why["code"] % why["params"]}
    assert unreachable["text"] == english
    fit_reason = fits["params"]["reason"]
    assert fit_reason["code"] == "fits on GPU %(gpus)s%(after_stopping)s; %(weights)s; %(claimed)s%% claimed"
    assert fit_reason["params"]["gpus"] == "0" and fit_reason["params"]["weights"]["code"] == "has the weights"
    assert fits["text"].startswith("gpu-b: fits on GPU 0; has the weights; ") and fits["text"].endswith("% claimed")

    with translation.override("zh-hans"):
        gettext = translation.gettext
        why_zh = gettext(why["code"]) % why["params"]
        unreachable_zh = gettext(unreachable["code"]) % {
            "host": "gpu-c",
            "reason": gettext(reason["code"]) % {"why": why_zh},
        }
        fit_params = {**fit_reason["params"], "after_stopping": "", "weights": gettext("has the weights")}
        fits_zh = gettext(fits["code"]) % {"host": "gpu-b", "reason": gettext(fit_reason["code"]) % fit_params}
        assert unreachable_zh in cold.reasons_text and fits_zh in cold.reasons_text
    assert re.search(r"[\u4e00-\u9fff]", why_zh), "the catalog translates the SSH layer's sentence"

    url = reverse("deployment_detail", args=[d.pk])
    zh = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert escape(unreachable_zh) in zh and escape(fits_zh) in zh
    assert escape(english) not in zh
    assert "gpu-x: no room: written before" in zh  # an older row's plain string, as stored
    en = admin_client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()
    assert escape(english) in en and escape(fits["text"]) in en
    stored = cold.reasons
    cold.refresh_from_db()
    assert cold.reasons == stored and english in cold.reasons_english  # reading changed nothing stored


def test_client_configs_and_metrics_know_an_on_demand_model_while_it_is_stopped(hosts, alice):
    from channels.services import save_alias
    from clientconfigs.services import usable_models
    from hosts.ondemand.metrics import OnDemandCollector

    stopped = deployment(hosts[0], "listed-cold")
    save_alias(name="cold-alias", targets=["listed-cold"])  # a request through it starts the model
    assert {"listed-cold", "cold-alias"} <= {m.name for m in usable_models(alice)}
    ondemand.demand(stopped.pk)
    starts, _evictions = OnDemandCollector().collect()
    assert [(s.labels, s.value) for s in starts.samples if s.name.endswith("_total")] == [
        ({"model": "listed-cold", "state": "placing"}, 1)
    ]


def test_the_models_pages_flag_an_on_demand_model_cold_until_it_serves(hosts, admin_client):
    from django.urls import reverse

    from channels.models import Channel, Model

    d = deployment(hosts[0], "flagged")
    model = Model.objects.get(name="flagged")
    Model.objects.create(name="plain")
    page = admin_client.get(reverse("model_list")).content.decode()
    row = next(line for line in page.splitlines() if "<code>flagged</code>" in line)
    assert "on demand · cold" in row
    assert "on demand" not in next(line for line in page.splitlines() if "<code>plain</code>" in line)
    assert "on demand · cold" in admin_client.get(reverse("model_detail", args=[model.pk])).content.decode()

    channel = Channel.objects.create(name="flagged@gpu-a", kind="llamacpp", base_url=d.base_url, enabled=True)
    Deployment.objects.filter(pk=d.pk).update(status=DeploymentStatus.RUNNING, channel=channel)
    row = next(
        line
        for line in admin_client.get(reverse("model_list")).content.decode().splitlines()
        if "<code>flagged</code>" in line
    )
    assert "on demand" in row and "cold" not in row
