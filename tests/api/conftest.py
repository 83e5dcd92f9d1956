"""Fixtures for the REST API tests: one client per role (session login), token clients, and a
small world of objects owned by alice, mallory and the admin."""

from __future__ import annotations

import asyncssh
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import AuditLog
from accounts.services import issue_token
from channels.models import AlertTarget, Channel, Model, ModelRoute, ProbeResult, StatusChange
from clientconfigs import services as clientconfigs
from clientconfigs.models import KeyMode
from gateway.usage import write_batch
from hosts import backends
from hosts.choices import JobAction, JobState
from hosts.models import GPU, Deployment, Host, LaunchJob
from keys.models import UsageDaily, UsageRecord
from keys.services import issue_key
from tests.keys.test_usage import event

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
def lead_api(lena) -> APIClient:
    return session_client(lena)


@pytest.fixture
def host(db, ssh_private_key) -> Host:
    host = Host.objects.create(
        name="gpu-1",
        # Loopback's port 1, where nothing listens: what reaches the host over SSH is refused at once
        # (a made-up address may be answered by a machine's network, then time out in the handshake).
        address="127.0.0.1",
        ssh_port=1,
        username="ubuntu",
        private_key=ssh_private_key,
        labels=["a100"],
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
def alias(db, model) -> Model:
    from channels.services import save_alias

    return save_alias(name="coder", targets=[model.name])


@pytest.fixture
def alice_key(alice):
    key, _plaintext = issue_key(owner=alice, name="alice laptop")
    return key


@pytest.fixture
def alice_token(alice):
    token, _plaintext = issue_token(user=alice, name="alice script")
    return token


@pytest.fixture
def deployment(db, admin) -> Deployment:
    """A stopped deployment on a host with no private key stored yet: anything that would open an
    SSH connection for it fails at once, without touching the network (the fit check falls back
    to presets), and a job requested for it stays queued (its task is sent only on commit)."""
    keyless = Host.objects.create(name="gpu-keyless", address="10.0.0.7", username="ubuntu")
    GPU.objects.create(host=keyless, index=0, name="NVIDIA A100", memory_total_mib=81920, memory_used_mib=1024)
    return Deployment.objects.create(
        name="qwen",
        host=keyless,
        backend="vllm",
        model_path="Qwen/Qwen3-32B",
        served_model_name="qwen3-32b",
        gpu_indices=[0],
        port=8000,
        options=backends.get("vllm").clean_options({"max_model_len": 32768}, 1),  # as the form stores them
        created_by=admin,
    )


@pytest.fixture
def download(host, admin):
    """A queued weight download with no remote process yet (hosts/downloads/)."""
    from hosts.downloads.models import ModelDownload

    return ModelDownload.objects.create(host=host, repo_id="acme/tiny", requested_by=admin)


@pytest.fixture
def launch_job(deployment, admin) -> LaunchJob:
    """A finished job, so the deployment is free for the next one."""
    return LaunchJob.objects.create(
        deployment=deployment, action=JobAction.LAUNCH, state=JobState.FAILED, requested_by=admin
    )


@pytest.fixture
def channel_off(db) -> Channel:
    """A disabled channel: "check now" answers 409 without probing anything."""
    return Channel.objects.create(
        name="openai-off", kind="openai", base_url="https://off.example.test/v1", enabled=False
    )


@pytest.fixture
def probe(channel) -> ProbeResult:
    return ProbeResult.objects.create(channel=channel, created=timezone.now(), ok=True, ttft_ms=120.0)


@pytest.fixture
def status_change(channel) -> StatusChange:
    return StatusChange.objects.create(channel=channel, from_status="unknown", to_status="healthy")


@pytest.fixture
def alert_target(db) -> AlertTarget:
    """An e-mail target: a test notification goes to Django's test mail outbox, not the network."""
    return AlertTarget.objects.create(name="oncall", kind="email", email="oncall@example.com")


@pytest.fixture
def alice_usage(alice_key, team) -> tuple[UsageRecord, UsageDaily]:
    """One gateway request by alice's key (a member of the team): its usage record and the daily
    bucket it went into."""
    write_batch([event(alice_key, team_id=team.pk)])
    return UsageRecord.objects.get(key=alice_key), UsageDaily.objects.get(key=alice_key)


@pytest.fixture
def alice_logging(alice_key):
    """Request logging turned on for alice's key (7 days)."""
    from keys.models import PayloadLogging

    return PayloadLogging.objects.create(key=alice_key, retention_days=7)


@pytest.fixture
def alice_request_log(alice_key):
    """One stored (redacted, compressed) request of alice's key."""
    from django.utils import timezone

    from keys.payloads.redact import Redactor
    from keys.payloads.services import Captured, build

    body = b'{"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}]}'
    captured = Captured(
        created=timezone.now(),
        request_id="req-alice-1",
        key_id=alice_key.pk,
        user_id=alice_key.owner_id,
        model="qwen3-32b",
        surface="chat",
        stream=False,
        status="ok",
        http_status=200,
        retention_days=7,
        request=body,
        response=b'{"choices": []}',
        request_bytes=len(body),
        response_bytes=15,
        truncated=False,
    )
    row = build(captured, Redactor())
    row.save()
    return row


@pytest.fixture
def bundle_token(alice, alice_key) -> str:
    """A one-use installer download token of alice's (placeholder mode, her key)."""
    _token, plaintext = clientconfigs.issue_download_token(
        alice, "continue", key_mode=KeyMode.PLACEHOLDER, key=alice_key
    )
    return plaintext


@pytest.fixture
def world(
    admin,
    alice,
    mallory,
    team,
    lena,
    host,
    channel,
    channel_off,
    model,
    alias,
    alice_key,
    alice_token,
    deployment,
    launch_job,
    download,
    probe,
    status_change,
    alert_target,
    alice_usage,
    bundle_token,
    alice_logging,
    alice_request_log,
    alice_budget,
    route_price,
    mcp_world,
) -> dict:
    """Ids (and a few other values) for the role matrix's URL templates and bodies."""
    usage_record, usage_daily = alice_usage
    return {
        "admin": admin.pk,
        "alice": alice.pk,
        "mallory": mallory.pk,
        "team": team.pk,
        "lena": lena.pk,
        "host": host.pk,
        "channel": channel.pk,
        "model": model.pk,
        "alias": alias.pk,
        "alice_key": alice_key.pk,
        "alice_token": alice_token.pk,
        "audit": AuditLog.objects.order_by("id").first().pk,
        "deployment": deployment.pk,
        "keyless_host": deployment.host_id,
        "job": launch_job.pk,
        "download": download.pk,
        "channel_off": channel_off.pk,
        "status_change": status_change.pk,
        "alert_target": alert_target.pk,
        "alice_usage": usage_record.pk,
        "alice_daily": usage_daily.pk,
        "client": "continue",
        "model_folder": "acme--tiny",  # the world download's folder on its host's disk
        "bundle_token": bundle_token,
        "alice_logging": alice_logging.pk,
        "alice_request_log": alice_request_log.pk,
        "alice_budget": alice_budget.pk,
        "route_price": route_price.pk,
        "route": route_price.route_id,
        **mcp_world,
    }


@pytest.fixture
def alice_budget(alice):
    from keys.models import Budget

    return Budget.objects.create(user=alice, window="month", amount=50)


@pytest.fixture
def route_price(channel, model):
    from channels.models import ModelRoute
    from channels.services import set_route_price

    route = ModelRoute.objects.filter(channel=channel).first() or ModelRoute.objects.create(
        model=model, channel=channel
    )
    return set_route_price(route, input="1", output="2")


@pytest.fixture
def mcp_world(alice, alice_key) -> dict:
    """An MCP server (unreachable: its check answers "down"), a tool, alice's key's grant and a call."""
    from mcpservers.models import McpCall
    from tests.mcpservers.factories import grant, make_server

    server = make_server(slug="tracker", url="http://127.0.0.1:9/mcp", tools=["echo"], timeout_seconds=2)
    row = grant(server, tool="echo", key=alice_key)
    call = McpCall.objects.create(server=server, server_slug="tracker", tool="echo", key=alice_key, status="ok")
    return {"mcp_server": server.pk, "mcp_tool": row.tool_id, "mcp_grant": row.pk, "mcp_call": call.pk}
