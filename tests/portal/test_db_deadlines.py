"""Every database connection has a connect and a statement deadline, per process kind, and a query
the network swallows (a stalled proxy: the server never sees it) is cut client-side."""

from __future__ import annotations

import copy
import threading
import time

import pytest
from django.conf import settings
from django.db import OperationalError, connections

from portal import db as pdb
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import require_postgres


def proxied_connection(proxy: TcpProxy, kind: str):
    """A fresh connection to the test database through `proxy`, with `kind`'s timeouts."""
    conn = connections.create_connection("default")
    conn.settings_dict = copy.deepcopy(conn.settings_dict)
    conn.settings_dict.update(HOST="127.0.0.1", PORT=proxy.port)
    pdb.configure(conn.settings_dict, *pdb.timeouts(kind))
    return conn


def test_each_process_kind_has_its_timeouts(settings):
    settings.GATEWAY_DB_CONNECT_TIMEOUT, settings.GATEWAY_DB_TIMEOUT = 2.0, 3.0
    settings.DATABASE_CONNECT_TIMEOUT, settings.DATABASE_STATEMENT_TIMEOUT = 5.0, 30.0
    settings.DATABASE_WORKER_STATEMENT_TIMEOUT = 600.0
    assert pdb.timeouts("gateway") == (2.0, 3.0)
    assert pdb.timeouts("ui") == (5.0, 30.0)
    assert pdb.timeouts("worker") == (5.0, 600.0)
    pg = {"ENGINE": "django.db.backends.postgresql", "OPTIONS": {"options": "-c search_path=x -c statement_timeout=1"}}
    pdb.configure(pg, 2.0, 3.0)
    assert pg["OPTIONS"] == {"connect_timeout": 2, "options": "-c search_path=x -c statement_timeout=3000"}
    assert pg[pdb.DEADLINE_KEY] == 4.0
    lite = {"ENGINE": "django.db.backends.sqlite3", "OPTIONS": {"init_command": "PRAGMA busy_timeout=10000;"}}
    pdb.configure(lite, 5.0, 30.0)
    assert lite["OPTIONS"] == {"init_command": "PRAGMA busy_timeout=30000;", "timeout": 30.0}


@pytest.mark.django_db(transaction=True)
def test_the_gateway_thread_gets_tighter_timeouts_than_the_ui():
    require_postgres()
    seen: dict[str, str] = {}

    def gateway_thread() -> None:
        pdb.use_timeouts("gateway")
        with connections["default"].cursor() as cur:
            cur.execute("SHOW statement_timeout")
            seen["gateway"] = cur.fetchone()[0]
        connections["default"].close()

    t = threading.Thread(target=gateway_thread)
    t.start()
    t.join(10)
    with connections["default"].cursor() as cur:
        cur.execute("SHOW statement_timeout")
        seen["ui"] = cur.fetchone()[0]
    assert seen == {
        "gateway": f"{int(settings.GATEWAY_DB_TIMEOUT)}s",
        "ui": f"{int(settings.DATABASE_STATEMENT_TIMEOUT)}s",
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_query_a_stalled_network_swallows_is_cut_at_its_deadline(settings):
    require_postgres()
    settings.GATEWAY_DB_CONNECT_TIMEOUT, settings.GATEWAY_DB_TIMEOUT = 2.0, 2.0
    with TcpProxy("redis://127.0.0.1:%s/0" % (settings.DATABASES["default"]["PORT"] or 5432)) as proxy:
        conn = proxied_connection(proxy, "gateway")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone() == (1,)
            proxy.set("stall")
            started = time.monotonic()
            with pytest.raises(OperationalError) as cut, conn.cursor() as cur:
                cur.execute("SELECT 1")  # the server never sees it: only the client-side checks end it
            took = time.monotonic() - started
            # The early check (the server does not answer on a new socket either), not the deadline.
            assert "does not answer" in str(cut.value)
            assert pdb.PROBE_AFTER <= took < 30, took
            conn.close()
            started = time.monotonic()
            with pytest.raises(OperationalError):
                conn.ensure_connection()  # a stalled handshake: libpq's connect_timeout
            assert time.monotonic() - started < 30
            proxy.set("pass")
            conn.close()
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                assert cur.fetchone() == (1,)
        finally:
            conn.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_slow_query_on_a_server_that_answers_keeps_its_statement_timeout(settings):
    """The early check cuts only what a stall holds: a query the server is busy with runs on."""
    require_postgres()
    settings.GATEWAY_DB_CONNECT_TIMEOUT, settings.GATEWAY_DB_TIMEOUT = 2.0, 10.0
    with TcpProxy("redis://127.0.0.1:%s/0" % (settings.DATABASES["default"]["PORT"] or 5432)) as proxy:
        conn = proxied_connection(proxy, "gateway")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_sleep(%s), 1", [pdb.PROBE_AFTER + pdb.PROBE_TIMEOUT + 0.5])
                assert cur.fetchone()[1] == 1
        finally:
            conn.close()


def test_the_early_check_tells_a_stalled_server_from_one_that_answers():
    require_postgres()
    db = settings.DATABASES["default"]
    address = pdb.server_address(db) or ("127.0.0.1", 5432)
    assert pdb.answers(address)
    with TcpProxy(f"redis://{address[0]}:{address[1]}/0") as proxy:
        assert pdb.answers(("127.0.0.1", proxy.port))
        proxy.set("stall")
        started = time.monotonic()
        assert not pdb.answers(("127.0.0.1", proxy.port))
        assert time.monotonic() - started < 5
        proxy.set("refuse")
        assert not pdb.answers(("127.0.0.1", proxy.port))
    assert pdb.server_address({"HOST": "/run/postgresql", "PORT": ""}) == "/run/postgresql/.s.PGSQL.5432"
    assert pdb.server_address({"HOST": "a,b", "PORT": "5432"}) is None
