from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditAction(models.TextChoices):
    CREATE = "create", _("Created")
    UPDATE = "update", _("Changed")
    DELETE = "delete", _("Deleted")
    ACTION = "action", _("Action")


def labelled(transitions: list[dict[str, Any]], states: type[models.TextChoices]) -> list[dict[str, Any]]:
    """A job's `transitions` (each {"state", "at", "message"}) with the state's label added, in the
    reader's language: the stored state is a code ("waiting_health"), never shown as such."""
    labels = dict(states.choices)
    return [{**t, "label": labels.get(str(t.get("state")), t.get("state"))} for t in transitions]
