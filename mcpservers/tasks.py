"""Celery tasks for MCP servers: each takes ids (or nothing), re-fetches, and is safe to run twice."""

from __future__ import annotations

import logging

from celery import shared_task

from . import services
from .models import McpServer

logger = logging.getLogger(__name__)

CHECK_TASK_NAME = "mcpservers: check servers"
CHECK_EVERY_SECONDS = 300


@shared_task(name="mcpservers.tasks.check_all_servers", ignore_result=True)
def check_all_servers() -> int:
    """List the tools of every enabled server (beat, every five minutes)."""
    ids = list(McpServer.objects.enabled().values_list("pk", flat=True))
    for pk in ids:
        try:
            services.check_server(pk)
        except Exception:  # one broken server must not stop the round
            logger.exception("MCP server %s: check failed", pk)
    return len(ids)


@shared_task(name="mcpservers.tasks.check_server", ignore_result=True)
def check_server(server_id: int) -> str | None:
    server = services.check_server(server_id)
    return server.status if server else None


def ensure_schedule(**kwargs: object) -> None:
    """The periodic check, created once (an admin's later edit of it is kept)."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    if PeriodicTask.objects.filter(name=CHECK_TASK_NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.get_or_create(every=CHECK_EVERY_SECONDS, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        name=CHECK_TASK_NAME, task="mcpservers.tasks.check_all_servers", interval=interval, enabled=True
    )
