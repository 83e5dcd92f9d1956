"""Host workflows, called by views, the API and Celery tasks alike.

The rest of the app lives by concern: `deployments/` (specs, their pages and API), `jobs` (the
launch-job state machine), `fit` (VRAM estimate), `remote/` (SSH, inventory, shell commands) and
`diagnose` (a server's log → why it failed).
"""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError
from django.db.models import OuterRef, Subquery
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop
from django.utils.translation import gettext_lazy as _

from portal.dashboard import Attention
from portal.i18n import Message, listing, set_message

from .choices import DeploymentStatus, HostStatus, JobState
from .models import Deployment, Host, LaunchJob
from .remote import inventory


def confirm_host_key(host: Host, fingerprint: str) -> None:
    """Pin the key seen on the last contact. `fingerprint` must match it, so a page left open
    while the key changed cannot confirm a different key than the one the admin read."""
    if not host.seen_host_key_fingerprint:
        raise ValidationError(_("No host key has been seen yet: refresh the host first."))
    if fingerprint != host.seen_host_key_fingerprint:
        raise ValidationError(_("The host offered a different key since this page was loaded; check it again."))
    host.host_key_fingerprint = fingerprint
    if host.status in (HostStatus.HOST_KEY_CHANGED, HostStatus.HOST_KEY_UNCONFIRMED):
        host.status = HostStatus.UNKNOWN
        set_message(host, "status_message", Message(gettext_noop("Host key confirmed; refresh to read the GPUs.")))
    host.save()  # audited as a change of host_key_fingerprint


def check_deletable(host: Host) -> None:
    """A host is deleted only while no download to it runs: the download's row is the only handle
    on the remote process, which would go on filling the host's disk with nobody able to cancel it.
    Its deployments block the delete by themselves (PROTECT). The page and the API ask here."""
    running = sorted(host.downloads.active().values_list("pk", flat=True))
    if running:
        raise ValidationError(
            _("Downloads to %(host)s are still running (%(downloads)s): cancel them first.")
            % {"host": host, "downloads": listing(f"#{pk}" for pk in running)},
            code="downloading",
        )


def delete_host(host: Host) -> None:
    """Delete a host with its GPUs and finished downloads (its stored private key goes with it)."""
    check_deletable(host)
    host.delete()


def refresh_inventory(host: Host) -> str:
    """Read the host's GPUs over SSH and store them; returns the host's new status."""
    return inventory.refresh(host)


ATTENTION_WINDOW = dt.timedelta(hours=24)


def attention() -> list[Attention]:
    """For the dashboard: hosts not online, failed, crashed or crash-looping deployments, and
    deployments whose latest job failed in the last 24 h (a failed stop leaves a server running)."""
    items = [
        Attention(
            gettext("Host"),
            h.name,
            h.status,
            h.get_status_display(),
            h.status_message_text
            or (
                gettext("Confirm its host key, then refresh.") if not h.host_key_fingerprint else gettext("Refresh it.")
            ),
            reverse("host_detail", args=[h.pk]),
        )
        for h in Host.objects.exclude(status=HostStatus.ONLINE).order_by("name")
    ]
    broken = (DeploymentStatus.FAILED, DeploymentStatus.CRASHED, DeploymentStatus.CRASH_LOOP)
    failed = list(Deployment.objects.filter(status__in=broken).select_related("host").order_by("name"))
    items += [
        Attention(
            gettext("Deployment"),
            gettext("%(name)s on %(host)s") % {"name": d.name, "host": d.host.name},
            "down",
            d.get_status_display(),
            d.status_message_text,
            reverse("deployment_detail", args=[d.pk]),
        )
        for d in failed
    ]
    since = timezone.now() - ATTENTION_WINDOW
    latest = LaunchJob.objects.filter(deployment=OuterRef("deployment")).order_by("-created", "-id").values("pk")[:1]
    jobs = (
        LaunchJob.objects.filter(state=JobState.FAILED, created__gte=since, pk=Subquery(latest))
        .exclude(deployment__in=failed)
        .select_related("deployment")
    )
    items += [
        Attention(
            gettext("Job"),
            f"{j.get_action_display()} {j.deployment.name}",
            "down",
            j.get_state_display(),
            j.message_text,
            reverse("job_detail", args=[j.pk]),
        )
        for j in jobs
    ]
    return items
