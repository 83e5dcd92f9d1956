"""A deployment's supervision news for the alert targets (the same targets as channel alerts)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext as _

from channels.health.alerts import broadcast

from ..choices import DeploymentStatus
from ..models import DeploymentEvent

logger = logging.getLogger(__name__)


def payload(event: DeploymentEvent) -> dict[str, Any]:
    deployment = event.deployment
    path = reverse("deployment_detail", args=[deployment.pk])
    link = f"{settings.PORTAL_PUBLIC_URL}{path}" if settings.PORTAL_PUBLIC_URL else ""
    text = _("[Gateway Portal] Deployment %(name)s on %(host)s is %(status)s (was %(previous)s). %(message)s") % {
        "name": deployment.name,
        "host": deployment.host.name,
        "status": DeploymentStatus(event.status).label.lower(),
        "previous": DeploymentStatus(event.previous).label.lower() if event.previous else "",
        "message": event.message,
    }
    if link:
        text += f" {link}"
    return {
        "text": text,
        "deployment": {"id": deployment.pk, "name": deployment.name, "host": deployment.host.name},
        "status": event.status,
        "previous_status": event.previous,
        "message": event.message,
        "exit_code": event.exit_code,
        "log_tail": event.log_tail[-2000:],
        "changed_at": event.created.isoformat(),
        "url": link,
    }


def deliver(event_id: int) -> int:
    """Send one event to every enabled target once (safe to run twice); returns how many took it."""
    event = DeploymentEvent.objects.select_related("deployment__host").filter(pk=event_id, alerted="").first()
    if event is None:
        return 0
    results = broadcast(payload(event))
    lines = [f"{name}: {'ok' if ok else error}" for name, ok, error in results] or ["no alert target"]
    DeploymentEvent.objects.filter(pk=event.pk, alerted="").update(alerted="\n".join(lines))
    return sum(ok for _name, ok, _error in results)
