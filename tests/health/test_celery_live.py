"""A real Celery worker and beat (subprocesses, the Redis broker, the test database) run the probe schedule."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings
from django.core.cache import cache

from channels.models import Channel, ProbeResult
from channels.tasks import ROUND_LOCK
from portal.env import celery_broker_url
from tests.gateway.conftest import database_url
from tests.services import require_redis

pytestmark = [pytest.mark.services, pytest.mark.slow]


def _spawn(args: list[str], env: dict, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", *args],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=settings.BASE_DIR,
    )


def test_beat_and_a_worker_probe_a_channel_on_schedule(transactional_db, upstream, tmp_path):
    redis_url = require_redis()
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    up = upstream()
    ch = Channel.objects.create(name="scheduled", base_url=up.base_url, kind="vllm")
    queue = f"health-test-{uuid.uuid4().hex[:8]}"  # our own queue: no other test's tasks, no stray ones
    PeriodicTask.objects.all().delete()
    every_second, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        name="probe (test)", task="channels.tasks.probe_all_channels", interval=every_second, queue=queue
    )
    cache.delete(ROUND_LOCK)

    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CELERY_BROKER_URL": celery_broker_url(redis_url),
        "PORTAL_DATA_DIR": str(tmp_path),
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "PORTAL_PROBE_TIMEOUT": "5",
    }
    log_path = tmp_path / "celery.log"
    with open(log_path, "w") as log:
        worker = _spawn(
            ["worker", "-P", "solo", "-Q", queue, "-l", "info", "--without-gossip", "--without-mingle"], env, log
        )
        beat = _spawn(["beat", "-l", "info", "-s", str(tmp_path / "beat-schedule")], env, log)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ProbeResult.objects.filter(channel=ch).exists():
                assert worker.poll() is None and beat.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.25)
        finally:
            for proc in (beat, worker):
                proc.terminate()
            for proc in (beat, worker):
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)

    probe = ProbeResult.objects.filter(channel=ch).first()
    assert probe is not None, log_path.read_text()[-3000:]
    assert probe.ok
    ch.refresh_from_db()
    assert ch.status == "healthy" and ch.last_checked is not None
    assert "/v1/chat/completions" in [r.path for r in up.requests]
