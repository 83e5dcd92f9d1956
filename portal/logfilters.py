"""Logging filters (named in settings.LOGGING, so this module imports no app code)."""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError

# A database that does not answer: a 503, not a bug (portal.views.server_error).
DATABASE_ERRORS = (OperationalError, InterfaceError)


class DatabaseOutage(logging.Filter):
    """On `django.request`: drop the record (with its traceback) of a request a database outage
    ended. `portal.views.server_error` answers it 503 and logs it in one line; an outage of 20 s
    under load otherwise wrote two tracebacks a request, hundreds of lines that hid everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DATABASE_ERRORS)
