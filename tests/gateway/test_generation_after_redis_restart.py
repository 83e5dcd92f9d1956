"""A Redis restarted without its data does not make a replica take a new change for one it has seen.

Regression: the generations were counters (INCR). A replica learnt `gen:keys` = 1; Redis restarted
empty; another replica revoked a key and counted again from 1; the first replica's next admission
found the 1 it expected and kept serving the revoked key from its cache (until GATEWAY_KEY_TTL, or
for good with a long one). A generation is now a value the key never held (`new_generation`)."""

from __future__ import annotations

import httpx
import redis
from django.utils import timezone

from gateway import signals
from gateway.cache import namespace
from keys.models import Key
from tests.gateway.conftest import ThreadServer


def post(url: str, key: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        json={"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_a_key_revoked_after_a_redis_restart_is_refused_by_a_replica_that_cached_it(setup, settings, tmp_path):
    settings.GATEWAY_CACHE_TTL = 3600  # nothing reloads on its own during the test: only a generation
    settings.GATEWAY_KEY_TTL = 3600
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    direct = redis.Redis.from_url(settings.REDIS_URL)

    def restart_redis() -> None:  # without persistence: every key of the gateway's namespace is gone
        for name in direct.scan_iter(f"{namespace()}:*"):
            direct.delete(name)

    restart_redis()  # a Redis that has seen one change since it started
    assert signals._publish(keys=True, routes=False)
    server = ThreadServer().start()
    try:
        assert post(server.url, setup.plaintext).status_code == 200  # the key is in this replica's cache
        restart_redis()
        # Another replica revokes the key: the row (no signal in this process), then its publication.
        Key.objects.filter(pk=setup.key.pk).update(revoked_at=timezone.now())
        assert signals._publish(keys=True, routes=False)
        r = post(server.url, setup.plaintext)
    finally:
        server.stop()
        direct.close()
    assert r.status_code == 401, r.text
