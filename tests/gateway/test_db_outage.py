"""The gateway rides through a database outage: real PostgreSQL behind a TCP proxy that stalls or
refuses, two gateway processes, 3 keys sending 16 requests at a time. Every request is answered
(200), the usage rows after healing equal the requests answered, none twice; one gateway is
SIGKILLed in the middle of the outage and a new one started while the database is still away: it
serves the known keys from the snapshot on disk, and the killed one's journal is written after
healing.

The outage lasts PORTAL_OUTAGE_SECONDS (120 by default, as the issue asks).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db.models import Count, Sum
from django.test import override_settings

from gateway.cache import STALE_GRACE, SnapshotFile
from keys.models import Key, UsageDaily, UsageRecord
from keys.services import issue_key, revoke_key
from tests.fakes.tcp_proxy import TcpProxy
from tests.gateway.conftest import database_url, wait_for
from tests.services import require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.services]

OUTAGE = float(os.environ.get("PORTAL_OUTAGE_SECONDS", "120"))
CONCURRENCY = 16
DEADLINE = 30.0  # each request's own deadline: a stall never holds one longer
# The fake upstream answers after 5 tokens of this many seconds each, as a real one would: the
# outage is ridden through at about half the requests per second, and half the test's CPU.
TOKEN_DELAY = 0.05
# Each of the 16 senders pauses this long after each answer: 16 requests still go out together
# through the outage (about 30 a second, thousands in all), but the driver no longer takes every
# CPU-second the box gives it for minutes, which it took from the tests running beside it.
PACE = 0.5


@dataclass
class Driver:
    """16 workers sending chat completions with 3 keys to the gateways in `live` (a load balancer
    that routes by readiness: a gateway being restarted is taken out first), each PACE seconds
    apart."""

    keys: list[str]
    live: list[str]
    statuses: Counter = field(default_factory=Counter)
    by_url: Counter = field(default_factory=Counter)
    served: set[tuple[str, str]] = field(default_factory=set)  # (gateway, key) pairs answered 200
    slowest: float = 0.0
    in_flight: Counter = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)
    # Held while a worker picks a gateway and counts its request in flight, and while the test
    # takes one out of `live`: once out, no request can still be on its way to it.
    routing: threading.Lock = field(default_factory=threading.Lock)
    # Each answer's request id: the gateway that sent it, when it was sent and received (monotonic)
    answers: dict[str, tuple[str, float, float]] = field(default_factory=dict)

    def run(self) -> threading.Thread:
        thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        thread.start()
        return thread

    async def _main(self) -> None:
        # No kept connections: a reused one that uvicorn closes after its keep-alive timeout is a
        # client-side race (ReadError) unrelated to the database.
        async with httpx.AsyncClient(timeout=DEADLINE, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            await asyncio.gather(*(self._worker(client, i) for i in range(CONCURRENCY)))

    async def _worker(self, client: httpx.AsyncClient, n: int) -> None:
        i = n
        while not self.stop.is_set():
            i += 1
            with self.routing:  # picked and counted in flight at once: a gateway taken out is drained
                url, key = self.live[i % len(self.live)], self.keys[i % len(self.keys)]
                self.in_flight[url] += 1
            body = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}
            started = time.monotonic()
            try:
                r = await client.post(
                    url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
                )
                if r.status_code == 200:
                    self.statuses[200] += 1
                    self.served.add((url, key))
                    self.answers[r.headers.get("x-request-id", "")] = (url, started, time.monotonic())
                else:  # which error, from which gateway: the failure message says
                    code = r.json().get("error", {}).get("code") if "json" in r.headers.get("content-type", "") else ""
                    self.statuses[
                        f"{r.status_code} {code} from {self.live.index(url) if url in self.live else url}"
                    ] += 1
                self.by_url[url] += 1
            except httpx.HTTPError as exc:
                self.statuses[type(exc).__name__] += 1
            finally:
                self.in_flight[url] -= 1
            self.slowest = max(self.slowest, time.monotonic() - started)
            await asyncio.sleep(PACE)

    @property
    def answered(self) -> int:
        return sum(n for s, n in self.statuses.items() if isinstance(s, int) or s[:1].isdigit())


def saved_key_hashes(state_dir: Path) -> set[str]:
    """The key hashes in the gateways' snapshot on disk (none before one is saved)."""
    with override_settings(GATEWAY_STATE_DIR=state_dir):
        saved = SnapshotFile().load()
    return set(saved.keys) if saved is not None else set()


