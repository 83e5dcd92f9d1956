"""Models on demand under concurrency, through the real gateway (uvicorn), real PostgreSQL and
Redis, with the worker's side played by the test as in `test_ondemand_notify.py`: many requests
wait for one cold start, then the start fails, or its deployment is deleted, and each waiting
request must be told why as soon as that is known, not at the end of its cold-start budget.

The polls are an hour here and the budget too: an answer within the requests' timeout can only
come from the announcement the change published, so the tests measure no time.
"""

from __future__ import annotations

import concurrent.futures
import threading

import httpx
import pytest
from django.db import transaction

from hosts.choices import DeploymentStatus
from hosts.deployments import services
from hosts.models import ColdStart, Deployment
from hosts.ondemand.models import ColdStartState
from keys.models import UsageRecord
from keys.services import issue_key
from tests.gateway.conftest import wait_for
from tests.gateway.test_ondemand_notify import _serve
from tests.hosts.test_ondemand import on_demand_far

pytestmark = [pytest.mark.services]

WAITERS = 20


@pytest.fixture
def cold_model(transactional_db) -> Deployment:
    return on_demand_far("od-phases", cold_start_budget=3600)


@pytest.fixture
def polls_never(monkeypatch):
    from gateway import ondemand

    monkeypatch.setattr(ondemand, "POLL_SECONDS", 3600.0)
    monkeypatch.setattr(ondemand, "SAFETY_POLL_SECONDS", 3600.0)
    monkeypatch.setattr(ondemand, "SUBSCRIBE_WAIT_SECONDS", 120.0)


