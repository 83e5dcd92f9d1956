"""Admin pages of issue 15's routing: aliases (create, edit, field errors, confirm delete), a
channel's locality, a key's local-only switch, and the request detail page with its explanation."""

from __future__ import annotations

import pytest
from django.urls import reverse

from channels.models import AliasTarget, Channel, Model, ModelRoute
from keys.models import Key, UsageRecord
from keys.services import issue_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def cloud_model(db):
    ch = Channel.objects.create(name="cloud", kind="openai", base_url="https://api.example.com/v1")
    m = Model.objects.create(name="qwen3-coder-plus")
    ModelRoute.objects.create(model=m, channel=ch, context_window=131_072)
    return m


def alias_post(client, url=None, **data):
    payload = {"name": "coder", "display_name": "", "description": "", "enabled": "on", **data}
    return client.post(url or reverse("model_alias_create"), payload)


def test_an_admin_creates_an_alias_and_sees_its_targets_in_order(admin_client, model, cloud_model):
    response = alias_post(admin_client, target_0="qwen3-32b", target_1="qwen3-coder-plus")
    alias = Model.objects.get(name="coder")
    assert response.status_code == 302 and response["Location"] == reverse("model_alias_detail", args=[alias.pk])
    assert alias.is_alias and alias.target_names == ["qwen3-32b", "qwen3-coder-plus"]
    page = admin_client.get(response["Location"]).content.decode()
    assert page.index("qwen3-32b") < page.index("qwen3-coder-plus")
    assert alias.effective_limits() == (131_072, None)  # the largest window a target serves
    # an alias is listed with the aliases, not with the models
    assert "coder" in admin_client.get(reverse("model_alias_list")).content.decode()
    assert "<code>coder</code>" not in admin_client.get(reverse("model_list")).content.decode()


def test_editing_an_alias_reorders_its_targets(admin_client, model, cloud_model):
    alias_post(admin_client, target_0="qwen3-32b", target_1="qwen3-coder-plus")
    alias = Model.objects.get(name="coder")
    url = reverse("model_alias_edit", args=[alias.pk])
    assert admin_client.get(url).status_code == 200
    response = alias_post(admin_client, url, target_0="qwen3-coder-plus", target_1="qwen3-32b", local_only="on")
    assert response.status_code == 302
    alias.refresh_from_db()
    assert alias.target_names == ["qwen3-coder-plus", "qwen3-32b"] and alias.local_only


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "target_0"),  # no target
        ({"target_0": "qwen3-32b", "target_1": "qwen3-32b"}, "target_0"),  # twice
        ({"target_0": "nope"}, "target_0"),  # not a model
        ({"name": "qwen3-32b", "target_0": "qwen3-32b"}, "name"),  # the name is taken
        ({"name": "bad name", "target_0": "qwen3-32b"}, "name"),
    ],
)
def test_the_alias_form_shows_field_errors_and_saves_nothing(admin_client, model, data, field):
    response = alias_post(admin_client, **data)
    assert response.status_code == 400
    assert response.context["form"].errors.get(field), response.context["form"].errors
    assert not Model.objects.aliases().exists() and not AliasTarget.objects.exists()


def test_an_alias_cannot_point_at_another_alias(admin_client, model):
    alias_post(admin_client, target_0="qwen3-32b")
    response = alias_post(admin_client, name="coder2", target_0="coder")
    assert response.status_code == 400 and response.context["form"].errors.get("target_0")


def test_deleting_an_alias_asks_first_and_keeps_its_targets(admin_client, model):
    alias_post(admin_client, target_0="qwen3-32b")
    alias = Model.objects.get(name="coder")
    url = reverse("model_alias_delete", args=[alias.pk])
    page = admin_client.get(url)
    assert page.status_code == 200 and "Delete the alias coder?" in page.content.decode()
    assert admin_client.post(url).status_code == 302
    assert not Model.objects.filter(name="coder").exists() and Model.objects.filter(name="qwen3-32b").exists()


def test_deleting_a_model_says_which_aliases_stop_trying_it(admin_client, model, cloud_model):
    alias_post(admin_client, target_0="qwen3-32b", target_1="qwen3-coder-plus")
    page = admin_client.get(reverse("model_delete", args=[model.pk])).content.decode()
    assert "The aliases coder stop trying it." in page


def test_model_pages_do_not_edit_an_alias(admin_client, model):
    alias_post(admin_client, target_0="qwen3-32b")
    alias = Model.objects.get(name="coder")
    for name in ("model_edit", "model_delete"):
        assert admin_client.get(reverse(name, args=[alias.pk])).status_code == 404
    # a link that only knows "a model" (the audit log's) opens the alias page
    response = admin_client.get(reverse("model_detail", args=[alias.pk]))
    assert response.status_code == 302 and response["Location"] == reverse("model_alias_detail", args=[alias.pk])