def metric(url: str, name: str) -> float:
    scraped = httpx.get(url + "/metrics", headers={"Authorization": "Bearer m"}, timeout=DEADLINE)
    assert scraped.status_code == 200
    return next(float(line.split()[1]) for line in scraped.text.splitlines() if line.startswith(name + " "))


def back_on_the_database(url: str) -> bool:
    answer = httpx.get(url + "/readyz", timeout=DEADLINE)
    return answer.status_code == 200 and answer.json()["status"] == "ok"


def usage_settled(urls: list[str], state_dir: Path) -> bool:
    """No usage left to write anywhere: every gateway's queue is empty and no journal file on disk
    (the killed gateway's included) holds an event, so no further row can arrive."""
    if any(metric(url, "gateway_usage_queue_depth") for url in urls):
        return False
    try:
        return all(path.stat().st_size == 0 for path in (state_dir / "usage-journal").rglob("*.jsonl"))
    except FileNotFoundError:  # a file or folder removed as we looked: look again
        return False


def unaccounted(
    driver: Driver, key_ids: list[int], names: dict[str, str], killed_at: float, state_dir: Path, gateways: dict
) -> str:
    """Why the rows and the answers differ: the answers with no row (which gateway sent each, and
    when relative to the kill), the rows with no answer, what the usage journals still hold, and
    the gateways' logs."""
    recorded = Counter(UsageRecord.objects.filter(key_id__in=key_ids).values_list("request_id", flat=True))
    missing = sorted(set(driver.answers) - set(recorded), key=lambda rid: driver.answers[rid][2])
    out = [f"\n{len(driver.answers)} request ids answered, {len(recorded)} recorded, {len(missing)} with no row:"]
    for rid in missing[:50]:
        url, sent, received = driver.answers[rid]
        out.append(
            f"  {rid} from {names.get(url, url)}: sent {sent - killed_at:+.2f} s,"
            f" received {received - killed_at:+.2f} s from the kill"
        )
    extra = set(recorded) - set(driver.answers)
    twice = [rid for rid, n in recorded.items() if n > 1]
    out.append(f"rows of no answer: {sorted(extra)[:20]}; request ids recorded twice: {twice[:20]}")
    journal = state_dir / "usage-journal"
    out.append(f"{journal}:")
    for path in sorted(journal.rglob("*")) if journal.exists() else []:
        if path.is_file():
            text = path.read_bytes()
            holds = [rid for rid in missing if rid.encode() in text]
            lines = text.count(b"\n")
            out.append(f"  {path.relative_to(journal)}: {len(text)} bytes, {lines} lines, missing in it: {holds}")
    for name, gw in gateways.items():
        out.append(f"--- gateway {name} (pid {gw.proc.pid}) log, last 3000 characters:\n{gw.log.text[-3000:]}")
    return "\n".join(out)


def probe(url: str, key: str) -> httpx.Response:
    body = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}
    return httpx.post(
        url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=DEADLINE
    )


