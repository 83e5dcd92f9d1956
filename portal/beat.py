"""Celery beat's scheduler: django-celery-beat's, riding through a database outage.

django-celery-beat reads the schedule from the database when beat starts and every 5 minutes; a
database that does not answer then ended beat with a traceback, and `portal up` restarting it
into the same outage counted a crash loop that stopped the whole portal, the gateway included
(which serves through such an outage). Here the last schedule read is kept (none yet: nothing is
sent) and read again at the next tick, until the database answers.
"""

from __future__ import annotations

import logging
from typing import Any

from django_celery_beat.schedulers import DatabaseScheduler

from .logfilters import is_database_outage

logger = logging.getLogger(__name__)


class Scheduler(DatabaseScheduler):
    @property
    def schedule(self) -> dict[str, Any]:
        try:
            return super().schedule
        except Exception as exc:
            if not is_database_outage(exc):
                raise
            logger.warning("the database did not answer (%s); the schedule is read again at the next tick", exc)
            self._initial_read = True  # a full read next time, not only "did it change"
            return self._schedule or {}
