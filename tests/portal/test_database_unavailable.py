"""The UI and the REST API answer a clear 503 (a page, or JSON under /api/) at once when the
database cannot be reached."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest
from django.db import connections
from django.test import Client


@contextmanager
def broken_database():
    """This thread's connection pointed at a database that cannot be opened (refused)."""
    conn = connections["default"]
    saved = conn.settings_dict
    conn.close()
    broken = {**saved, "OPTIONS": dict(saved.get("OPTIONS", {}))}
    if conn.vendor == "sqlite":
        broken["NAME"] = "/nonexistent/folder/portal.sqlite3"
    else:
        from tests.services import free_port

        broken["HOST"], broken["PORT"] = "127.0.0.1", free_port()  # nothing listens: refused
    conn.settings_dict = broken
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict = saved


@pytest.fixture
def logged_in(transactional_db, alice):
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


def test_a_page_is_a_503_page_within_2_seconds_when_the_database_is_unreachable(logged_in):
    assert logged_in.get("/").status_code == 200  # warm: the first request imports every view
    with broken_database():
        started = time.monotonic()
        r = logged_in.get("/")
        took = time.monotonic() - started
    assert took < 2.0, took
    assert r.status_code == 503
    assert r["Retry-After"] and r["Content-Type"].startswith("text/html")
    assert b"cannot reach its database" in r.content


def test_the_api_answers_json_503_when_the_database_is_unreachable(logged_in):
    with broken_database():
        r = logged_in.get("/api/keys/")
    assert r.status_code == 503
    assert r.json()["code"] == "database_unavailable" and r["Retry-After"]


def test_other_errors_stay_500(logged_in, monkeypatch):
    from portal import dashboard

    def boom(user):
        raise ValueError("a bug")

    monkeypatch.setattr(dashboard, "context_for", boom)
    r = logged_in.get("/")
    assert r.status_code == 500
