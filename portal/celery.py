"""Celery app. Broker: REDIS_URL's Redis, or the embedded one `portal up` runs (`portal.embedded_redis`).

Two ways to use the broker, per process kind. Everything but the worker (pages, REST API,
gateway, beat) only publishes, and waits for the broker at most CELERY_PUBLISH_TIMEOUT, once, so a
stalled Redis costs a request about a second (`CELERY_BROKER_TRANSPORT_OPTIONS`; what the request
answers then: `portal.faults`). The worker, when it starts, takes its own options
(`WORKER_BROKER_TRANSPORT_OPTIONS`, `_worker_broker`).

The worker outlives a broker restart: the broker's commands have deadlines and the consumer's
connection is health-checked (`WORKER_BROKER_TRANSPORT_OPTIONS` in settings), and
`_closed_transport_is_a_connection_error` below turns kombu's crash on a lost connection into the
connection error it is.
"""

import os

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


def _closed_transport_is_a_connection_error() -> None:
    """kombu 5.7's Redis transport, when the broker goes away while a message is unacknowledged (a
    task running, acks late), closes the consumer's connection twice: the second close tries to put
    the message back through a pool it rebuilds from a transport already detached, and dies with
    `AttributeError: 'NoneType' object has no attribute 'hostname'`. That is not one of the
    transport's connection errors, so the worker stops ("Unrecoverable error") instead of
    reconnecting. Raise the connection error it means: kombu and Celery then ignore it while
    closing and reconnect; the message stays in Redis's unacked set and is delivered again after
    the visibility timeout. Test: tests/health/test_worker_survives_broker_restarts.py."""
    import redis
    from kombu.transport import redis as transport

    original = transport.Channel._connparams  # type: ignore[attr-defined]  # private, not in the stubs
    if getattr(original, "portal_guarded", False):
        return

    def _connparams(self, asynchronous=False):
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("the broker connection is already closed")
        return original(self, asynchronous=asynchronous)

    _connparams.portal_guarded = True  # type: ignore[attr-defined]
    transport.Channel._connparams = _connparams  # type: ignore[attr-defined]


_closed_transport_is_a_connection_error()

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _worker_broker(**kwargs) -> None:
    """The worker's broker options and publish retry (settings hold the publishers'), before its
    consumer connects: it may wait longer for a broker than a request can."""
    from django.conf import settings

    app.conf.broker_transport_options = settings.WORKER_BROKER_TRANSPORT_OPTIONS
    app.conf.task_publish_retry = True
    app.amqp.__dict__.pop("send_task_message", None)  # cached with the publish retry it was made with


@worker_init.connect
@worker_process_init.connect
def _worker_timeouts(**kwargs) -> None:
    """A worker's database connections get the worker's timeouts (`portal.db`), not the UI's."""
    from portal.db import use_process_timeouts

    use_process_timeouts("worker")
