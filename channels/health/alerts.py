"""Status-change notifications: one per change, de-duplicated, with a cool-down per channel.

Each channel remembers the status its alert targets were last told about (`alerted_status`,
`alerted_at`). After every round, a channel whose status differs from that is notified, unless
it was notified less than PORTAL_ALERT_COOLDOWN_SECONDS ago: then it waits, and the next round
after the cool-down sends one message with the status it has *then* (saying how many changes
were folded in). A channel that flaps healthy → down → healthy inside the cool-down therefore
sends nothing more. Getting *worse* than what was last sent (degraded → down) is not held back:
severity only rises so far, so a flapping channel still sends at most a few messages (one per
step up in severity, plus one catch-up) per cool-down.
Claiming a notification is a compare-and-set on (alerted_status, alerted_at), so two workers
never send the same one.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from channels.choices import AlertKind, ChannelStatus
from channels.models import AlertDelivery, AlertTarget, Channel, StatusChange
from portal.i18n import Message

logger = logging.getLogger(__name__)

QUIET = {"", ChannelStatus.UNKNOWN}  # a new channel coming up is not news
SEVERITY: dict[str, int] = {
    ChannelStatus.HEALTHY: 0,
    ChannelStatus.UNKNOWN: 0,
    ChannelStatus.DEGRADED: 1,
    ChannelStatus.DOWN: 2,
    ChannelStatus.CREDENTIALS_REJECTED: 3,
}


def notify_pending(channel_ids: list[int] | None = None) -> int:
    """Send what is due for `channel_ids` (or every channel); returns how many notifications went out."""
    now = timezone.now()
    cooldown = dt.timedelta(seconds=settings.PORTAL_ALERT_COOLDOWN_SECONDS)
    qs = Channel.objects.exclude(status=F("alerted_status"))
    if channel_ids is not None:
        qs = qs.filter(pk__in=channel_ids)
    # Nothing to say (a new channel coming up, an edit resetting to unknown): just remember the
    # status, in one UPDATE per kind of move rather than one per channel.
    quiet = Q(status=ChannelStatus.UNKNOWN) | Q(alerted_status__in=QUIET, status=ChannelStatus.HEALTHY)
    for old, new in set(qs.filter(quiet).values_list("alerted_status", "status")):
        qs.filter(quiet, alerted_status=old, status=new).update(alerted_status=new)
    sent = 0
    for ch in qs.exclude(quiet):
        worse = SEVERITY.get(ch.status, 0) > SEVERITY.get(ch.alerted_status, 0)
        if not worse and ch.alerted_at is not None and now - ch.alerted_at < cooldown:
            continue  # cooling down; a later round sends the then-current status
        claimed = Channel.objects.filter(pk=ch.pk, alerted_status=ch.alerted_status, alerted_at=ch.alerted_at).update(
            alerted_status=ch.status, alerted_at=now
        )
        if not claimed:
            continue  # another worker sent it
        change = StatusChange.objects.filter(channel=ch, to_status=ch.status).order_by(
            "-created", "-id"
        ).first() or StatusChange.objects.create(
            channel=ch, from_status=ch.alerted_status or ChannelStatus.UNKNOWN, to_status=ch.status
        )
        folded = 0
        if ch.alerted_at is not None:
            folded = max(StatusChange.objects.filter(channel=ch, created__gt=ch.alerted_at).count() - 1, 0)
        sent += deliver(ch, change, previous=ch.alerted_status or ChannelStatus.UNKNOWN, folded=folded)
    return sent


def _label(status: str) -> str:
    try:
        return str(ChannelStatus(status).label)
    except ValueError:
        return status


def payload(ch: Channel, change: StatusChange, previous: str, folded: int) -> dict[str, Any]:
    link = f"{settings.PORTAL_PUBLIC_URL}/channels/{ch.pk}/health/" if settings.PORTAL_PUBLIC_URL else ""
    text = f"[Gateway Portal] Channel {ch.name} is {_label(ch.status).lower()} (was {_label(previous).lower()})."
    if ch.status_message:
        text += f" {ch.status_message}"
    if folded:
        text += f" ({folded} more status changes during the {settings.PORTAL_ALERT_COOLDOWN_SECONDS} s cool-down.)"
    if link:
        text += f" {link}"
    return {
        "text": text,
        "channel": {"id": ch.pk, "name": ch.name, "base_url": ch.base_url},
        "status": ch.status,
        "previous_status": previous,
        "message": ch.status_message,
        "changed_at": change.created.isoformat(),
        "suppressed_changes": folded,
        "url": link,
    }


def deliver(ch: Channel, change: StatusChange, *, previous: str, folded: int = 0) -> int:
    body = payload(ch, change, previous, folded)
    sent = 0
    for target in AlertTarget.objects.filter(enabled=True):
        ok, error = send(target, body)
        AlertDelivery.objects.create(
            status_change=change,
            target=target,
            target_name=target.name,
            ok=ok,
            suppressed=folded,
            **(error or Message.verbatim("")).columns("error", 300),  # read in each reader's language
        )
        sent += ok
    return sent


def broadcast(body: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Send `body` (with a Slack-compatible `text`) to every enabled target, for news that is not a
    channel's status change (an upper app's, e.g. a deployment that crashed); (target, ok, error in
    English) each."""
    results = []
    for target in AlertTarget.objects.filter(enabled=True):
        ok, error = send(target, body)
        results.append((target.name, ok, error.english if error else ""))
    return results


def send(target: AlertTarget, body: dict[str, Any]) -> tuple[bool, Message | None]:
    """Send one notification; returns (ok, what went wrong). Never raises: a broken target must not
    stop a round."""
    try:
        if target.kind == AlertKind.WEBHOOK:
            resp = httpx.post(target.url, json=body, timeout=settings.PORTAL_ALERT_TIMEOUT, follow_redirects=False)
            if resp.status_code >= 300:
                return False, Message(gettext_noop("the webhook answered HTTP %(status)s"), status=resp.status_code)
        else:
            subject = body["text"].split(". ", 1)[0][:150]
            send_mail(subject, body["text"], None, [target.email], fail_silently=False)
    except httpx.HTTPError as exc:
        logger.warning("alert to %s failed: %s", target.name, exc.__class__.__name__)
        return False, Message(gettext_noop("could not reach the webhook (%(error)s)"), error=exc.__class__.__name__)
    except Exception as exc:  # SMTP and friends raise many types; the log keeps the class only
        logger.warning("alert to %s failed: %s", target.name, exc.__class__.__name__)
        return False, Message(gettext_noop("sending failed (%(error)s)"), error=exc.__class__.__name__)
    return True, None


def send_test(target: AlertTarget) -> tuple[bool, str]:
    """Send a test notification now; returns (ok, error in the active language: the sender reads it)."""
    ok, error = send(
        target,
        {
            "text": f"[Gateway Portal] Test notification for alert target {target.name}.",
            "channel": None,
            "status": "test",
            "previous_status": "",
            "message": "If you can read this, status changes will reach you here.",
            "changed_at": timezone.now().isoformat(),
            "suppressed_changes": 0,
            "url": "",
        },
    )
    return ok, str(error) if error else ""