@pytest.mark.parametrize(
    ("base_url", "locality"),
    [
        ("http://10.0.0.5:8000", "local"),
        ("http://localhost:8080", "local"),
        ("http://gpu-box.lan:8000", "local"),
        ("https://api.example.com", "external"),
    ],
)
def test_a_new_channel_is_local_or_external_by_its_address(admin_client, base_url, locality):
    payload = {"name": "c", "kind": "openai", "base_url": base_url, "locality": "", "priority": 0, "weight": 1}
    response = admin_client.post(reverse("channel_create"), {**payload, "enabled": "on"})
    assert response.status_code == 302, response.context["form"].errors
    assert Channel.objects.get(name="c").locality == locality


def test_the_admin_can_mark_a_channel_local_whatever_its_address(admin_client):
    payload = {"name": "c", "kind": "openai", "base_url": "https://gpu.example.com", "priority": 0, "weight": 1}
    admin_client.post(reverse("channel_create"), {**payload, "locality": "local", "enabled": "on"})
    assert Channel.objects.get(name="c").locality == "local"


def test_a_deployments_channel_is_local():
    from channels.services import register_served_model

    ch = register_served_model(
        channel=None,
        name="gpu-1-qwen",
        kind="vllm",
        base_url="https://gpu-1.example.com:8000",
        api_key="",
        model_name="qwen3-32b",
        upstream_model="Qwen/Qwen3-32B",
        context_window=32768,
        status_message="starting",
    )
    assert ch.locality == "local"


def test_a_developer_makes_a_key_local_only(alice_client, alice):
    response = alice_client.post(reverse("key_create"), {"owner": alice.pk, "name": "private", "local_only": "on"})
    assert response.status_code == 302
    key = Key.objects.get(name="private")
    assert key.local_only
    page = alice_client.get(reverse("key_detail", args=[key.pk])).content.decode()
    assert "local only" in page


def test_the_request_detail_page_shows_the_routing_explanation(admin_client, alice, channel):
    key, _ = issue_key(owner=alice, name="laptop")
    steps = ["alias coder -> qwen3-32b, qwen3-coder-plus", "skipped vllm-a (qwen3-32b): window 24,576 < 30,120 needed"]
    record = UsageRecord.objects.create(
        key=key, user=alice, model="coder", channel=channel, request_id="abc123", route_explanation=steps
    )
    listing = admin_client.get(reverse("usage_requests")).content.decode()
    detail_url = reverse("usage_request_detail", args=[record.pk])
    assert detail_url in listing
    assert reverse("usage_requests") in admin_client.get(reverse("usage_admin")).content.decode()
    page = admin_client.get(detail_url).content.decode()
    assert "window 24,576 &lt; 30,120 needed" in page and "vllm-a" in page


def test_developers_cannot_open_request_pages(alice_client, alice):
    record = UsageRecord.objects.create(user=alice, model="m")
    assert alice_client.get(reverse("usage_requests")).status_code == 403
    assert alice_client.get(reverse("usage_request_detail", args=[record.pk])).status_code == 403


def test_an_edit_that_sends_no_locality_keeps_it(admin_client):
    ch = Channel.objects.create(name="c", kind="openai", base_url="https://api.example.com/v1", locality="local")
    payload = {"name": "c", "kind": "openai", "base_url": "https://api.example.com", "priority": 0, "weight": 1}
    assert admin_client.post(reverse("channel_edit", args=[ch.pk]), payload).status_code == 302
    ch.refresh_from_db()
    assert ch.locality == "local"


def test_the_model_delete_page_refuses_while_a_key_is_limited_to_it_or_an_alias_has_only_it(admin_client, alice, model):
    issue_key(owner=alice, name="laptop", allowed_models=[model])
    alias_post(admin_client, target_0="qwen3-32b")
    url = reverse("model_delete", args=[model.pk])

    for response in (admin_client.get(url, follow=True), admin_client.post(url, follow=True)):
        page = response.content.decode()
        assert response.redirect_chain[-1][0] == reverse("model_detail", args=[model.pk])
        assert "Still used by key laptop of alice, limited to this model alone" in page
        assert "Still used by the aliases coder, whose only target it is" in page
    assert Model.objects.filter(pk=model.pk).exists()


def test_the_alias_delete_page_refuses_while_a_key_is_limited_to_it(admin_client, alice, model):
    alias_post(admin_client, target_0="qwen3-32b")
    alias = Model.objects.get(name="coder")
    issue_key(owner=alice, name="laptop", allowed_models=[alias])
    response = admin_client.post(reverse("model_alias_delete", args=[alias.pk]), follow=True)
    assert "Still used by key laptop of alice" in response.content.decode()
    assert Model.objects.filter(pk=alias.pk).exists()
