"""Host workflows, called by views, the API and Celery tasks alike.

The rest of the app lives by concern: `deployments/` (specs, their pages and API), `jobs` (the
launch-job state machine), `fit` (VRAM estimate), `remote/` (SSH, inventory, shell commands) and
`diagnose` (a server's log → why it failed).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from .choices import HostStatus
from .models import Host
from .remote import inventory


def confirm_host_key(host: Host, fingerprint: str) -> None:
    """Pin the key seen on the last contact. `fingerprint` must match it, so a page left open
    while the key changed cannot confirm a different key than the one the admin read."""
    if not host.seen_host_key_fingerprint:
        raise ValidationError("No host key has been seen yet: refresh the host first.")
    if fingerprint != host.seen_host_key_fingerprint:
        raise ValidationError("The host offered a different key since this page was loaded; check it again.")
    host.host_key_fingerprint = fingerprint
    if host.status in (HostStatus.HOST_KEY_CHANGED, HostStatus.HOST_KEY_UNCONFIRMED):
        host.status, host.status_message = HostStatus.UNKNOWN, "Host key confirmed; refresh to read the GPUs."
    host.save()  # audited as a change of host_key_fingerprint


def refresh_inventory(host: Host) -> str:
    """Read the host's GPUs over SSH and store them; returns the host's new status."""
    return inventory.refresh(host)
