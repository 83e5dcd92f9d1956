"""A PostgreSQL failover, as the gateway sees it: every connection is dropped and the ones made
again land on a server that takes no writes yet (a standby being promoted, a database put in
read-only mode for maintenance). Usage recorded meanwhile waits in the journal and is written once
the database takes writes again, like in any other outage; none of it is set aside."""

from __future__ import annotations

import httpx
import pytest
from django.db import connection
from prometheus_client import REGISTRY

from keys.models import UsageRecord
from tests.gateway.conftest import wait_for
from tests.services import require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.services]

SHORT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}


def post(url: str, key: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=SHORT, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def sessions() -> list[int]:
    with connection.cursor() as cur:
        cur.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        return [pid for (pid,) in cur.fetchall()]


@pytest.fixture
def earlier_sessions(transactional_db) -> list[int]:
    """The sessions of the test database open before the gateway started: this process's other
    ones (Django keeps a connection per context: a browser test's, in Playwright's, outlives it),
    which the failover must not take from the tests that run after this one."""
    return sessions()


def read_only(on: bool, spare: list[int]) -> None:
    """New sessions of the test database are read-only (or not); the others' but `spare` are
    dropped, so the gateway reconnects to what the database now is. This test's own session
    keeps writing."""
    with connection.cursor() as cur:
        name = connection.ops.quote_name(connection.settings_dict["NAME"])
        cur.execute(f"ALTER DATABASE {name} {'SET default_transaction_read_only = on' if on else 'RESET ALL'}")
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> ALL(%s)",
            [spare],
        )


def flush_errors() -> float:
    return REGISTRY.get_sample_value("gateway_usage_flush_errors_total") or 0.0


def test_usage_recorded_while_the_database_is_read_only_is_written_once_it_takes_writes(
    earlier_sessions, setup, gateway_url, settings
):
    require_postgres()
    assert post(gateway_url, setup.plaintext).status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 1, timeout=30)
    failed = settings.GATEWAY_STATE_DIR / "usage-journal" / "failed"
    errors = flush_errors()
    read_only(True, earlier_sessions)
    try:
        for _ in range(3):
            assert post(gateway_url, setup.plaintext).status_code == 200
        wait_for(lambda: flush_errors() > errors, timeout=30)  # the writer met the read-only database
    finally:
        read_only(False, earlier_sessions)
    wait_for(lambda: UsageRecord.objects.count() == 4, timeout=60)
    assert not failed.exists() or not any(failed.iterdir())
