"""Retention: raw usage records past `PORTAL_USAGE_RETENTION_DAYS` and rollups past
`PORTAL_ROLLUP_RETENTION_DAYS` are deleted by the daily prune (`channels.signals.daily_prune`).

Deletes run in batches of `BATCH` rows chosen by primary key, each its own short transaction, so
the gateway's usage writer (inserts of new rows, F() updates of today's buckets) never waits on a
long-held lock, and a prune interrupted half-way simply continues the next day.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Model
from django.utils import timezone
from django.utils.translation import gettext as _

from keys.models import UsageDaily, UsageHourly, UsageRecord

logger = logging.getLogger(__name__)

BATCH = 5000


def raw_cutoff(now: dt.datetime | None = None) -> dt.datetime:
    """The oldest instant raw records (the request list, a request's detail) still cover."""
    return (now or timezone.now()) - dt.timedelta(days=settings.PORTAL_USAGE_RETENTION_DAYS)


def rollup_cutoff(now: dt.datetime | None = None) -> dt.date:
    """The oldest day the daily totals still cover."""
    return ((now or timezone.now()) - dt.timedelta(days=settings.PORTAL_ROLLUP_RETENTION_DAYS)).date()


def records_pruned() -> str:
    """Why a time before `raw_cutoff()` has no request records."""
    return _("Request records are kept %(days)s days, from %(oldest)s (UTC); the daily totals go further back.") % {
        "days": settings.PORTAL_USAGE_RETENTION_DAYS,
        "oldest": f"{raw_cutoff():%Y-%m-%d %H:%M}",
    }


def days_pruned() -> str:
    """Why a day before `rollup_cutoff()` has no daily totals."""
    return _("Daily totals are kept %(days)s days, from %(oldest)s.") % {
        "days": settings.PORTAL_ROLLUP_RETENTION_DAYS,
        "oldest": rollup_cutoff(),
    }


def delete_in_batches(model: type[Model], batch: int = BATCH, **older: Any) -> int:
    """Delete `model` rows matching `older` (e.g. created__lt=…) `batch` rows at a time."""
    deleted = 0
    while True:
        ids = list(model._default_manager.filter(**older).order_by().values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        with transaction.atomic():
            # _raw_delete: one DELETE … WHERE id IN (…), no collector (nothing cascades from these rows).
            deleted += model._default_manager.filter(pk__in=ids)._raw_delete(model._default_manager.db)


def prune(now: dt.datetime | None = None, **kwargs: Any) -> dict[str, int]:
    """The daily prune's receiver: raw records past their retention, rollups past theirs."""
    now = now or timezone.now()
    rollups = now - dt.timedelta(days=settings.PORTAL_ROLLUP_RETENTION_DAYS)
    result = {
        "usage_records": delete_in_batches(UsageRecord, created__lt=raw_cutoff(now)),
        "usage_hourly": delete_in_batches(UsageHourly, hour__lt=rollups),
        "usage_daily": delete_in_batches(UsageDaily, day__lt=rollup_cutoff(now)),
    }
    logger.info("usage retention: %s", result)
    return result
