"""What counts as a full disk, as each part reports it (the real errors' texts)."""

from __future__ import annotations

import errno
import sqlite3

import redis
from django.db import OperationalError

from portal import faults


def test_a_full_disk_is_recognised_from_each_reporter():
    assert faults.is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert faults.is_disk_full(redis.ResponseError("MISCONF Errors writing to the AOF file: No space left on device"))
    wrapped = OperationalError("database or disk is full")
    wrapped.__cause__ = sqlite3.OperationalError("database or disk is full")
    assert faults.is_disk_full(wrapped)


def test_other_errors_are_not_a_full_disk():
    assert not faults.is_disk_full(redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."))
    assert not faults.is_disk_full(OperationalError("database is locked"))
    assert not faults.is_disk_full(OSError(errno.ECONNREFUSED, "Connection refused"))


def test_the_message_names_the_data_folder(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    code, message = faults.describe(OSError(errno.ENOSPC, "No space left on device"))
    assert code == "disk_full" and str(tmp_path) in message
