"""A launch job survives its worker: a real Celery worker (Redis broker) runs a launch on the real
sshd, is SIGKILLed while the job waits for the server's /health, and the next worker to start hands
the job on at once (the worker-start sweep): it resumes, finds the server the dead worker started
through its pid file, and ends `running` with that same server, no second one started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings

from hosts.choices import JobAction, JobState
from hosts.deployments import jobs, services
from hosts.models import LaunchJob
from hosts.remote import inventory
from portal.env import celery_broker_url
from tests.gateway.conftest import database_url
from tests.services import free_port, redis_url

pytestmark = [pytest.mark.slow]

DEADLINE = 60  # the promise: redelivered (or failed) within a minute of the worker's death


def start_worker(env: dict[str, str], queue: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "portal",
            "worker",
            "-Q",
            queue,
            "-c",
            "1",
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        env=env,
        cwd=settings.BASE_DIR,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its pool process is in its group: killpg kills the whole worker
    )


def wait_for(predicate, timeout: float, what: str, log_path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached in {timeout}s; worker log:\n{log_path.read_text()[-4000:]}")
        time.sleep(0.2)


@pytest.fixture
def queue():
    """Our own queue (no other test's tasks), used by this process's app as by the workers'."""
    from portal.celery import app

    name = f"launch-test-{uuid.uuid4().hex[:8]}"
    before = (app.conf.task_default_queue, app.conf.task_always_eager)
    app.conf.task_default_queue, app.conf.task_always_eager = name, False
    yield name
    app.conf.task_default_queue, app.conf.task_always_eager = before


def test_a_launch_whose_worker_is_killed_is_resumed_by_the_next_worker(transactional_db, gpu_host, tmp_path, queue):
    inventory.refresh(gpu_host)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url(),
        "CELERY_BROKER_URL": celery_broker_url(redis_url()),
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "PORTAL_DATA_DIR": str(settings.DATA_DIR),
        "HOSTS_HEALTH_POLL": "0.2",
        "HOSTS_JOB_HEARTBEAT_SECONDS": "1",
    }
    deployment = services.save_deployment(
        host=gpu_host,
        name="slow-loader",
        backend="vllm",
        model_path="Qwen/Qwen3-8B",
        served_model_name="qwen3-8b",
        gpu_indices=[0],
        port=free_port(),
        options={"max_model_len": 4096},
        extra_args=["--fake-startup-delay", "8"],  # "loading weights": /health answers after 8 s
        fit_override=True,
    )
    log_path = tmp_path / "worker.log"
    server_pid = None
    with open(log_path, "w") as log:
        first = start_worker(env, queue, log)
        second = None
        try:
            job = jobs.request_job(deployment, JobAction.LAUNCH)  # queued through the broker on commit

            def waiting() -> bool:
                job.refresh_from_db()
                return job.state == JobState.WAITING_HEALTH and job.pid is not None

            wait_for(waiting, 60, "the first worker waiting for /health", log_path)
            server_pid, held_by = job.pid, job.worker
            os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool process, mid-launch
            first.wait(timeout=30)
            killed_at = time.monotonic()

            second = start_worker(env, queue, log)

            def running() -> bool:
                job.refresh_from_db()
                return job.state in (JobState.RUNNING, JobState.FAILED)

            wait_for(running, DEADLINE, "the job running again", log_path)
            assert time.monotonic() - killed_at < DEADLINE
            assert job.state == JobState.RUNNING, job.message
            assert job.pid == server_pid  # the server the dead worker started, taken over
            assert job.attempts == 2 and job.worker != held_by
            messages = [t["message"] for t in job.transitions]
            assert any("handed to another worker" in m for m in messages), messages
            assert any(f"Already running as PID {server_pid}" in m for m in messages), messages
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
            if server_pid:
                try:
                    os.killpg(server_pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    assert LaunchJob.objects.filter(deployment=deployment).count() == 1
