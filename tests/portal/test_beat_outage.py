"""Celery beat through a database outage: a real `celery beat` whose database is reached through a
TCP proxy that refuses, and whose broker is a private redis-server. Beat stays up (under `portal up`
a beat that kept exiting was a crash loop that stopped the whole portal, the gateway included) and
sends the periodic tasks once the database answers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from tests.fakes import processes
from tests.fakes.redis_server import RedisServer
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway.conftest import ROOT, database_url, wait_for
from tests.services import require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.services]

TASK = "channels.tasks.aggregate_probe_hours"


def test_beat_waits_out_a_database_outage_and_then_sends_its_tasks(transactional_db, tmp_path):
    require_postgres()
    every = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(name="often", task=TASK, interval=every)
    db = settings.DATABASES["default"]
    with (
        RedisServer() as broker,
        TcpProxy(f"redis://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/0") as proxy,
    ):
        proxy.set("refuse")
        proxied = database_url().replace(f":{db.get('PORT') or 5432}/", f":{proxy.port}/")
        env = {
            **os.environ,
            "DATABASE_URL": proxied,
            "REDIS_URL": broker.url,
            "PORTAL_DATA_DIR": str(settings.DATA_DIR),
        }
        argv = [sys.executable, "-m", "celery", "-A", "portal", "beat", "-l", "info", "-s", str(tmp_path / "beat")]
        beat = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        log = processes.Output(beat.stdout)
        try:
            # Importing Django and the apps takes 30 s and more on a loaded 2-core machine.
            assert log.wait_for("the database did not answer", timeout=120), log.text[-3000:]
            assert beat.poll() is None, log.text[-3000:]
            proxy.set("pass")
            wait_for(lambda: (TASK, ()) in broker.messages("celery"), timeout=60, interval=0.2)
            assert beat.poll() is None
        finally:
            processes.stop(beat)
            log.join()
