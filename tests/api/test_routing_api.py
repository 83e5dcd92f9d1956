"""REST API of issue 15's routing: aliases (field errors, order, the window they serve), channel
locality (from the address when omitted) and local-only keys."""

from __future__ import annotations

import pytest

from channels.models import Channel, Model, ModelRoute

pytestmark = pytest.mark.django_db


@pytest.fixture
def cloud_model(db):
    ch = Channel.objects.create(name="cloud", kind="openai", base_url="https://api.example.com/v1")
    m = Model.objects.create(name="qwen3-coder-plus")
    ModelRoute.objects.create(model=m, channel=ch, context_window=131_072, max_output_tokens=65_536)
    return m


def test_an_alias_keeps_its_targets_in_order_and_serves_the_largest_window(admin_api, model, cloud_model):
    r = admin_api.post("/api/aliases/", {"name": "coder", "targets": ["qwen3-32b", "qwen3-coder-plus"]}, format="json")
    assert r.status_code == 201, r.json()
    data = r.json()
    assert data["targets"] == ["qwen3-32b", "qwen3-coder-plus"]
    assert (data["context_window"], data["max_output_tokens"]) == (131_072, 65_536)
    r = admin_api.patch(f"/api/aliases/{data['id']}/", {"targets": ["qwen3-coder-plus", "qwen3-32b"]}, format="json")
    assert r.status_code == 200 and r.json()["targets"] == ["qwen3-coder-plus", "qwen3-32b"]
    r = admin_api.patch(f"/api/aliases/{data['id']}/", {"local_only": True}, format="json")
    # local only: the cloud target's window no longer counts, and no target has a local route
    assert r.json()["targets"] == ["qwen3-coder-plus", "qwen3-32b"] and r.json()["context_window"] is None
    # aliases are not models with routes: /api/models/ does not list them
    names = [m["name"] for m in admin_api.get("/api/models/").json()["results"]]
    assert "coder" not in names and "qwen3-32b" in names


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "coder", "targets": []}, "targets"),
        ({"name": "coder", "targets": ["nope"]}, "targets"),
        ({"name": "coder", "targets": ["qwen3-32b", "qwen3-32b"]}, "targets"),
        ({"name": "qwen3-32b", "targets": ["qwen3-32b"]}, "name"),
        ({"name": "bad name", "targets": ["qwen3-32b"]}, "name"),
    ],
)
def test_alias_mistakes_are_field_errors(admin_api, model, body, field):
    r = admin_api.post("/api/aliases/", body, format="json")
    assert r.status_code == 400 and field in r.json(), r.json()
    assert not Model.objects.aliases().exists()


def test_an_alias_cannot_target_an_alias(admin_api, model):
    assert admin_api.post("/api/aliases/", {"name": "a", "targets": ["qwen3-32b"]}, format="json").status_code == 201
    r = admin_api.post("/api/aliases/", {"name": "b", "targets": ["a"]}, format="json")
    assert r.status_code == 400 and "targets" in r.json()


@pytest.mark.parametrize(
    ("base_url", "locality"), [("http://192.168.1.20:8080", "local"), ("https://api.example.com", "external")]
)
def test_a_channel_without_locality_follows_its_address(admin_api, base_url, locality):
    r = admin_api.post("/api/channels/", {"name": "c", "kind": "openai", "base_url": base_url}, format="json")
    assert r.status_code == 201 and r.json()["locality"] == locality


def test_a_channels_locality_can_be_set(admin_api):
    body = {"name": "c", "kind": "openai", "base_url": "https://gpu.example.com", "locality": "local"}
    assert admin_api.post("/api/channels/", body, format="json").json()["locality"] == "local"
    r = admin_api.post("/api/channels/", {**body, "name": "d", "locality": "moon"}, format="json")
    assert r.status_code == 400 and "locality" in r.json()


def test_a_developer_makes_a_key_local_only(alice_api):
    r = alice_api.post("/api/keys/", {"name": "private", "local_only": True}, format="json")
    assert r.status_code == 201 and r.json()["local_only"] is True


def test_the_routing_explanation_is_for_admins_only(admin_api, alice_api, alice):
    from keys.models import UsageRecord

    UsageRecord.objects.create(user=alice, model="coder", route_explanation=["alias coder -> qwen3-32b"])
    assert admin_api.get("/api/usage/records/").json()["results"][0]["route_explanation"] == [
        "alias coder -> qwen3-32b"
    ]
    assert alice_api.get("/api/usage/records/").json()["results"][0]["route_explanation"] is None


def test_alias_target_errors_are_in_the_readers_language(admin_api, model):
    zh = {"format": "json", "HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    coder = admin_api.post("/api/aliases/", {"name": "coder", "targets": ["qwen3-32b"]}, format="json").json()
    other = admin_api.post("/api/aliases/", {"name": "coder2", "targets": ["coder"]}, **zh)
    assert other.status_code == 400 and other.json()["targets"] == ["coder 本身是别名；请改为指向它所指的模型。"]
    itself = admin_api.patch(f"/api/aliases/{coder['id']}/", {"targets": ["coder"]}, **zh)
    assert itself.status_code == 400 and itself.json()["targets"] == ["别名不能指向自己。"]
