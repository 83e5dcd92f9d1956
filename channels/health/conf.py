"""Health-check tunables, read from settings (where portal/settings.py validates the environment at start).

Every one has a line in `.env.example`; the defaults below also serve code that runs without
the project settings (benchmarks).
"""

from __future__ import annotations

from django.conf import settings

from portal.env import get

DEFAULTS: dict[str, tuple[type, object]] = {
    "PORTAL_PROBE_RETENTION_DAYS": (int, 7),  # raw probe rows
    "PORTAL_PROBE_HOURLY_RETENTION_DAYS": (int, 180),  # hourly aggregates
    "PORTAL_PROBE_CONCURRENCY": (int, 200),  # probes in flight at once
    "PORTAL_PROBE_CONNECT_TIMEOUT": (float, 5.0),
    "PORTAL_PROBE_TIMEOUT": (float, 20.0),  # whole-request read timeout, incl. a stalled stream
    "PORTAL_HEALTH_DOWN_AFTER": (int, 3),  # consecutive failures → down
    "PORTAL_HEALTH_UP_AFTER": (int, 2),  # consecutive successes to leave down/degraded
    "PORTAL_HEALTH_WINDOW_SECONDS": (int, 600),
    "PORTAL_HEALTH_DOWN_RATIO": (float, 0.5),  # error ratio over the window → down …
    "PORTAL_HEALTH_DOWN_MIN_SAMPLES": (int, 10),  # … once it holds this many samples
    "PORTAL_HEALTH_DEGRADED_RATIO": (float, 0.2),
    "PORTAL_HEALTH_DEGRADED_MIN_SAMPLES": (int, 5),
    "PORTAL_HEALTH_PASSIVE_SKIP_MIN": (int, 3),  # gateway successes that replace a probe …
    "PORTAL_HEALTH_MAX_SKIP_SECONDS": (int, 600),  # … but probe (and discover limits) at least this often
    "PORTAL_ALERT_COOLDOWN_SECONDS": (int, 900),
    "PORTAL_ALERT_TIMEOUT": (float, 5.0),
    "PORTAL_PASSIVE_FLUSH_SECONDS": (float, 2.0),
}


def setting(name: str):
    cast, default = DEFAULTS[name]
    if hasattr(settings, name):
        return cast(getattr(settings, name))
    return get(name, cast, default)
