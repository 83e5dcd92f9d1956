"""A launch job asked for while Redis (the Celery broker) is away. A real web process whose Redis is
a real Redis behind the test's TCP proxy takes the request; the job says that the broker did not
take it, and beat's sweep sends it once Redis answers, so it runs seconds after the blip instead of
waiting HOSTS_QUEUED_JOB_SECONDS and then failing the deployment with "is a worker running?"."""

from __future__ import annotations

import httpx
import pytest

from accounts.services import issue_token
from hosts.choices import DeploymentStatus, JobAction, JobState
from hosts.deployments import jobs
from hosts.models import LaunchJob
from portal import faults
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway.conftest import redis_namespace, spawn_gateway  # noqa: F401  (fixtures)
from tests.hosts.test_launch import eager_celery, llama_deployment, online_host  # noqa: F401  (fixtures)
from tests.services import redis_url

pytestmark = [pytest.mark.slow]


def test_a_job_asked_for_while_the_broker_is_away_runs_once_redis_answers(
    online_host,  # noqa: F811
    admin,
    spawn_gateway,  # noqa: F811
    eager_celery,  # noqa: F811  (the sweep's send runs the job inline, as a worker would)
):
    deployment = llama_deployment(online_host, name="blip")
    _token, plaintext = issue_token(user=admin, name="script")
    with TcpProxy(redis_url()) as proxy:
        (web,) = spawn_gateway(1, REDIS_URL=proxy.url, PORTAL_REDIS_TIMEOUT="0.5")
        proxy.set("refuse")
        answer = httpx.post(
            f"{web.url}/api/deployments/{deployment.pk}/stop/",
            headers={"Authorization": f"Token {plaintext}"},
            timeout=60,
        )
        proxy.set("pass")
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["state"] == JobState.QUEUED
    assert body["message_code"] == faults.NOT_SENT, body  # the answer says what happened to the job

    jobs.recover_stale_jobs()  # beat's sweep, the first one Redis carries again
    job = LaunchJob.objects.get(pk=body["id"])
    assert job.action == JobAction.STOP
    assert job.state == JobState.STOPPED, job.message
    assert [t["message_code"] for t in job.transitions if t.get("message_code")][:2] == [
        faults.NOT_SENT,
        faults.SENT_AGAIN,
    ]
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.STOPPED
    assert jobs.recover_stale_jobs() == 0  # sent once, run once: nothing left for the sweep
