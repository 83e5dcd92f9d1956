"""The gateway test rig of tests/gateway (uvicorn serving the portal in front of FakeUpstream)."""

from __future__ import annotations

import pytest

from channels.models import Channel, ModelRoute
from keys.models import Key, UsageRecord
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import (  # noqa: F401  (fixtures)
    UPSTREAM_KEY,
    Setup,
    add_channel,
    gateway_url,
    redis_namespace,
    setup,
    unread_gaps,
    upstream,
    wait_for,
)

# The weather tool as a Responses client (Codex) declares it.
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}},
        "strict": False,
    }
]


@pytest.fixture
def second_upstream():
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        yield up


@pytest.fixture
def native_upstream():
    """An upstream without a key check, so the credentials the gateway sends can be inspected."""
    with FakeUpstream() as up:
        yield up


def add_native_channel(rig: Setup, far_end: FakeUpstream, *, kind: str = "anthropic", **flags) -> Channel:
    """Route the test model only to a channel that speaks Messages / Responses natively."""
    ModelRoute.objects.filter(model=rig.model).delete()
    channel = Channel.objects.create(
        name=f"native-{kind}",
        kind=kind,
        base_url=far_end.base_url,
        api_key="sk-native-secret",
        status="healthy",
        **flags,
    )
    ModelRoute.objects.create(model=rig.model, channel=channel, upstream_model="native-model")
    return channel


def set_limits(key: Key, **limits) -> None:
    """Save through the model, so the gateway's key cache hears of it (signals)."""
    for name, value in limits.items():
        setattr(key, name, value)
    key.save()


def record_for(key: Key, n: int = 1) -> list[UsageRecord]:
    """Wait for `n` usage records of `key` (written in batches) and return them, oldest first."""
    return wait_for(
        lambda: (r := list(UsageRecord.objects.filter(key=key).order_by("created", "id"))) and len(r) >= n and r
    )
