"""One migrated test database per run, cloned for each pytest-xdist worker.

Without it every worker migrates its own database (39 migrations: about 10 CPU-seconds each, four
at once on a 2-core box at the start of every run). Here the first worker that needs a database
migrates a template under a file lock and every worker then copies it: PostgreSQL's
`CREATE DATABASE … TEMPLATE`, or a file copy for SQLite. The template is `<test name>_template`
(`test_portal_gw0` → `test_portal_template`), dropped by the controller at the end of the run.

Registered by tests/conftest.py in xdist workers only, so its `django_db_setup` overrides
pytest-django's there; a serial run (`-n 0`), `--reuse-db` and `--nomigrations` keep
pytest-django's own set-up.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import sqlite3
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

SQLITE = "django.db.backends.sqlite3"


def template_name(test_name: str) -> str:
    """`test_portal_gw2` → `test_portal_template` (SQLite: `…/test_portal.sqlite3_template`)."""
    return re.sub(r"_gw\d+$", "", test_name) + "_template"


def _scratch(template: str, what: str) -> Path:
    digest = hashlib.sha256(template.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"portal-test-db-{digest}.{what}"


@contextmanager
def _locked(template: str):
    with open(_scratch(template, "lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes, or when the process dies
        yield


def _quote(connection, name: str) -> str:
    return connection.ops.quote_name(name)


def _create_template(connection, template: str, verbosity: int) -> None:
    """Migrate `template` the way pytest-django would migrate a worker's own database."""
    test = connection.settings_dict.setdefault("TEST", {})
    own = test.get("NAME")
    test["NAME"] = template
    try:
        connection.creation.create_test_db(verbosity=verbosity, autoclobber=True, serialize=False, keepdb=False)
    finally:
        test["NAME"] = own
        connection.close()  # PostgreSQL copies a template only while nobody is connected to it


def _clone(connection, template: str, clone: str) -> None:
    if connection.vendor == "sqlite":
        Path(clone).unlink(missing_ok=True)
        source, target = sqlite3.connect(template), sqlite3.connect(clone)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return
    with connection._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {_quote(connection, clone)}")
        cursor.execute(f"CREATE DATABASE {_quote(connection, clone)} TEMPLATE {_quote(connection, template)}")


def run_id(config) -> str:
    """The run's id, the same in the controller and every worker (xdist's `--testrunuid`, which
    tests/conftest.py sets in the controller when not given)."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput["testrunuid"] if workerinput else config.option.testrunuid


def drop_template(config) -> None:
    """In the controller, after the workers are done: drop the run's template, if one was made."""
    from django.conf import settings
    from django.db import connections

    if "default" not in settings.DATABASES:
        return
    connection = connections["default"]
    template = template_name(connection.creation._get_test_db_name())
    marker = _scratch(template, f"{run_id(config)}.ready")
    if not marker.exists():
        return
    with _locked(template):
        if connection.vendor == "sqlite":
            Path(template).unlink(missing_ok=True)
        else:
            with connection._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {_quote(connection, template)}")
        marker.unlink()


class TemplateDatabase:
    """The plugin a worker registers: its `django_db_setup` clones the run's template."""

    @pytest.fixture(scope="session")
    def django_db_setup(self, request, django_test_environment, django_db_blocker, django_db_modify_db_settings):
        from django.conf import settings
        from django.db import connections
        from django.test.utils import teardown_databases

        connection = connections["default"]
        own = connection.settings_dict["NAME"]
        clone = connection.creation._get_test_db_name()
        template = template_name(clone)
        verbosity = request.config.option.verbose
        marker = _scratch(template, f"{run_id(request.config)}.ready")
        with django_db_blocker.unblock():
            with _locked(template):
                if not marker.exists():
                    _create_template(connection, template, verbosity)
                    marker.touch()
            _clone(connection, template, clone)
            # What create_test_db does once its database exists: this process and the subprocesses
            # it starts (they read settings) use the clone.
            settings.DATABASES["default"]["NAME"] = clone
            connection.settings_dict["NAME"] = clone
            connection.close()
            connection.ensure_connection()
        yield
        with django_db_blocker.unblock():
            teardown_databases([(connection, own, True)], verbosity=verbosity)
