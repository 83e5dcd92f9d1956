"""Celery app. Broker: REDIS_URL's Redis, or the embedded one `portal up` runs (`portal.embedded_redis`)."""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
@worker_process_init.connect
def _worker_timeouts(**kwargs) -> None:
    """A worker's database connections get the worker's timeouts (`portal.db`), not the UI's."""
    from portal.db import use_process_timeouts

    use_process_timeouts("worker")
