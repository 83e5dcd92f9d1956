"""Secrets never appear in API responses (except the one create response that mints them) and
the audit log records them only as "set"/"changed"."""

from __future__ import annotations

import pytest

from accounts.models import AuditLog

from .conftest import CHANNEL_API_KEY

pytestmark = pytest.mark.django_db

READ_URLS = [
    "/api/users/",
    "/api/users/{alice}/",
    "/api/me/",
    "/api/tokens/",
    "/api/audit-log/?page_size=500",
    "/api/hosts/",
    "/api/hosts/{host}/",
    "/api/channels/",
    "/api/channels/{channel}/",
    "/api/models/",
    "/api/keys/",
    "/api/keys/{alice_key}/",
]


def test_no_secret_is_ever_returned_after_its_creation(world, admin_api, alice_api, ssh_private_key):
    secrets = [CHANNEL_API_KEY, ssh_private_key.splitlines()[1]]
    channel = admin_api.post(
        "/api/channels/",
        {"name": "cloud", "kind": "openai", "base_url": "https://api.test", "api_key": "sk-live-PLAINTEXT-42"},
        format="json",
    )
    assert channel.status_code == 201 and "sk-live-PLAINTEXT-42" not in channel.content.decode()
    assert channel.json()["has_api_key"] is True
    secrets.append("sk-live-PLAINTEXT-42")
    host = admin_api.post(
        "/api/hosts/",
        {"name": "h9", "address": "h9.lan", "username": "root", "private_key": ssh_private_key},
        format="json",
    )
    assert host.status_code == 201 and ssh_private_key.splitlines()[1] not in host.content.decode()
    assert host.json()["has_private_key"] is True
    secrets.append(
        admin_api.post("/api/users/", {"username": "bob", "role": "developer"}, format="json").json()["password"]
    )
    secrets.append(admin_api.post(f"/api/users/{world['mallory']}/reset-password/").json()["password"])
    secrets.append(alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()["key"])
    rotated = alice_api.post(f"/api/keys/{world['alice_key']}/rotate/", {"grace_seconds": 60}, format="json")
    secrets.append(rotated.json()["key"])
    secrets.append(alice_api.post("/api/tokens/", {"name": "ci"}, format="json").json()["token"])
    admin_api.patch(f"/api/channels/{world['channel']}/", {"api_key": "sk-rotated-SECRET-77"}, format="json")
    secrets.append("sk-rotated-SECRET-77")

    for client in (admin_api, alice_api):
        for url in READ_URLS:
            body = client.get(url.format(**world)).content.decode()
            for secret in secrets:
                assert secret not in body, (url, secret[:8])

    text = str(list(AuditLog.objects.values()))
    for secret in secrets:
        assert secret not in text
    channel_update = AuditLog.objects.filter(object_type="channel", object_id=str(world["channel"]), action="update")
    assert channel_update.first().changes["api_key"] == "changed"
    assert AuditLog.objects.filter(object_type="host", action="create").first().changes["private_key"] == "set"


def test_clearing_and_keeping_write_only_secrets(admin_api, channel):
    admin_api.patch(f"/api/channels/{channel.pk}/", {"priority": 3}, format="json")
    channel.refresh_from_db()
    assert channel.api_key == CHANNEL_API_KEY  # omitted: kept
    response = admin_api.patch(f"/api/channels/{channel.pk}/", {"api_key": ""}, format="json")
    assert response.json()["has_api_key"] is False
    channel.refresh_from_db()
    assert channel.api_key == ""
