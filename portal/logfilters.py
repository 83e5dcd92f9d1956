"""Logging filters (named in settings.LOGGING, so this module imports no app code)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, InterfaceError, OperationalError

# A database that does not answer: a 503, not a bug (portal.views.server_error).
DATABASE_ERRORS = (OperationalError, InterfaceError)
READ_ONLY_TRANSACTION = "25006"  # PostgreSQL's SQLSTATE for a write refused by a read-only server


def is_database_outage(exc: BaseException | None) -> bool:
    """The database does not answer, or answers that it takes no writes for now (in a failover the
    connections made again reach a standby not yet promoted; a database put in read-only mode for
    maintenance): both pass by themselves, so they are waited out, never taken for a bug."""
    if isinstance(exc, DATABASE_ERRORS):
        return True
    return isinstance(exc, DatabaseError) and getattr(exc.__cause__, "sqlstate", None) == READ_ONLY_TRANSACTION


class DatabaseOutage(logging.Filter):
    """On `django.request`: drop the record (with its traceback) of a request a database outage
    ended. `portal.views.server_error` answers it 503 and logs it in one line; an outage of 20 s
    under load otherwise wrote two tracebacks a request, hundreds of lines that hid everything else."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not is_database_outage(exc)
