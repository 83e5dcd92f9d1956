import pytest

from accounts.services import issue_token
from channels.models import Channel, Model, ModelRoute
from hosts.models import Host
from keys.services import issue_key


@pytest.fixture
def host(db):
    return Host.objects.create(name="gpu-1", address="10.0.0.5", username="ubuntu", private_key="")


@pytest.fixture
def channel(db, host):
    return Channel.objects.create(name="vllm-a", kind="vllm", base_url="http://10.0.0.5:8000/v1")


@pytest.fixture
def model(db, channel):
    m = Model.objects.create(name="qwen3-32b")
    ModelRoute.objects.create(model=m, channel=channel, upstream_model="Qwen/Qwen3-32B", context_window=32768)
    return m


@pytest.fixture
def alice_key(alice):
    key, _ = issue_key(owner=alice, name="laptop")
    return key


@pytest.fixture
def mallory_key(mallory):
    key, _ = issue_key(owner=mallory, name="mallory-laptop")
    return key


@pytest.fixture
def alice_token(alice):
    token, _ = issue_token(user=alice, name="script")
    return token
