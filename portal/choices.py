from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from .i18n import stored_text


class AuditAction(models.TextChoices):
    CREATE = "create", _("Created")
    UPDATE = "update", _("Changed")
    DELETE = "delete", _("Deleted")
    ACTION = "action", _("Action")


def labelled(transitions: list[dict[str, Any]], states: type[models.TextChoices]) -> list[dict[str, Any]]:
    """A job's `transitions` (each {"state", "at", "message"}, with the message's code and params
    when it has them: `Message.columns`) with the state's label added and the message rendered, in
    the reader's language: the stored state is a code ("waiting_health"), never shown as such."""
    labels = dict(states.choices)
    return [
        {
            **t,
            "label": labels.get(str(t.get("state")), t.get("state")),
            "message": stored_text(t.get("message", ""), t.get("message_code", ""), t.get("message_params")),
        }
        for t in transitions
    ]
