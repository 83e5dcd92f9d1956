"""tests/fast_flush.py: a transactional test's reset empties what the test filled and keeps what
migrate seeded, or leaves the reset to Django's flush when the test changed a seeded table."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django_celery_beat.models import PeriodicTask

from accounts.models import User
from tests import fast_flush
from tests.services import require_postgres


@pytest.fixture
def baseline(transactional_db):
    """The seeded tables' fingerprints taken now; afterwards none, so this test's own reset is
    Django's flush and the next one takes them again from the state it leaves."""
    require_postgres()
    fast_flush._seeded["default"] = fast_flush._fingerprints(connection, "default", None)
    yield fast_flush._seeded["default"]
    fast_flush._seeded.pop("default", None)


def state() -> tuple:
    return (
        ContentType.objects.count(),
        Permission.objects.count(),
        sorted(PeriodicTask.objects.values_list("name", "enabled")),
    )


def test_what_a_test_filled_is_emptied_and_what_migrate_seeded_is_kept(baseline):
    seeded = state()
    assert seeded[0] and seeded[1] and seeded[2]  # content types, permissions, beat schedules
    User.objects.create_user(username="left-behind", password="x")
    assert fast_flush._reset(connection, "default") is True
    assert not User.objects.exists()
    assert state() == seeded


@pytest.mark.parametrize("change", ["disable a schedule", "delete a permission"])
def test_a_changed_seeded_table_leaves_the_reset_to_djangos_flush(baseline, change):
    if change == "disable a schedule":
        PeriodicTask.objects.filter(pk=PeriodicTask.objects.first().pk).update(enabled=False)
    else:
        Permission.objects.filter(pk=Permission.objects.first().pk).delete()
    User.objects.create_user(username="left-behind", password="x")
    assert fast_flush._reset(connection, "default") is False
    assert User.objects.exists()  # untouched: Django's flush empties it after the test