def _ask(gateway_url: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", **headers},
        json={"model": "od-phases", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        timeout=60,
    )


def _cold_flag(gateway_url: str, key: str) -> object:
    listed = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    return next((m.get("cold") for m in listed if m["id"] == "od-phases"), "absent")


@pytest.fixture
def asked(monkeypatch) -> threading.Event:
    """Set once the gateway (in this process) has asked for the model and seen it starting: what
    happens next can only reach the waiting requests by an announcement."""
    from hosts.ondemand import services as ondemand

    seen = threading.Event()
    demand = ondemand.demand

    def watched(deployment_id: int) -> dict:
        found = demand(deployment_id)
        if found["state"] == ColdStartState.PLACING:
            seen.set()
        return found

    monkeypatch.setattr(ondemand, "demand", watched)
    return seen


def _all_waiting(gateway_url: str, key: str, asked: threading.Event, model: Deployment, then) -> list[httpx.Response]:
    """WAITERS requests at once for the cold model; once it is asked for and starting and every
    request waits for it in the gateway (this process's: a request still on its way when `then()`
    ran would meet what followed, not wait for it), `then()`."""
    from gateway import ondemand

    def waiting_in_gateway() -> int:
        state = ondemand._models.get(model.pk)
        return state.waiting if state is not None else 0

    with concurrent.futures.ThreadPoolExecutor(WAITERS) as pool:
        waiting = [pool.submit(_ask, gateway_url, key) for _ in range(WAITERS)]
        assert asked.wait(60)
        wait_for(lambda: waiting_in_gateway() == WAITERS, 60)
        assert not any(w.done() for w in waiting), [w.result().text for w in waiting if w.done()]
        then()
        return [w.result(timeout=200) for w in waiting]


def test_a_launch_that_fails_answers_every_waiting_request_with_why_and_the_next_request_starts_again(
    polls_never, asked, gateway_url, cold_model, alice
):
    _key, key = issue_key(owner=alice, name="laptop")
    assert _cold_flag(gateway_url, key) is True

    @transaction.atomic  # seen all at once, as a launching cold start always has its job behind it
    def fail() -> None:  # the placement chose the host, then the server exited at once
        ColdStart.objects.update(state=ColdStartState.LAUNCHING)
        services.set_status(cold_model, DeploymentStatus.FAILED, "llama-server exited with code 1.")

    replies = _all_waiting(gateway_url, key, asked, cold_model, fail)
    assert [r.status_code for r in replies] == [503] * WAITERS
    for reply in replies:
        error = reply.json()["error"]
        assert error["code"] == "model_start_failed", reply.text
        assert error["message"].endswith("could not be started: llama-server exited with code 1."), reply.text
    assert ColdStart.objects.get().state == ColdStartState.FAILED
    assert _cold_flag(gateway_url, key) is True
    wait_for(lambda: UsageRecord.objects.filter(model="od-phases", http_status=503).count() == WAITERS, 30)

    again = _ask(gateway_url, key, Prefer="wait=0")
    assert again.json()["error"]["code"] == "model_starting", again.text
    wait_for(lambda: ColdStart.objects.active().count() == 1, 60)  # a fresh start, not the failure again
    assert ColdStart.objects.count() == 2


def test_deleting_the_deployment_while_requests_wait_tells_each_of_them_at_once(
    polls_never, asked, gateway_url, cold_model, alice
):
    _key, key = issue_key(owner=alice, name="laptop")
    replies = _all_waiting(gateway_url, key, asked, cold_model, lambda: services.delete_deployment(cold_model))
    assert [r.status_code for r in replies] == [503] * WAITERS, [r.text for r in replies]
    for reply in replies:
        error = reply.json()["error"]
        assert error["code"] == "model_start_failed", reply.text
        assert error["message"].endswith("could not be started: Its deployment was deleted."), reply.text
    assert not ColdStart.objects.exists()


def test_two_replicas_asked_at_once_open_one_cold_start_and_answer_every_request(
    cold_model, upstream, alice, spawn_gateway
):
    """Two gateway processes, ten first requests each at once: one cold start in the database, and
    every request on both replicas is answered once the model serves, each on the record once, as
    having waited. The requests stream: a stream's headers come as soon as it waits for the start,
    so the model is served only once all twenty wait (a request still on its way when it served
    came warm: CI once saw 19 of 20 records with a cold wait). The headers go out before the
    replica has asked the database for the model (CI once found no cold start yet), so the test
    waits for each replica's log of its ask; then the model is served, also when an assertion
    failed, so that the waiting streams end and the pool can close."""
    replicas = spawn_gateway(2)
    _key, key = issue_key(owner=alice, name="laptop")
    waits = threading.Semaphore(0)
    asked = f"asked for deployment {cold_model.pk}: "
    with concurrent.futures.ThreadPoolExecutor(WAITERS) as pool:
        waiting = [pool.submit(_ask_streamed, replicas[i % 2].url, key, waits) for i in range(WAITERS)]
        try:
            for _ in range(WAITERS):
                assert waits.acquire(timeout=60), [w.result() for w in waiting if w.done()]
            assert all(replica.log.wait_for(asked, 60) for replica in replicas), [r.log.text for r in replicas]
            assert ColdStart.objects.count() == 1
        finally:
            _serve(cold_model, upstream)
        replies = [w.result(timeout=200) for w in waiting]
    assert all(status == 200 and body.endswith(b"data: [DONE]\n\n") for status, body in replies), replies
    assert ColdStart.objects.count() == 1
    wait_for(lambda: UsageRecord.objects.filter(model="od-phases").count() == WAITERS, 30)
    assert UsageRecord.objects.filter(model="od-phases", cold_start_ms__isnull=False).count() == WAITERS


def _ask_streamed(gateway_url: str, key: str, waits: threading.Semaphore) -> tuple[int, bytes]:
    """A streamed first request; `waits` is released once its headers came (it waits in the gateway)."""
    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={"model": "od-phases", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True},
        timeout=120,
    ) as r:
        waits.release()
        return r.status_code, r.read()


def test_a_launch_that_fails_under_an_anthropic_sdk_stream_raises_the_reason_in_the_sdk(
    polls_never, asked, gateway_url, cold_model, alice
):
    """A Messages stream gets its SSE headers at once while the model starts; the failure then
    goes out as Anthropic's `event: error` (its SDK skips an event without a name: the stream
    ended empty, the client never told why)."""
    import anthropic

    from gateway import ondemand

    _key, key = issue_key(owner=alice, name="laptop")
    client = anthropic.Anthropic(base_url=gateway_url, api_key=key, max_retries=0, timeout=60)

    def stream() -> list[object]:
        with client.messages.stream(
            model="od-phases", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
        ) as events:
            return list(events)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(stream)
        assert asked.wait(60)
        wait_for(lambda: getattr(ondemand._models.get(cold_model.pk), "waiting", 0) == 1, 60)
        with transaction.atomic():
            ColdStart.objects.update(state=ColdStartState.LAUNCHING)
            services.set_status(cold_model, DeploymentStatus.FAILED, "llama-server exited with code 1.")
        with pytest.raises(anthropic.APIStatusError) as raised:
            streaming.result(timeout=120)
    assert "could not be started: llama-server exited with code 1." in str(raised.value)
