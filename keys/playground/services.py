"""The playground's key: every user's playground calls go through a key of their own (client
`playground`), created on first use, whose plaintext is never kept nor shown. Its limits,
models, local-only switch and request-log policy are edited like any key's; the owner's and the
team's limits apply on top, as for every key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from keys.models import PLAYGROUND_CLIENT, PLAYGROUND_NAME, Key
from keys.services import issue_key

if TYPE_CHECKING:
    from accounts.models import User

CLIENT = PLAYGROUND_CLIENT


@transaction.atomic
def playground_key(user: User) -> Key:
    """The user's playground key: the newest not revoked (after a rotation, the replacement), issued
    now if they have none. Revoking it only makes a new one: to keep someone out of the playground,
    take the models away or set their limits, as for their other keys."""
    key = Key.objects.not_revoked().filter(owner=user, client=CLIENT).order_by("-created").first()
    if key is not None:
        return key
    # Stored in English whatever the owner reads: a team lead or an admin reading another language
    # sees this name too; pages show it in each reader's language (`Key.shown_name`).
    name = PLAYGROUND_NAME
    if Key.objects.not_revoked().filter(owner=user, name=name).exists():
        name = f"{name} ({CLIENT})"
    key, _plaintext = issue_key(owner=user, name=name, client=CLIENT)  # the plaintext is dropped here
    return key
