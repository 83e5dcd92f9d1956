"""Channels and models through the API: canonical base URL with notes, status reset on a
connection edit, nested routes, and developers seeing only the models they may use."""

from __future__ import annotations

import datetime

import pytest
import redis
from django.test import override_settings
from django.utils import timezone

from channels.models import Channel, Model, ModelRoute, RoutePrice
from channels.services import save_alias, set_route_price
from gateway.cache import generation_keys
from keys.services import issue_key
from tests.services import require_redis

pytestmark = pytest.mark.django_db


def test_a_channel_is_created_with_the_fields_a_script_writer_guesses(admin_api):
    response = admin_api.post(
        "/api/channels/",
        {
            "name": "deepseek",
            "kind": "openai",
            "base_url": " https://api.deepseek.com/?utm_source=x ",
            "api_key": "sk-1",
        },
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["base_url"] == "https://api.deepseek.com/v1"
    assert any("query string" in n for n in body["base_url_notes"]) and any("/v1" in n for n in body["base_url_notes"])
    assert body["has_api_key"] is True and "api_key" not in body
    assert Channel.objects.get(name="deepseek").base_url == "https://api.deepseek.com/v1"
    assert admin_api.get(f"/api/channels/{body['id']}/").json()["base_url_notes"] == []


def test_an_anthropic_channel_always_speaks_messages(admin_api):
    body = admin_api.post(
        "/api/channels/",
        {"name": "claude", "kind": "anthropic", "base_url": "https://api.anthropic.com", "speaks_messages": False},
        format="json",
    ).json()
    assert body["speaks_messages"] is True


def test_editing_the_connection_resets_a_rejected_channel_to_unknown(admin_api, channel):
    Channel.objects.filter(pk=channel.pk).update(status="credentials_rejected", status_message="401 from upstream")
    admin_api.patch(f"/api/channels/{channel.pk}/", {"priority": 9}, format="json")
    channel.refresh_from_db()
    assert channel.status == "credentials_rejected"  # an unrelated edit keeps the verdict
    body = admin_api.patch(f"/api/channels/{channel.pk}/", {"api_key": "sk-new"}, format="json").json()
    assert body["status"] == "unknown" and body["status_changed"] is not None


def test_routes_are_replaced_as_a_set_and_keep_discovered_values(admin_api, model, channel):
    other = Channel.objects.create(name="cloud", base_url="https://cloud.test/v1")
    ModelRoute.objects.filter(model=model, channel=channel).update(discovered_context_window=40960)
    response = admin_api.patch(
        f"/api/models/{model.pk}/",
        {
            "routes": [
                {"channel": channel.pk, "upstream_model": "Qwen/Qwen3-32B", "max_output_tokens": 4096},
                {"channel": "cloud", "upstream_model": "qwen3-32b-instruct", "context_window": 131072},
            ]
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    routes = {r["channel_name"]: r for r in body["routes"]}
    assert routes["vllm-a"]["discovered_context_window"] == 40960 and routes["vllm-a"]["max_output_tokens"] == 4096
    assert routes["cloud"]["upstream_id"] == "qwen3-32b-instruct" and routes["cloud"]["channel"] == other.pk
    assert body["context_window"] == 40960 and body["max_output_tokens"] == 4096

    body = admin_api.patch(f"/api/models/{model.pk}/", {"routes": [{"channel": "cloud"}]}, format="json").json()
    assert [r["channel_name"] for r in body["routes"]] == ["cloud"]
    assert ModelRoute.objects.filter(model=model).count() == 1
    admin_api.patch(f"/api/models/{model.pk}/", {"description": "kept routes"}, format="json")
    assert ModelRoute.objects.filter(model=model).count() == 1


def test_a_channel_whose_routes_have_prices_is_deleted_only_when_asked(admin_api, model, channel):
    """Regression (probe): DELETE took the channel's priced routes and their whole price history
    along without a word, which the models API refuses and the web UI's confirmation spells out."""
    set_route_price(ModelRoute.objects.get(model=model), input=1, output=2)
    url = f"/api/channels/{channel.pk}/"
    for query in ("", "?remove_priced_routes=false"):
        response = admin_api.delete(url + query)
        assert response.status_code == 409, response.content
        assert "remove_priced_routes=true" in response.json()["detail"] and model.name in response.json()["detail"]
        assert Channel.objects.filter(pk=channel.pk).exists() and RoutePrice.objects.count() == 1
    assert admin_api.delete(url + "?remove_priced_routes=true").status_code == 204
    assert not Channel.objects.filter(pk=channel.pk).exists() and not RoutePrice.objects.exists()
    unpriced = Channel.objects.create(name="cloud", base_url="https://cloud.test/v1")
    ModelRoute.objects.create(model=model, channel=unpriced, upstream_model="m")
    assert admin_api.delete(f"/api/channels/{unpriced.pk}/").status_code == 204  # nothing priced: no question


def test_routes_that_stay_keep_their_prices_and_a_priced_one_goes_only_when_asked(admin_api, model, channel):
    route = ModelRoute.objects.get(model=model)
    set_route_price(route, input=1, output=2, effective_from=timezone.now() - datetime.timedelta(days=30))
    set_route_price(route, input=3, output=4)
    history = set(RoutePrice.objects.values_list("pk", flat=True))
    Channel.objects.create(name="cloud", base_url="https://cloud.test/v1")
    url = f"/api/models/{model.pk}/"

    kept = {"channel": "vllm-a", "upstream_model": "Qwen/Qwen3-32B-AWQ", "context_window": 40960}
    response = admin_api.put(url, {"name": model.name, "routes": [kept, {"channel": "cloud"}]}, format="json")
    assert response.status_code == 200, response.json()
    assert ModelRoute.objects.get(model=model, channel=channel).pk == route.pk
    assert set(RoutePrice.objects.values_list("pk", flat=True)) == history

    for body in ({"routes": [{"channel": "cloud"}]}, {"routes": [{"channel": "cloud"}], "remove_priced_routes": False}):
        response = admin_api.patch(url, {**body, "description": "edited"}, format="json")
        assert response.status_code == 400
        assert "The routes to vllm-a have prices" in response.json()["remove_priced_routes"][0]
        assert ModelRoute.objects.filter(model=model).count() == 2 and Model.objects.get().description == ""
        assert set(RoutePrice.objects.values_list("pk", flat=True)) == history

    response = admin_api.patch(url, {"routes": [{"channel": "cloud"}], "remove_priced_routes": True}, format="json")
    assert response.status_code == 200, response.json()
    assert [r["channel_name"] for r in response.json()["routes"]] == ["cloud"]
    assert "remove_priced_routes" not in response.json() and not RoutePrice.objects.exists()


def test_disabled_routes_and_channels_do_not_count_toward_effective_limits(admin_api, model, channel):
    small = Channel.objects.create(name="small", base_url="https://small.test/v1", enabled=False)
    ModelRoute.objects.create(model=model, channel=small, context_window=4096, max_output_tokens=512)
    body = admin_api.get(f"/api/models/{model.pk}/").json()
    assert body["context_window"] == 32768 and body["max_output_tokens"] == 8192


def test_developers_see_only_models_they_may_use_and_no_routes(alice, alice_api, model):
    hidden = Model.objects.create(name="secret-model")
    disabled = Model.objects.create(name="old-model", enabled=False)
    names = [m["name"] for m in alice_api.get("/api/models/").json()["results"]]
    assert names == ["qwen3-32b", "secret-model"]
    assert "routes" not in alice_api.get(f"/api/models/{model.pk}/").json()
    assert alice_api.get(f"/api/models/{disabled.pk}/").status_code == 404

    alice.allowed_models.set([model])
    assert [m["name"] for m in alice_api.get("/api/models/").json()["results"]] == ["qwen3-32b"]
    assert alice_api.get(f"/api/models/{hidden.pk}/").status_code == 404


def test_hosts_keep_the_private_key_when_omitted_and_ignore_a_sent_fingerprint(admin_api, host, ssh_private_key):
    response = admin_api.patch(
        f"/api/hosts/{host.pk}/", {"notes": "n", "host_key_fingerprint": "SHA256:forged"}, format="json"
    )
    assert response.status_code == 200 and response.json()["has_private_key"] is True
    host.refresh_from_db()
    assert host.private_key.strip() == ssh_private_key.strip() and host.host_key_fingerprint == ""
    assert response.json()["gpus"][0]["memory_free_mib"] == 80896


def test_a_hosts_private_key_can_be_cleared(admin_api, host):
    response = admin_api.patch(f"/api/hosts/{host.pk}/", {"private_key": None}, format="json")
    assert response.status_code == 200 and response.json()["has_private_key"] is False
    host.refresh_from_db()
    assert host.private_key == ""


def test_a_models_balancing_policy_is_set_and_checked(admin_api, model):
    assert admin_api.get(f"/api/models/{model.pk}/").json()["balance"] == "weighted"
    body = admin_api.patch(f"/api/models/{model.pk}/", {"balance": "affinity"}, format="json").json()
    assert body["balance"] == "affinity" and Model.objects.get(pk=model.pk).balance == "affinity"
    bad = admin_api.patch(f"/api/models/{model.pk}/", {"balance": "round_robin"}, format="json")
    assert bad.status_code == 400 and "balance" in bad.json()
    assert Model.objects.get(pk=model.pk).balance == "affinity"


def test_a_name_made_of_digits_names_its_object_not_the_one_with_that_id(admin_api, channel):
    """A channel named "1" (created after the one whose id is 1): a route to "1" goes to it."""
    from channels.models import Channel

    named = Channel.objects.create(name=str(channel.pk), kind="vllm", base_url="http://10.0.0.9:8000/v1")
    assert named.pk != channel.pk
    made = admin_api.post("/api/models/", {"name": "m-digits", "routes": [{"channel": str(channel.pk)}]}, format="json")
    assert made.status_code == 201, made.content
    assert [r["channel"] for r in made.json()["routes"]] == [named.pk]
    by_id = admin_api.post("/api/models/", {"name": "m-by-id", "routes": [{"channel": channel.pk}]}, format="json")
    assert [r["channel"] for r in by_id.json()["routes"]] == [channel.pk]  # an integer is an id


def test_a_model_a_key_user_or_team_is_limited_to_alone_is_not_deleted(admin_api, alice, team, model, channel):
    """An empty allow-list means every model: deleting a key's only allowed model used to answer
    204 and leave the key able to use everything its owner may."""
    wide = Model.objects.create(name="wide")
    ModelRoute.objects.create(model=wide, channel=channel)
    key, _ = issue_key(owner=alice, name="narrow only", allowed_models=[model])
    wider, _ = issue_key(owner=alice, name="two models", allowed_models=[model, wide])
    alice.allowed_models.set([model])
    team.allowed_models.set([model])

    refused = admin_api.delete(f"/api/models/{model.pk}/")

    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert detail.startswith("Still used by ") and "limited to this model alone" in detail
    assert all(name in detail for name in ("key narrow only of alice", "user alice", "team alpha"))
    assert "two models" not in detail
    assert list(key.allowed_models.all()) == [model]

    key.allowed_models.set([model, wide])
    alice.allowed_models.set([model, wide])
    team.allowed_models.clear()
    assert admin_api.delete(f"/api/models/{model.pk}/").status_code == 204
    assert list(key.allowed_models.all()) == [wide] and list(wider.allowed_models.all()) == [wide]


def test_a_revoked_key_does_not_hold_its_only_model(admin_api, alice, model):
    key, _ = issue_key(owner=alice, name="old", allowed_models=[model])
    key.revoke()
    assert admin_api.delete(f"/api/models/{model.pk}/").status_code == 204


def test_a_model_that_is_an_aliases_only_target_is_not_deleted(admin_api, model, alias, channel):
    refused = admin_api.delete(f"/api/models/{model.pk}/")
    assert refused.status_code == 409 and "aliases coder" in refused.json()["detail"]
    assert alias.target_names == ["qwen3-32b"]

    other = Model.objects.create(name="other")
    ModelRoute.objects.create(model=other, channel=channel)
    save_alias(alias=alias, name="coder", targets=[model.name, other.name])
    assert admin_api.delete(f"/api/models/{model.pk}/").status_code == 204
    assert alias.target_names == ["other"]


def test_an_alias_a_key_is_limited_to_alone_is_not_deleted(admin_api, alice, alias):
    issue_key(owner=alice, name="coder only", allowed_models=[alias])
    refused = admin_api.delete(f"/api/aliases/{alias.pk}/")
    assert refused.status_code == 409 and "key coder only of alice" in refused.json()["detail"]
    assert Model.objects.filter(pk=alias.pk).exists()


def test_deleting_a_model_tells_the_gateway_that_keys_changed(
    admin_api, alice, model, channel, django_capture_on_commit_callbacks
):
    """The cascade removes the key's link row without an m2m_changed signal, so the model's own
    delete has to bump the keys' cache generation (other processes kept the old allow-list)."""
    url = require_redis()
    wide = Model.objects.create(name="wide")
    ModelRoute.objects.create(model=wide, channel=channel)
    issue_key(owner=alice, name="two models", allowed_models=[model, wide])
    gen_keys, _ = generation_keys()
    client = redis.Redis.from_url(url)
    with override_settings(REDIS_URL=url):
        before = client.get(gen_keys)
        with django_capture_on_commit_callbacks(execute=True):
            assert admin_api.delete(f"/api/models/{model.pk}/").status_code == 204
        after = client.get(gen_keys)
    assert after is not None and after != before
