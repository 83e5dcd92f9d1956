"""A gateway process learns the cache generations when it starts, before it loads anything.

Regression (CI, test_balance's shared-mapping test): a process that had served no request yet had
no generation to compare with. Its background refresh loaded the catalog while a channel was down;
an admin then marked the channel healthy (the routes generation was bumped in Redis); the process's
first request read the new generation, had nothing to compare it with, kept the stale catalog and
routed around the healthy channel until the next refresh (GATEWAY_CACHE_TTL)."""

from __future__ import annotations

import httpx
import redis

from channels.models import Channel
from gateway.cache import _load_catalog, generation_keys, new_generation, snapshot
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, ThreadServer, add_channel


def test_a_change_announced_before_the_first_request_reaches_it(setup, upstream, settings, tmp_path):
    settings.GATEWAY_CACHE_TTL = 3600  # no background refresh during the test: the stale copy stays
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    with FakeUpstream(api_key=UPSTREAM_KEY) as fallback:
        add_channel(fallback, "fallback", priority=-1, model=setup.model)
        server = ThreadServer().start()  # learns the generations now
        try:
            # What the background refresh does, while another replica's admin has the primary down:
            Channel.objects.filter(pk=setup.channel.pk).update(status="down")  # no signal in this process
            snapshot.catalog = snapshot.last_catalog = _load_catalog()
            # That replica's admin marks it healthy again: the database, then the bump in Redis.
            Channel.objects.filter(pk=setup.channel.pk).update(status="healthy")
            redis.Redis.from_url(settings.REDIS_URL).set(generation_keys()[1], new_generation())

            r = httpx.post(
                server.url + "/v1/chat/completions",
                json={"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                headers={"Authorization": f"Bearer {setup.plaintext}"},
                timeout=30,
            )
        finally:
            server.stop()
    assert r.status_code == 200, r.text
    assert (len(upstream.requests), len(fallback.requests)) == (1, 0)  # the primary, healthy again
