"""Fixtures for the REST API tests: one client per role (session login), token clients, and a
small world of objects owned by alice, mallory and the admin."""

from __future__ import annotations

import asyncssh
import pytest
from rest_framework.test import APIClient

from accounts.models import AuditLog
from accounts.services import issue_token
from channels.models import Channel, Model, ModelRoute
from hosts.models import GPU, Host
from keys.services import issue_key

CHANNEL_API_KEY = "sk-upstream-secret-0123456789abcdef"


@pytest.fixture(scope="session")
def openapi_schema() -> dict:
    """The OpenAPI document, generated once per run (it takes seconds on a busy box)."""
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.fixture(scope="session")
def ssh_private_key() -> str:
    return asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()


def session_client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_login(user)
    return client


def token_client(user) -> APIClient:
    _token, plaintext = issue_token(user=user, name="test client")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    return client


@pytest.fixture
def anon_api(db) -> APIClient:
    return session_client()


@pytest.fixture
def admin_api(admin) -> APIClient:
    return session_client(admin)


@pytest.fixture
def alice_api(alice) -> APIClient:
    return session_client(alice)


@pytest.fixture
def mallory_api(mallory) -> APIClient:
    return session_client(mallory)


@pytest.fixture
def host(db, ssh_private_key) -> Host:
    host = Host.objects.create(
        name="gpu-1", address="10.0.0.5", username="ubuntu", private_key=ssh_private_key, labels=["a100"]
    )
    GPU.objects.create(host=host, index=0, name="NVIDIA A100", memory_total_mib=81920, memory_used_mib=1024)
    return host


@pytest.fixture
def channel(db, host) -> Channel:
    return Channel.objects.create(
        name="vllm-a", kind="vllm", base_url="http://10.0.0.5:8000/v1", api_key=CHANNEL_API_KEY
    )


@pytest.fixture
def model(db, channel) -> Model:
    model = Model.objects.create(name="qwen3-32b", display_name="Qwen3 32B")
    ModelRoute.objects.create(
        model=model, channel=channel, upstream_model="Qwen/Qwen3-32B", context_window=32768, max_output_tokens=8192
    )
    return model


@pytest.fixture
def alice_key(alice):
    key, _plaintext = issue_key(owner=alice, name="alice laptop")
    return key


@pytest.fixture
def alice_token(alice):
    token, _plaintext = issue_token(user=alice, name="alice script")
    return token


@pytest.fixture
def world(admin, alice, mallory, host, channel, model, alice_key, alice_token) -> dict:
    """Ids for the role matrix's URL templates."""
    return {
        "admin": admin.pk,
        "alice": alice.pk,
        "mallory": mallory.pk,
        "host": host.pk,
        "channel": channel.pk,
        "model": model.pk,
        "alice_key": alice_key.pk,
        "alice_token": alice_token.pk,
        "audit": AuditLog.objects.order_by("id").first().pk,
    }