@pytest.mark.parametrize("fault", ["stall", "refuse"])
def test_the_gateway_serves_through_a_database_outage_and_a_restart_in_it(
    fault, setup, upstream, alice, spawn_gateway, tmp_path
):
    require_postgres()
    upstream.behave(token_delay=TOKEN_DELAY)
    db = settings.DATABASES["default"]
    keys = [setup.plaintext] + [issue_key(owner=alice, name=f"k{i}")[1] for i in range(2)]
    revoked, revoked_plain = issue_key(owner=alice, name="revoked before the outage")
    with TcpProxy(f"redis://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/0") as proxy:
        via_proxy = database_url().replace(f":{db.get('PORT') or 5432}/", f":{proxy.port}/")
        env = {"DATABASE_URL": via_proxy, "GATEWAY_CACHE_TTL": "1", "PORTAL_METRICS_TOKEN": "m"}
        a, b = spawn_gateway(2, **env)
        for gw in (a, b):
            assert probe(gw.url, revoked_plain).status_code == 200
        revoke_key(revoked)
        wait_for(lambda: all(probe(gw.url, revoked_plain).status_code == 401 for gw in (a, b)), timeout=20)

        driver = Driver(keys=keys, live=[a.url, b.url])
        thread = driver.run()
        state_dir = tmp_path / "gateway-state"  # spawn_gateway's: the snapshot and usage journals
        hashes = set(Key.objects.filter(name__in=["laptop", "k0", "k1"]).values_list("key_hash", flat=True))
        # Every key loaded by both, and saved to the snapshot on disk.
        wait_for(lambda: len(driver.served) == 2 * len(keys), timeout=60)
        wait_for(lambda: hashes <= saved_key_hashes(state_dir), timeout=60)
        proxy.set(fault)
        outage_started = time.monotonic()
        try:
            time.sleep(min(10, OUTAGE / 4))
            for gw in (a, b):
                still = probe(gw.url, revoked_plain)
                assert still.status_code == 401, still.text  # revoked before: still revoked
                unknown = probe(gw.url, "gp-" + "x" * 40)
                assert unknown.status_code in (401, 503), unknown.text
                if unknown.status_code == 503:
                    assert unknown.headers["retry-after"] and unknown.json()["error"]["code"] == "database_unavailable"
            ready = httpx.get(b.url + "/readyz", timeout=DEADLINE)
            assert ready.status_code == 200, ready.text  # still routable: it serves from its snapshot
            body = ready.json()
            assert body["status"] == "degraded" and body["degraded"] == ["database"]
            assert body["snapshot"]["serving_from_snapshot"] and body["snapshot"]["staleness_seconds"] > 0
            assert httpx.get(b.url + "/healthz", timeout=DEADLINE).status_code == 200
            scraped = httpx.get(b.url + "/metrics", headers={"Authorization": "Bearer m"}, timeout=DEADLINE)
            assert scraped.status_code == 200
            assert "gateway_database_up 0.0" in scraped.text
            staleness = next(
                float(line.split()[1])
                for line in scraped.text.splitlines()
                if line.startswith("gateway_snapshot_staleness_seconds ")
            )
            assert staleness > 0
            # A is taken out of the rotation, drained and killed; a new gateway starts in the outage.
            with driver.routing:
                driver.live.remove(a.url)
            wait_for(lambda: driver.in_flight[a.url] == 0, timeout=DEADLINE + 5)
            time.sleep(0.5)
            a.proc.kill()
            a.proc.wait(10)
            killed_at = time.monotonic()
            (c,) = spawn_gateway(1, **env)
            driver.live.append(c.url)
            restarted_at = time.monotonic() - outage_started
            assert restarted_at < OUTAGE - 5, f"the new gateway took {restarted_at:.0f} s to start: raise the outage"
            served_before = driver.by_url[c.url]
            time.sleep(max(0.0, OUTAGE - (time.monotonic() - outage_started)))
            assert driver.by_url[c.url] > served_before  # the restarted one served in the outage
        finally:
            proxy.set("pass")
        # Served after healing too: both back on the database, each answering more requests.
        wait_for(lambda: all(back_on_the_database(url) for url in driver.live), timeout=60, interval=0.2)
        healed = Counter(driver.by_url)
        wait_for(lambda: all(driver.by_url[url] > healed[url] + CONCURRENCY for url in driver.live), timeout=60)
        driver.stop.set()
        thread.join(DEADLINE + 10)

        assert driver.statuses == Counter({200: driver.answered}), driver.statuses
        assert driver.slowest < DEADLINE
        key_ids = list(Key.objects.filter(name__in=["laptop", "k0", "k1"]).values_list("id", flat=True))
        assert len(key_ids) == 3

        def written() -> int:
            return UsageRecord.objects.filter(key_id__in=key_ids).count()

        def explain() -> str:
            names = {a.url: "a (killed)", b.url: "b", c.url: "c (started in the outage)"}
            return unaccounted(driver, key_ids, names, killed_at, state_dir, {names[g.url]: g for g in (a, b, c)})

        try:
            wait_for(lambda: written() >= driver.answered, timeout=120, interval=0.5)
        except AssertionError:
            raise AssertionError(f"{written()} usage rows for {driver.answered} answered" + explain()) from None
        # Nothing more can arrive (no queue or journal holds an event): then the count is final.
        wait_for(lambda: usage_settled(driver.live, state_dir), timeout=60, interval=0.2)
        rows = UsageRecord.objects.filter(key_id__in=key_ids)
        assert rows.count() == driver.answered, explain()
        assert not rows.order_by().values("event_id").annotate(n=Count("id")).filter(n__gt=1).exists()
        assert rows.filter(event_id__isnull=True).count() == 0
        daily = UsageDaily.objects.filter(key_id__in=key_ids).aggregate(n=Sum("requests"))["n"]
        assert daily == driver.answered  # the daily buckets counted each record once too
        print(f"\n{fault}: {OUTAGE:.0f} s outage, {driver.answered} requests answered, slowest {driver.slowest:.2f} s")


