"""What every process checks once it starts: the data folder is private to this user, and the
settings that make a deployment unsafe are said out loud.

`portal up` prints the warnings as one banner (its children, `PORTAL_SUPERVISED`, stay quiet);
any other process (uvicorn, Celery, `manage.py`) logs them at WARNING when Django is set up.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from urllib.parse import urlsplit

from django.conf import settings

from . import env as penv

logger = logging.getLogger("portal.startup")

# `portal up`'s own process prints the warnings itself (cli.cmd_up sets this before Django starts).
QUIET = False


def secure_data_dir() -> int:
    """Make the data folder 0700 and everything in it private (group/other bits off), saying so
    when a folder made by an older version was opened up. Returns how many entries changed."""
    folder = settings.DATA_DIR
    changed, failed = penv.tighten(folder)
    if changed:
        logger.warning(
            "data folder %s: group/other access removed from %d files and folders (made by an older version); "
            "folders are now 0700 and files 0600",
            folder,
            changed,
        )
    for problem in failed[:10]:
        logger.error("data folder %s: could not make private: %s", folder, problem)
    return changed


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warnings() -> list[str]:
    """What makes this deployment unsafe, one sentence each (empty when nothing does)."""
    out = []
    if settings.DEBUG:
        out.append(
            "DJANGO_DEBUG is on: error pages show settings, code and queries to anyone who can reach the portal. "
            "Turn it off outside development."
        )
    wild = [h for h in settings.ALLOWED_HOSTS if "*" in h]
    if wild:
        out.append(
            f"DJANGO_ALLOWED_HOSTS contains {', '.join(wild)}: any Host header is accepted, so links in "
            "password e-mails and error pages can point elsewhere. List the host names instead."
        )
    public = urlsplit(settings.PORTAL_PUBLIC_URL)
    if public.scheme == "http" and not is_loopback(public.hostname):
        out.append(
            f"PORTAL_PUBLIC_URL is {settings.PORTAL_PUBLIC_URL} (http on a non-loopback host): keys, API tokens, "
            "passwords and session cookies cross the network unencrypted. Put HTTPS in front and use an https:// URL."
        )
    if penv.readable_by_others(settings.DATA_DIR):
        out.append(
            f"The data folder {settings.DATA_DIR} is open to other users of this machine (it holds the database, "
            "sessions and generated secrets): chmod 700 it and make sure this user owns it."
        )
    return out


def log_warnings() -> None:
    """Log the warnings once per process (not in `portal up`'s children: the supervisor printed them)."""
    if QUIET or os.environ.get("PORTAL_SUPERVISED"):
        return
    for text in warnings():
        logger.warning("SECURITY WARNING: %s", text)
