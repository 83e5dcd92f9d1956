"""The Celery worker outlives its broker: a real worker, started with the command line `portal up`
gives it, on a real valkey-server (the embedded one, append-only file on, as `portal up` runs it)
that is killed and started again three times in a row while a task is running (what crashed kombu:
an unacknowledged message when the connection drops). The worker process stays the same and runs
a task after each restart."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time

import pytest
from django.conf import settings

from channels.models import Channel, ProbeResult
from portal import cli, embedded_redis
from portal.env import celery_broker_url
from tests.gateway.conftest import database_url

pytestmark = [pytest.mark.services, pytest.mark.slow]

# After a restart the worker must be back well before kombu's default health check would notice a
# dead consumer (brpop_timeout + 2 x 25 s = 51 s): the issue measured 54 s.
BACK_WITHIN = 30.0


def worker_argv() -> list[str]:
    args = argparse.Namespace(
        host="127.0.0.1", port=8000, access_log=False, no_worker=False, no_beat=True, worker_concurrency=2
    )
    (worker,) = [c for c in cli.build_children(args, settings) if c.name == "worker"]
    return worker.argv


def test_the_worker_runs_a_task_after_each_of_three_broker_restarts(transactional_db, upstream, tmp_path):
    from portal.celery import app

    up = upstream()
    channel = Channel.objects.create(name="restarts", base_url=up.base_url, kind="vllm")
    slow_up = upstream().behave(delay=4.0)
    slow = Channel.objects.create(name="slow", base_url=slow_up.base_url, kind="vllm")
    server = embedded_redis.EmbeddedRedis(tmp_path / "redis", appendonly=True).start()
    broker = celery_broker_url(server.url)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": server.url,
        "CELERY_BROKER_URL": broker,
        "PORTAL_DATA_DIR": str(tmp_path),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "PORTAL_PROBE_TIMEOUT": "5",
    }
    log_path = tmp_path / "worker.log"

    def probed_after(sent: int) -> bool:
        return ProbeResult.objects.filter(channel=channel).count() > sent

    def send(target: Channel) -> None:
        with app.connection_for_write(broker) as conn:
            app.send_task("channels.tasks.probe_channel", args=[target.pk], connection=conn)

    def run_a_task(timeout: float) -> float:
        """Queue a probe of the channel; seconds until the worker has run it."""
        sent = ProbeResult.objects.filter(channel=channel).count()
        started = time.monotonic()
        send(channel)
        while not probed_after(sent):
            assert worker.poll() is None, "the worker died:\n" + log_path.read_text()[-4000:]
            assert time.monotonic() - started < timeout, "no task ran:\n" + log_path.read_text()[-4000:]
            time.sleep(0.2)
        return time.monotonic() - started

    with open(log_path, "w") as log:
        worker = subprocess.Popen(
            worker_argv(), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=settings.BASE_DIR, start_new_session=True
        )
        try:
            run_a_task(timeout=180)  # the first start imports everything: slow on a loaded box
            took = []
            for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL):
                assert server.proc is not None
                received = log_path.read_text().count("received")
                send(slow)  # running (4 s upstream) when the broker goes
                deadline = time.monotonic() + 30
                while log_path.read_text().count("received") == received:
                    assert time.monotonic() < deadline, log_path.read_text()[-4000:]
                    time.sleep(0.1)
                server.proc.send_signal(sig)
                server.proc.wait(10)
                time.sleep(1.0)  # down for a while, as under `portal up`'s restart back-off
                server.start()
                took.append(run_a_task(timeout=BACK_WITHIN))
            assert worker.poll() is None
            print("task ran after each restart within (s):", [round(t, 1) for t in took])
        finally:
            worker.terminate()
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)
            server.stop()
    log_text = log_path.read_text()
    assert "Unrecoverable error" not in log_text, log_text[-4000:]