KEY_TTL = 1.0  # GATEWAY_KEY_TTL of the next test: its sparse requests need not wait long
SPARSE = KEY_TTL + STALE_GRACE + 0.5  # between two requests of one key: its cached entry has expired


def error_code(r: httpx.Response) -> str:
    return f"{r.status_code} {r.json()['error']['code']}" if r.status_code != 200 else "200"


@pytest.mark.parametrize("fault", ["stall", "refuse"])
def test_a_key_revoked_while_its_reload_runs_stays_revoked_through_an_outage(fault, setup, alice, spawn_gateway):
    """The revocation reaches the gateway while a reload of the key (by age) is still running on a
    slow database: the request that learns of it must get a fresh copy, and that copy must stay
    cached. Then, through an outage, a revoked key, a key that does not exist and a valid key are
    each asked for only every SPARSE seconds (longer than the key TTL + its grace, so each request
    finds its entry expired and no other traffic refreshes it): 401, 401 and 200 every time.

    An unknown key asked for before the outage stays 401 (`invalid_api_key`) through it: no key can
    be created while the database is away, and a key created before it drops what this process
    knew (the generation). One never asked for before the outage is 503 `database_unavailable`: this
    process's snapshot holds the keys it looked up, not every key, so it cannot tell."""
    require_postgres()
    db = settings.DATABASES["default"]
    revoked, revoked_plain = issue_key(owner=alice, name="revoked while it reloads")
    unknown, never_seen = "gp-" + "x" * 40, "gp-" + "y" * 40
    with TcpProxy(f"redis://{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/0") as proxy:
        via_proxy = database_url().replace(f":{db.get('PORT') or 5432}/", f":{proxy.port}/")
        (gw,) = spawn_gateway(1, DATABASE_URL=via_proxy, GATEWAY_KEY_TTL=str(KEY_TTL))
        assert probe(gw.url, revoked_plain).status_code == 200
        assert probe(gw.url, setup.plaintext).status_code == 200
        assert error_code(probe(gw.url, unknown)) == "401 invalid_api_key"
        # Each query now takes a few tenths of a second: a reload of the key outlasts the Redis
        # round trip that tells the request of the revocation.
        proxy.delay = 0.15
        proxy.set("delay")
        time.sleep(KEY_TTL)  # the key's entry has expired by age: the next request reloads it
        revoke_key(revoked)
        assert error_code(probe(gw.url, revoked_plain)) == "401 key_revoked"
        assert probe(gw.url, setup.plaintext).status_code == 200  # reloaded after the change
        assert error_code(probe(gw.url, unknown)) == "401 invalid_api_key"
        proxy.set(fault)
        try:
            for _ in range(3):
                time.sleep(SPARSE)
                answers = [error_code(probe(gw.url, k)) for k in (revoked_plain, unknown, setup.plaintext)]
                assert answers == ["401 key_revoked", "401 invalid_api_key", "200"], gw.log.text[-3000:]
            never = probe(gw.url, never_seen)
            assert error_code(never) == "503 database_unavailable" and never.headers["retry-after"]
        finally:
            proxy.set("pass")
