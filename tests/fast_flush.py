"""A transactional test's database reset, made cheap on PostgreSQL, to the same state as Django's.

After each test that commits (`transactional_db`, `live_server`, `django_db(transaction=True)`: 417
of the suite's tests) Django's TransactionTestCase flushes the database: one TRUNCATE of every
table, then the post_migrate signal for every app, which re-creates what the TRUNCATE removed and
migrate had made: the content types and permissions (a query or more per model) and the apps'
Celery beat schedules. That cost 1.3-3.2 s per test at load 7-9 on this 2-core box: TRUNCATE makes
new files for every table and index, whatever they hold, and the handlers run hundreds of queries.

Here the first reset in a process is Django's, and then the tables it left rows in (the "seeded"
tables) are fingerprinted (an md5 of their rows). Each later reset, on PostgreSQL: if every seeded
table still has that fingerprint, the test changed none of them, so they are kept as they are and
every other table is emptied with DELETE, in one transaction whose foreign keys are checked at its
end (Django makes them DEFERRABLE). That is the state Django's flush would leave, but for the ids
its handlers would have drawn anew. If a seeded table changed, or anything fails, or on SQLite,
with `available_apps` or a serialized rollback, the reset is Django's (and the fingerprints are
taken again after it).
"""

from __future__ import annotations

from django.db import connections, transaction
from django.test import TransactionTestCase

_django_teardown = TransactionTestCase._fixture_teardown
_seeded: dict[str, dict[str, str]] = {}  # database alias -> {seeded table: fingerprint}


def install() -> None:
    TransactionTestCase._fixture_teardown = _fixture_teardown


def _fixture_teardown(self) -> None:
    if self.available_apps is not None or self.serialized_rollback:
        return _django_teardown(self)
    names = list(self._databases_names(include_mirrors=False))
    if all(_reset(connections[name], name) for name in names):
        return None
    _django_teardown(self)
    for name in names:
        _seeded.pop(name, None)
        if connections[name].vendor == "postgresql":
            _seeded[name] = _fingerprints(connections[name], name, None)
    return None


def _tables(connection) -> list[str]:
    return sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))


def _fingerprints(connection, alias: str, tables: list[str] | None) -> dict[str, str]:
    """{table: md5 of its rows} for `tables`; None: every table that has a row."""
    quote = connection.ops.quote_name
    names = _tables(connection) if tables is None else tables
    if not names:
        return {}
    query = " UNION ALL ".join(
        f"SELECT %s, count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {quote(n)} t"  # noqa: S608 - quoted table names only
        for n in names
    )
    with connection.cursor() as cursor:
        cursor.execute(query, names)
        rows = cursor.fetchall()
    return {name: digest for name, count, digest in rows if tables is not None or count}


def _reset(connection, alias: str) -> bool:
    """Empty what the test may have filled, as Django's flush would; False: Django's flush must."""
    seeded = _seeded.get(alias)
    if connection.vendor != "postgresql" or seeded is None:
        return False
    quote = connection.ops.quote_name
    emptied = [t for t in _tables(connection) if t not in seeded]
    try:
        with transaction.atomic(using=alias):
            if _fingerprints(connection, alias, list(seeded)) != seeded:
                return False
            with connection.cursor() as cursor:
                deletes = "; ".join(f"DELETE FROM {quote(t)}" for t in emptied)  # noqa: S608 - quoted table names
                cursor.execute("SET CONSTRAINTS ALL DEFERRED; " + deletes)
    except Exception:  # a constraint that cannot wait, a table that changed: Django's flush instead
        return False
    return True
