"""End to end: probes mark a channel down, the real gateway stops sending it traffic, and takes it
back once the probes see it recover."""

import pytest
from openai import OpenAI

from channels.choices import ChannelStatus
from channels.health import services
from channels.models import Channel, Model, ModelRoute
from keys.services import issue_key
from tests.gateway.conftest import ThreadServer


@pytest.fixture
def gateway(transactional_db, settings):
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    server = ThreadServer().start()
    yield server.url
    server.stop()


def chats(up) -> int:
    return sum(1 for r in up.requests if r.path == "/v1/chat/completions" and r.json.get("max_tokens") != 4)


def test_the_gateway_skips_a_down_channel_and_takes_it_back_when_it_recovers(gateway, upstream, alice):
    primary, backup = upstream(), upstream()
    model = Model.objects.create(name="qwen3-32b")
    for name, up, prio in (("primary", primary, 10), ("backup", backup, 0)):
        ch = Channel.objects.create(name=name, kind="vllm", base_url=up.base_url, priority=prio)
        ModelRoute.objects.create(model=model, channel=ch, upstream_model="fake-model")
    _, plaintext = issue_key(owner=alice, name="laptop")
    client = OpenAI(base_url=f"{gateway}/v1", api_key=plaintext, max_retries=0)

    def ask() -> None:
        reply = client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content

    services.run_round()
    ask()
    assert (chats(primary), chats(backup)) == (1, 0)  # healthy primary wins on priority

    primary.behave(mode="status", status=503)
    for _ in range(3):
        services.run_round()
    assert Channel.objects.get(name="primary").status == ChannelStatus.DOWN

    ask()
    ask()
    assert chats(backup) == 2
    assert chats(primary) == 1  # not even tried while down (a failover would have hit it first)

    primary.behave(mode="ok")
    services.run_round()
    services.run_round()
    assert Channel.objects.get(name="primary").status == ChannelStatus.HEALTHY
    ask()
    assert chats(primary) == 2
