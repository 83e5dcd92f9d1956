"""What a run makes once and every pytest-xdist worker copies: the migrated test database, and a
migrated SQLite data folder for the tests that run the portal's own processes on one.

The database: without this every worker migrates its own (39 migrations, about 10 CPU-seconds,
four at once on a 2-core box at the start of every run). Here the first worker that needs one
migrates a template under a file lock and every worker then copies it: PostgreSQL's
`CREATE DATABASE … TEMPLATE`, or a file copy for SQLite. The template is `<test name>_template`
(`test_portal_gw0` → `test_portal_template`), dropped by the controller at the end of the run.
tests/conftest.py registers this module as a plugin in xdist workers only, so its `django_db_setup`
overrides pytest-django's there; a serial run (`-n 0`), `--reuse-db` and `--nomigrations` keep
pytest-django's own set-up.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
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
    tests/conftest.py sets in the controller when not given; a serial run makes its own)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput:
        return workerinput["testrunuid"]
    if not getattr(config.option, "testrunuid", None):
        config.option.testrunuid = uuid.uuid4().hex
    return config.option.testrunuid


def made_once(config, name: str, make: Callable[[Path], None]) -> Path:
    """A folder `make` fills once per run, whichever worker asks first (the others wait for it);
    removed by `remove_made` at the end of the run."""
    folder = Path(tempfile.gettempdir()) / f"portal-test-{run_id(config)}-{name}"
    done = folder.with_name(folder.name + ".done")
    with _locked(str(folder)):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(mode=0o700)
            make(folder)
            done.touch()
    return folder


def remove_made(config) -> None:
    for path in Path(tempfile.gettempdir()).glob(f"portal-test-{run_id(config)}-*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


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


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_modify_db_settings):
    """pytest-django's, for a worker (this module is its plugin there): the run's template, cloned."""
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
        if connection.vendor == "postgresql":
            # A server a test started may still be closing its connections (a subprocess on its way
            # out, a thread's pool): DROP DATABASE refuses while any is open, so end them first.
            connection.close()
            with connection._nodb_cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    [clone],
                )
        teardown_databases([(connection, own, True)], verbosity=verbosity)
