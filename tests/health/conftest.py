import pytest
from django.test import override_settings

from channels.models import Channel, Model, ModelRoute
from tests.fakes.upstream import FakeUpstream

FAST = {
    "PORTAL_PROBE_TIMEOUT": 1.0,
    "PORTAL_PROBE_CONNECT_TIMEOUT": 1.0,
    "PORTAL_ALERT_TIMEOUT": 2.0,
    "PORTAL_PASSIVE_FLUSH_SECONDS": 0,  # tests call flush()/collect() themselves; no background writer
}


@pytest.fixture(autouse=True)
def fast_probes():
    with override_settings(**FAST):
        yield


@pytest.fixture
def upstream():
    ups: list[FakeUpstream] = []

    def start(**kwargs) -> FakeUpstream:
        up = FakeUpstream(**kwargs).start()
        ups.append(up)
        return up

    yield start
    for up in ups:
        up.stop()


@pytest.fixture
def make_channel(db):
    def make(name: str, base_url: str, *, kind: str = "vllm", model: str = "fake-model", **kwargs) -> Channel:
        ch = Channel.objects.create(name=name, base_url=base_url, kind=kind, **kwargs)
        m, _ = Model.objects.get_or_create(name=f"public-{model}")
        ModelRoute.objects.create(model=m, channel=ch, upstream_model=model, context_window=4096)
        return ch

    return make
