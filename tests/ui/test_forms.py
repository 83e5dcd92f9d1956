"""Bad input in every form: a field error, status 400, nothing changed — never a 500."""

import datetime

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from channels.models import Channel, Model, ModelRoute, RoutePrice
from channels.services import set_route_price
from hosts.models import Host
from keys.models import Key
from portal.forms import ModelMultipleChoiceField

pytestmark = pytest.mark.django_db


def field_errors(response, field):
    """The errors Django attached to `field` of the page's form."""
    form = response.context["form"]
    return form.errors.get(field, [])


# --- keys -----------------------------------------------------------------------------------


def key_post(client, **data):
    payload = {"name": "laptop", "ip_allowlist": "", "expires_at": ""}
    payload.update(data)
    return client.post(reverse("key_create"), payload)


def test_key_form_rejects_negative_and_absurd_limits(alice_client, alice):
    response = key_post(alice_client, owner=alice.pk, requests_per_minute="-5", tokens_per_month=str(10**15))
    assert response.status_code == 400
    assert field_errors(response, "requests_per_minute")
    assert field_errors(response, "tokens_per_month")
    assert not Key.objects.exists()


def test_key_form_rejects_limit_above_the_owner_ceiling(alice_client, alice):
    alice.tokens_per_day = 10_000
    alice.save()
    response = key_post(alice_client, owner=alice.pk, tokens_per_day="20000")
    assert response.status_code == 400
    assert "10,000" in " ".join(field_errors(response, "tokens_per_day"))
    assert not Key.objects.exists()


def test_a_team_name_in_the_key_forms_help_is_text_not_markup(alice_client, team):
    """Help texts are HTML; a team's name (an SSO group's, or whatever an admin typed) is escaped."""
    team.name = 'red<img src=x onerror="alert(1)">'
    team.tokens_per_day = 1000
    team.save()
    page = alice_client.get(reverse("key_create")).content.decode()
    assert "red&lt;img src=x" in page and "<img src=x" not in page


def test_key_form_rejects_expiry_in_the_past(alice_client, alice):
    past = (timezone.now() - datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    response = key_post(alice_client, owner=alice.pk, expires_at=past)
    assert response.status_code == 400
    assert field_errors(response, "expires_at") == ["The expiry must be in the future."]
    assert not Key.objects.exists()


def test_key_form_rejects_unknown_model_ids(alice_client, alice):
    response = key_post(alice_client, owner=alice.pk, allowed_models=["999999"])
    assert response.status_code == 400
    assert field_errors(response, "allowed_models")
    assert not Key.objects.exists()


def test_key_form_rejects_a_model_the_owner_may_not_use(alice_client, alice):
    allowed = Model.objects.create(name="qwen3-32b")
    secret = Model.objects.create(name="secret-model")
    alice.allowed_models.add(allowed)
    response = key_post(alice_client, owner=alice.pk, allowed_models=[str(secret.pk)])
    assert response.status_code == 400
    assert "secret-model" in " ".join(field_errors(response, "allowed_models"))
    assert not Key.objects.exists()


def test_key_form_rejects_malformed_cidr(alice_client, alice):
    response = key_post(alice_client, owner=alice.pk, ip_allowlist="10.0.0.0/8\n10.0.0.0/33")
    assert response.status_code == 400
    assert "10.0.0.0/33" in " ".join(field_errors(response, "ip_allowlist"))
    assert not Key.objects.exists()


def test_key_form_rejects_oversize_and_duplicate_names(alice_client, alice):
    response = key_post(alice_client, owner=alice.pk, name="x" * 101)
    assert response.status_code == 400 and field_errors(response, "name")
    assert key_post(alice_client, owner=alice.pk).status_code == 302
    response = key_post(alice_client, owner=alice.pk)
    assert response.status_code == 400
    assert "already has a key" in " ".join(field_errors(response, "name"))
    assert Key.objects.count() == 1


def test_developer_posting_another_users_id_as_owner_gets_a_field_error(alice_client, mallory):
    response = key_post(alice_client, owner=mallory.pk)
    assert response.status_code == 400
    assert field_errors(response, "owner") == ["You can only create keys for yourself."]
    assert not Key.objects.exists()


def test_admin_can_create_a_key_for_a_developer(admin_client, alice):
    response = key_post(admin_client, owner=alice.pk, name="ci", tokens_per_day="5000")
    assert response.status_code == 302
    key = Key.objects.get()
    assert key.owner == alice and key.tokens_per_day == 5000


def test_key_form_normalises_cidrs_and_accepts_a_future_expiry(alice_client, alice):
    future = (timezone.now() + datetime.timedelta(days=3)).strftime("%Y-%m-%dT%H:%M")
    response = key_post(alice_client, owner=alice.pk, ip_allowlist="10.1.2.3/8, 192.168.1.20", expires_at=future)
    assert response.status_code == 302
    key = Key.objects.get()
    assert key.ip_allowlist == ["10.0.0.0/8", "192.168.1.20/32"]
    assert key.expires_at > timezone.now()


def test_blank_limits_take_the_owners_key_defaults(alice_client, alice):
    alice.key_defaults = {"tokens_per_day": 5000}
    alice.save()
    assert key_post(alice_client, owner=alice.pk).status_code == 302
    assert Key.objects.get().tokens_per_day == 5000


def test_rotate_rejects_an_unknown_grace_choice(alice_client, alice):
    from keys.services import issue_key

    key, _ = issue_key(owner=alice, name="laptop")
    response = alice_client.post(reverse("key_rotate", args=[key.pk]), {"grace": "99999999"})
    assert response.status_code == 400
    assert Key.objects.count() == 1


# --- hosts ----------------------------------------------------------------------------------


def host_post(client, url=None, **data):
    payload = {
        "name": "gpu-1",
        "address": "10.0.0.5",
        "ssh_port": "22",
        "username": "ubuntu",
        "private_key": "",
        "labels": "",
        "notes": "",
    }
    payload.update(data)
    return client.post(url or reverse("host_create"), payload)


@pytest.mark.parametrize(
    "field,value",
    [
        ("address", "not an address!"),
        ("ssh_port", "70000"),
        ("ssh_port", "-1"),
        ("username", "Root User"),
        ("name", "x" * 101),
        ("notes", "x" * 5001),
        ("labels", "ok, not ok!"),
        ("private_key", "hello, I am not a key"),
    ],
)
def test_host_form_rejects_bad_values(admin_client, field, value):
    response = host_post(admin_client, **{field: value})
    assert response.status_code == 400
    assert field_errors(response, field), field
    assert not Host.objects.exists()


def test_a_secret_that_comes_back_empty_with_another_fields_error_asks_to_be_entered_again(admin_client):
    """Regression (probe): a pasted private key came back empty beside the port's error, its help
    still saying "not set"; fixing the port alone saved the host without its key."""
    import asyncssh

    pem = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    response = host_post(admin_client, private_key=pem, ssh_port="70000")
    assert response.status_code == 400 and field_errors(response, "ssh_port")
    assert "a secret is never sent back" in " ".join(field_errors(response, "private_key"))
    assert pem.splitlines()[1] not in response.content.decode()  # (still not sent back)
    response = host_post(admin_client, ssh_port="70000")  # nothing pasted: nothing to ask again
    assert not field_errors(response, "private_key")
    channel = {"name": "cloud", "kind": "openai", "base_url": "not a url", "api_key": "sk-pasted"}
    response = admin_client.post(reverse("channel_create"), channel)
    assert response.status_code == 400 and "a secret is never sent back" in " ".join(field_errors(response, "api_key"))
    assert "sk-pasted" not in response.content.decode()


def test_host_form_rejects_duplicate_names(admin_client, host):
    response = host_post(admin_client, name=host.name)
    assert response.status_code == 400 and field_errors(response, "name")
    assert Host.objects.count() == 1


def test_host_private_key_is_write_only_and_kept_when_blank(admin_client):
    import asyncssh

    pem = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    assert host_post(admin_client, private_key=pem, labels="h100, rack-2").status_code == 302
    host = Host.objects.get()
    assert host.private_key.strip() == pem.strip() and host.labels == ["h100", "rack-2"]
    edit_url = reverse("host_edit", args=[host.pk])
    page = admin_client.get(edit_url).content.decode()
    assert "PRIVATE KEY-----\n" not in page and pem.splitlines()[1] not in page
    assert "set</strong>" in page
    assert host_post(admin_client, url=edit_url, name="gpu-one").status_code == 302
    host.refresh_from_db()
    assert host.name == "gpu-one" and host.private_key.strip() == pem.strip()
    assert host_post(admin_client, url=edit_url, name="gpu-one", clear_private_key="on").status_code == 302
    host.refresh_from_db()
    assert host.private_key == ""


def test_a_host_form_sent_back_with_an_error_never_holds_the_private_key(admin_client):
    import asyncssh

    pem = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    response = host_post(admin_client, private_key=pem, gpu_hour_cost="-3")
    assert response.status_code == 400 and field_errors(response, "gpu_hour_cost")
    assert pem.splitlines()[1] not in response.content.decode()


# --- channels -------------------------------------------------------------------------------


def channel_post(client, url=None, follow=False, **data):
    payload = {
        "name": "vllm-a",
        "kind": "vllm",
        "base_url": "http://10.0.0.5:8000",
        "api_key": "",
        "priority": "0",
        "weight": "1",
        "enabled": "on",
        "notes": "",
    }
    payload.update(data)
    return client.post(url or reverse("channel_create"), payload, follow=follow)


@pytest.mark.parametrize(
    "field,value",
    [
        ("base_url", "ftp://example.com"),
        ("base_url", "example.com/v1"),
        ("base_url", "https://user:pw@example.com/v1"),
        ("base_url", "https://exa mple.com"),
        ("base_url", ""),
        ("weight", "0"),
        ("priority", "5000"),
        ("name", "x" * 101),
        ("kind", "carrier-pigeon"),
        ("api_key", "sk-abc def"),
        ("api_key", "ключ-секрет"),
    ],
)
def test_channel_form_rejects_bad_values(admin_client, field, value):
    response = channel_post(admin_client, **{field: value})
    assert response.status_code == 400
    assert field_errors(response, field), field
    assert not Channel.objects.exists()


def test_channel_form_rejects_duplicate_names(admin_client, channel):
    response = channel_post(admin_client, name=channel.name)
    assert response.status_code == 400 and field_errors(response, "name")
    assert field_errors(response, "name") == [f"“{channel.name}” is already taken; choose another."]
    form = {"name": channel.name, "kind": "vllm", "base_url": "http://10.0.0.5:8000", "priority": "0", "weight": "1"}
    chinese = admin_client.post(reverse("channel_create"), form, headers={"accept-language": "zh-hans"})
    assert field_errors(chinese, "name") == [f"“{channel.name}”已被占用，请换一个。"]


def test_channel_base_url_is_normalised_and_the_flash_says_what_changed(admin_client):
    response = channel_post(admin_client, base_url="  https://x.example/api/v1/?utm_source=docs ", follow=True)
    channel = Channel.objects.get()
    assert channel.base_url == "https://x.example/api/v1"
    text = response.content.decode()
    assert "We stored https://x.example/api/v1" in text
    assert "dropped the query string" in text


def test_channel_api_key_is_write_only_kept_when_blank_and_resets_status_when_replaced(admin_client):
    assert channel_post(admin_client, api_key="sk-first-secret").status_code == 302
    channel = Channel.objects.get()
    Channel.objects.filter(pk=channel.pk).update(status="credentials_rejected", status_message="401")
    edit_url = reverse("channel_edit", args=[channel.pk])
    page = admin_client.get(edit_url).content.decode()
    assert "sk-first-secret" not in page
    assert channel_post(admin_client, url=edit_url, priority="5").status_code == 302
    channel.refresh_from_db()
    assert channel.api_key == "sk-first-secret" and channel.status == "credentials_rejected"
    assert channel_post(admin_client, url=edit_url, api_key="sk-second").status_code == 302
    channel.refresh_from_db()
    assert channel.api_key == "sk-second" and channel.status == "unknown"
    detail = admin_client.get(reverse("channel_detail", args=[channel.pk])).content.decode()
    assert "sk-second" not in detail


# --- models ---------------------------------------------------------------------------------


def model_post(client, url=None, routes=(), initial=0, **data):
    payload = {
        "name": "qwen3-32b",
        "display_name": "",
        "description": "",
        "enabled": "on",
        "routes-TOTAL_FORMS": str(len(routes)),
        "routes-INITIAL_FORMS": str(initial),
        "routes-MIN_NUM_FORMS": "0",
        "routes-MAX_NUM_FORMS": "1000",
    }
    for i, route in enumerate(routes):
        for k, v in route.items():
            payload[f"routes-{i}-{k}"] = v
    payload.update(data)
    return client.post(url or reverse("model_create"), payload)


def test_model_form_creates_routes_with_alias_and_limits(admin_client, channel):
    route = {
        "channel": channel.pk,
        "upstream_model": "Qwen/Qwen3-32B",
        "context_window": "32768",
        "max_output_tokens": "8192",
        "enabled": "on",
    }
    assert model_post(admin_client, routes=[route]).status_code == 302
    r = ModelRoute.objects.get()
    assert (r.model.name, r.upstream_id, r.context_window, r.max_output_tokens) == (
        "qwen3-32b",
        "Qwen/Qwen3-32B",
        32768,
        8192,
    )


def test_a_model_form_sent_twice_adds_its_new_route_once(admin_client, channel):
    """The edit page posted again (a double click, the back button, a second admin's stale page):
    its new row names a channel the model got a route to meanwhile. A field error, not a 500."""
    assert model_post(admin_client).status_code == 302
    model = Model.objects.get()
    url = reverse("model_edit", args=[model.pk])
    row = {"channel": channel.pk, "upstream_model": "Qwen/Qwen3-32B", "context_window": "32768", "enabled": "on"}
    assert model_post(admin_client, url=url, routes=[row]).status_code == 302
    again = model_post(admin_client, url=url, routes=[row])
    assert again.status_code == 400 and "already has a route to this channel" in again.content.decode()
    assert ModelRoute.objects.filter(model=model).count() == 1


def test_model_form_sets_the_balancing_policy_and_rejects_unknown_ones(admin_client):
    assert model_post(admin_client, balance="least_busy").status_code == 302
    model = Model.objects.get()
    assert model.balance == "least_busy"
    url = reverse("model_edit", args=[model.pk])
    assert model_post(admin_client, url=url).status_code == 302  # not sent: kept
    assert Model.objects.get().balance == "least_busy"
    response = model_post(admin_client, url=url, balance="round_robin")
    assert response.status_code == 400 and field_errors(response, "balance")


def test_an_admin_marks_an_embedding_model_and_the_pages_say_so_in_chinese(admin_client):
    assert model_post(admin_client, name="bge-m3", kind="embedding").status_code == 302
    model = Model.objects.get()
    assert model.kind == "embedding"
    url = reverse("model_edit", args=[model.pk])
    assert model_post(admin_client, url=url, name="bge-m3").status_code == 302  # not sent: kept
    assert Model.objects.get().kind == "embedding"
    response = model_post(admin_client, url=url, name="bge-m3", kind="rerank")
    assert response.status_code == 400 and field_errors(response, "kind")
    zh = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    listing = admin_client.get(reverse("model_list"), **zh).content.decode()
    assert "嵌入模型" in listing and "?model=bge-m3" not in listing  # no playground link: it cannot chat
    detail = admin_client.get(reverse("model_detail", args=[model.pk]), **zh).content.decode()
    assert "<dt>类型</dt><dd>嵌入模型</dd>" in detail


@pytest.mark.parametrize("name", ["bad name with spaces", "x" * 129, "-leading-dash"])
def test_model_form_rejects_bad_names(admin_client, name):
    response = model_post(admin_client, name=name)
    assert response.status_code == 400 and field_errors(response, "name")
    assert not Model.objects.exists()


def test_model_form_rejects_duplicate_names(admin_client, model):
    response = model_post(admin_client, name=model.name)
    assert response.status_code == 400 and field_errors(response, "name")


def test_model_form_rejects_bad_routes_and_saves_nothing(admin_client, channel):
    tiny = {"channel": channel.pk, "context_window": "10", "max_output_tokens": "-1", "enabled": "on"}
    response = model_post(admin_client, routes=[tiny])
    assert response.status_code == 400
    errors = response.context["formset"].errors[0]
    assert "context_window" in errors and "max_output_tokens" in errors
    twice = {"channel": channel.pk, "enabled": "on"}
    response = model_post(admin_client, routes=[twice, twice])
    assert response.status_code == 400
    assert not Model.objects.exists() and not ModelRoute.objects.exists()


def priced(route):
    """Two prices for `route`: last month's and today's (its price history)."""
    set_route_price(route, input=1, output=2, effective_from=timezone.now() - datetime.timedelta(days=30))
    set_route_price(route, input=3, output=4)
    return set(RoutePrice.objects.filter(route=route).values_list("pk", flat=True))


def test_a_route_removed_and_added_again_on_the_model_form_keeps_its_prices(admin_client, model, channel):
    """Remove a row and name its channel again in the empty row (to start the row afresh): the
    channel stays, so its route is updated in place and its price history survives."""
    route = ModelRoute.objects.get(model=model)
    history = priced(route)
    url = reverse("model_edit", args=[model.pk])
    rows = [
        {"id": route.pk, "channel": channel.pk, "upstream_model": route.upstream_model, "DELETE": "on"},
        {"channel": channel.pk, "upstream_model": "Qwen/Qwen3-32B-AWQ", "context_window": "40960", "enabled": "on"},
    ]
    assert model_post(admin_client, url=url, name=model.name, initial=1, routes=rows).status_code == 302
    kept = ModelRoute.objects.get(model=model)
    assert (kept.pk, kept.upstream_model, kept.context_window) == (route.pk, "Qwen/Qwen3-32B-AWQ", 40960)
    assert set(RoutePrice.objects.filter(route=kept).values_list("pk", flat=True)) == history

    # An ordinary edit of the row keeps them too.
    row = {"id": route.pk, "channel": channel.pk, "upstream_model": "Qwen/Qwen3-32B", "enabled": "on"}
    assert model_post(admin_client, url=url, name=model.name, initial=1, routes=[row]).status_code == 302
    assert set(RoutePrice.objects.filter(route__model=model).values_list("pk", flat=True)) == history

    # Two rows swapped: each channel keeps its route, with the values of the row that names it.
    cloud = Channel.objects.create(name="cloud", base_url="https://cloud.test/v1")
    other = ModelRoute.objects.create(model=model, channel=cloud, upstream_model="qwen3-cloud")
    rows = [
        {"id": route.pk, "channel": cloud.pk, "upstream_model": "qwen3-cloud-2", "enabled": "on"},
        {"id": other.pk, "channel": channel.pk, "upstream_model": "Qwen/Qwen3-32B-FP8", "enabled": "on"},
    ]
    assert model_post(admin_client, url=url, name=model.name, initial=2, routes=rows).status_code == 302
    routes = {r.channel.name: (r.pk, r.upstream_model) for r in ModelRoute.objects.filter(model=model)}
    assert routes == {"vllm-a": (route.pk, "Qwen/Qwen3-32B-FP8"), "cloud": (other.pk, "qwen3-cloud-2")}
    assert set(RoutePrice.objects.filter(route=route).values_list("pk", flat=True)) == history


def test_removing_a_priced_route_on_the_model_form_asks_first(admin_client, model, channel):
    route = ModelRoute.objects.get(model=model)
    history = priced(route)
    cloud = Channel.objects.create(name="cloud", base_url="https://cloud.test/v1")
    url = reverse("model_edit", args=[model.pk])
    page = admin_client.get(url).content.decode()
    assert "The routes to vllm-a have prices." in page and 'name="remove_priced_routes"' in page

    removed = {"id": route.pk, "channel": channel.pk, "enabled": "on", "DELETE": "on"}
    moved = {"id": route.pk, "channel": cloud.pk, "enabled": "on"}  # the row now names another channel
    for row in (removed, moved):
        response = model_post(admin_client, url=url, name=model.name, description="edited", initial=1, routes=[row])
        assert response.status_code == 400
        assert "The routes to vllm-a have prices" in " ".join(field_errors(response, "remove_priced_routes"))
        assert list(ModelRoute.objects.filter(model=model)) == [route]  # nothing saved
        assert Model.objects.get(pk=model.pk).description == ""
        assert set(RoutePrice.objects.values_list("pk", flat=True)) == history

    response = model_post(admin_client, url=url, name=model.name, initial=1, routes=[moved], remove_priced_routes="on")
    assert response.status_code == 302
    assert [r.channel for r in ModelRoute.objects.filter(model=model)] == [cloud]
    assert not RoutePrice.objects.exists()  # cloud's route is a new one: vllm-a's prices are not its


def test_deleting_a_model_or_channel_says_which_priced_routes_take_their_history_along(admin_client, model, channel):
    notice = "These routes have prices; their price history is deleted with them: qwen3-32b → vllm-a."
    for name, pk in (("model_delete", model.pk), ("channel_delete", channel.pk)):
        assert "These routes have prices" not in admin_client.get(reverse(name, args=[pk])).content.decode()
    priced(ModelRoute.objects.get(model=model))
    for name, pk in (("model_delete", model.pk), ("channel_delete", channel.pk)):
        assert notice in admin_client.get(reverse(name, args=[pk])).content.decode()


# --- users and tokens -----------------------------------------------------------------------


def test_user_create_rejects_duplicate_and_bad_usernames(admin_client, alice):
    for username in ("alice", "bad name!", "x" * 151):
        response = admin_client.post(reverse("user_create"), {"username": username, "role": "developer", "email": ""})
        assert response.status_code == 400 and field_errors(response, "username"), username
    response = admin_client.post(reverse("user_create"), {"username": "bob", "role": "overlord", "email": "x"})
    assert response.status_code == 400 and field_errors(response, "role") and field_errors(response, "email")
    assert User.objects.count() == 2


def user_edit_post(client, user, **data):
    payload = {"email": user.email, "first_name": "", "last_name": "", "role": user.role}
    payload.update(data)
    return client.post(reverse("user_edit", args=[user.pk]), payload)


def test_user_edit_rejects_negative_absurd_limits_and_defaults_above_the_ceiling(admin_client, alice):
    response = user_edit_post(
        admin_client,
        alice,
        requests_per_minute="-1",
        tokens_per_month=str(10**13),
        tokens_per_day="1000",
        default_tokens_per_day="2000",
    )
    assert response.status_code == 400
    assert field_errors(response, "requests_per_minute") and field_errors(response, "tokens_per_month")
    assert field_errors(response, "default_tokens_per_day")
    alice.refresh_from_db()
    assert alice.requests_per_minute is None and alice.tokens_per_day is None and alice.key_defaults == {}


def test_user_edit_saves_limits_defaults_and_allowed_models(admin_client, alice, model):
    response = user_edit_post(
        admin_client, alice, tokens_per_day="100000", default_tokens_per_day="20000", allowed_models=[model.pk]
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.tokens_per_day == 100000 and alice.key_defaults == {"tokens_per_day": 20000}
    assert list(alice.allowed_models.all()) == [model]


def test_admin_cannot_demote_or_deactivate_themselves(admin_client, admin):
    response = user_edit_post(admin_client, admin, role="developer")
    assert response.status_code == 400 and field_errors(response, "role")
    response = admin_client.post(reverse("user_activation", args=[admin.pk]))
    assert response.status_code == 302
    admin.refresh_from_db()
    assert admin.is_admin


def test_token_form_rejects_blank_duplicate_and_bad_expiry(alice_client, alice, alice_token):
    for data in ({"name": ""}, {"name": alice_token.name}, {"name": "x", "expires_in_days": "0"}, {"name": "y" * 101}):
        response = alice_client.post(reverse("token_create"), data)
        assert response.status_code == 400, data
    assert alice.api_tokens.count() == 1


def test_password_change_rejects_wrong_old_password(alice_client, alice):
    response = alice_client.post(
        reverse("password_change"),
        {"old_password": "wrong", "new_password1": "n3w-pass-word-x", "new_password2": "n3w-pass-word-x"},
    )
    assert response.status_code == 200 and response.context["form"].errors.get("old_password")
    alice.refresh_from_db()
    assert alice.check_password("alice-pass-123")


def test_bad_filter_values_show_an_empty_list_not_a_500(admin_client, alice_key):
    assert admin_client.get(reverse("key_all") + "?owner=abc").status_code == 200
    assert admin_client.get(reverse("audit_log") + "?created_after=yesterday&action=nope").status_code == 200
    assert admin_client.get(reverse("key_all") + "?page=99999").status_code == 200


def test_key_edit_applies_the_same_rules_and_never_changes_the_owner(alice_client, alice, mallory):
    from keys.services import issue_key

    alice.tokens_per_day = 10_000
    alice.save()
    key, _ = issue_key(owner=alice, name="laptop")
    issue_key(owner=alice, name="ci")
    url = reverse("key_edit", args=[key.pk])
    base = {"owner": mallory.pk, "name": "laptop", "ip_allowlist": "", "expires_at": ""}
    for bad in (
        {"name": "ci"},
        {"tokens_per_day": "20000"},
        {"ip_allowlist": "300.1.1.1"},
        {"requests_per_minute": "0"},
        {"expires_at": "2001-01-01T00:00"},
    ):
        response = alice_client.post(url, {**base, **bad})
        assert response.status_code == 400, bad
    key.refresh_from_db()
    assert (key.name, key.tokens_per_day, key.ip_allowlist, key.owner) == ("laptop", None, [], alice)
    response = alice_client.post(
        url, {**base, "name": "laptop-2", "tokens_per_day": "5000", "ip_allowlist": "10.0.0.0/8"}
    )
    assert response.status_code == 302
    key.refresh_from_db()
    assert (key.name, key.tokens_per_day, key.ip_allowlist, key.owner) == ("laptop-2", 5000, ["10.0.0.0/8"], alice)


def test_local_only_an_admin_set_in_the_form_stays_on_when_the_developer_edits(admin, alice):
    from django.test import Client

    admin_client, alice_client = Client(), Client()
    admin_client.force_login(admin)
    alice_client.force_login(alice)
    created = admin_client.post(
        reverse("key_create"),
        {"owner": alice.pk, "name": "private", "ip_allowlist": "", "expires_at": "", "local_only": "on"},
    )
    assert created.status_code in (200, 302)
    key = Key.objects.get(name="private")
    assert key.local_only and key.admin_ceilings == {"local_only": 1}
    url = reverse("key_edit", args=[key.pk])
    page = alice_client.get(url).content.decode()
    assert "only an admin can lift it" in page
    # The box is disabled for her; a hand-made POST without it changes nothing.
    response = alice_client.post(url, {"name": "private-2", "ip_allowlist": "", "expires_at": ""})
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.name == "private-2" and key.local_only
    admin_client.post(url, {"name": "private-2", "ip_allowlist": "", "expires_at": ""})  # the admin lifts it
    key.refresh_from_db()
    assert not key.local_only and key.admin_ceilings == {}


def test_restrictions_an_admin_set_are_shown_on_the_owners_form_who_may_go_back_up_to_them(
    admin, alice, channel, model
):
    """The owner's form says which restrictions an admin set and to what (she learnt it from a
    refused save), and after tightening one she may loosen it again as far as the admin's value."""
    from django.test import Client

    second = Model.objects.create(name="m-second")
    ModelRoute.objects.create(model=second, channel=channel, upstream_model="m-second")
    admin_client, alice_client = Client(), Client()
    admin_client.force_login(admin)
    alice_client.force_login(alice)
    issued = {
        "name": "issued",
        "allowed_models": [model.pk, second.pk],
        "ip_allowlist": "10.0.0.0/8",
        "expires_at": "2099-01-01T12:00",
        "tokens_per_day": "1000",
    }
    assert admin_client.post(reverse("key_create"), {**issued, "owner": alice.pk}).status_code == 302
    key = Key.objects.get(name="issued")
    url = reverse("key_edit", args=[key.pk])

    page = alice_client.get(url).content.decode()
    assert "Set by an admin: only m-second, qwen3-32b; you can remove models, not add any or allow all." in page
    assert "Set by an admin: only from 10.0.0.0/8; you can narrow them, not widen them." in page
    assert "Set by an admin: expires by 2099-01-01 12:00 UTC; you can bring it forward, not postpone" in page
    assert 'max="2099-01-01T12:00"' in page
    assert "Set by an admin: at most 1,000" in page

    tightened = {
        "name": "issued",
        "allowed_models": [model.pk],
        "ip_allowlist": "10.1.0.0/16",
        "expires_at": "2098-06-01T00:00",
        "tokens_per_day": "500",
    }
    assert alice_client.post(url, tightened).status_code == 302
    assert "Set by an admin: only from 10.0.0.0/8" in alice_client.get(url).content.decode()  # still the admin's
    assert alice_client.post(url, issued).status_code == 302  # back up to exactly what the admin set
    key.refresh_from_db()
    assert (key.ip_allowlist, key.expires_at, key.tokens_per_day, set(key.allowed_models.all())) == (
        ["10.0.0.0/8"],
        datetime.datetime(2099, 1, 1, 12, tzinfo=datetime.UTC),
        1000,
        {model, second},
    )
    for past in ({"ip_allowlist": "10.0.0.0/7"}, {"expires_at": "2099-01-01T12:01"}, {"allowed_models": []}):
        refused = alice_client.post(url, {**issued, **past})
        assert refused.status_code == 400, past
    assert (
        "An admin restricted the addresses of this key"
        in alice_client.post(url, {**issued, "ip_allowlist": "0.0.0.0/0"}).content.decode()
    )


def test_a_restriction_recorded_before_its_value_was_kept_binds_to_the_keys_value(alice, alice_client):
    from keys.services import issue_key

    key = issue_key(owner=alice, name="old", ip_allowlist=["10.0.0.0/8"])[0]
    Key.objects.filter(pk=key.pk).update(admin_ceilings={"ip_allowlist": 1})  # as stored until now
    url = reverse("key_edit", args=[key.pk])
    assert "Set by an admin: only from 10.0.0.0/8" in alice_client.get(url).content.decode()
    assert alice_client.post(url, {"name": "old", "ip_allowlist": "0.0.0.0/0"}).status_code == 400
    assert alice_client.post(url, {"name": "old", "ip_allowlist": "10.1.0.0/16"}).status_code == 302
    key.refresh_from_db()
    assert key.admin_ceilings == {"ip_allowlist": ["10.0.0.0/8"]}  # the value it bound to, kept
    assert alice_client.post(url, {"name": "old", "ip_allowlist": "10.0.0.0/8"}).status_code == 302


def test_editing_an_expired_key_keeps_its_expiry_without_complaint(alice_client, alice):
    from keys.services import issue_key

    key, _ = issue_key(owner=alice, name="old")
    Key.objects.filter(pk=key.pk).update(expires_at=timezone.now() - datetime.timedelta(days=2))
    key.refresh_from_db()
    response = alice_client.post(
        reverse("key_edit", args=[key.pk]),
        {"name": "old-renamed", "ip_allowlist": "", "expires_at": key.expires_at.strftime("%Y-%m-%dT%H:%M")},
    )
    assert response.status_code == 302
    updated = Key.objects.get(pk=key.pk)
    assert updated.name == "old-renamed" and updated.expires_at == key.expires_at


def test_a_superuser_cannot_be_silently_demoted(client, admin, django_user_model):
    other = django_user_model.objects.create_user(username="root2", password="x-pass-123456", role="admin")
    client.force_login(other)
    response = user_edit_post(client, admin, role="developer")
    assert response.status_code == 400 and field_errors(response, "role")


def test_base_url_preview_says_what_will_be_stored(admin_client, client, alice):
    url = reverse("channel_base_url_preview")
    page = admin_client.get(url, {"base_url": " https://x.example/api/?utm_source=a"}).content.decode()
    assert "<code>https://x.example/api/v1</code>" in page and "dropped the query string" in page
    page = admin_client.get(url, {"base_url": "ftp://x"}).content.decode()
    assert "field-error" in page and "http" in page
    assert admin_client.get(url).content == b""
    client.force_login(alice)
    assert client.get(url, {"base_url": "https://x"}).status_code == 403


# --- ids typed or edited by hand --------------------------------------------------------------

HUGE_ID = "9" * 23  # past any primary key: SQLite's driver raised OverflowError in the lookup
NOT_AN_INT = "²"  # `str.isdigit()` says yes, `int()` says no


@pytest.mark.parametrize("value", [HUGE_ID, NOT_AN_INT])
@pytest.mark.parametrize("page", ["download_list:host", "key_create:owner", "playground:channel"])
def test_an_id_in_the_address_that_is_no_id_is_ignored(admin_client, page, value):
    name, parameter = page.split(":")
    response = admin_client.get(reverse(name), {parameter: value})
    assert response.status_code == 200


def test_an_id_past_any_key_is_refused_before_the_query(django_assert_num_queries):
    """The SQLite overflow cannot show on PostgreSQL, where CI runs: what can is that the id never
    reaches a query (Django's field sends it in an `__in` lookup)."""
    field = ModelMultipleChoiceField(queryset=Model.objects.all())
    with django_assert_num_queries(0), pytest.raises(ValidationError) as caught:
        field.clean([HUGE_ID])
    assert caught.value.code == "invalid_choice"


@pytest.mark.parametrize("value", [HUGE_ID, NOT_AN_INT])
def test_an_unknown_model_id_in_the_key_form_is_a_field_error(alice_client, alice, value):
    response = key_post(alice_client, owner=alice.pk, allowed_models=[value])
    assert response.status_code == 400
    assert "Unknown model" in " ".join(field_errors(response, "allowed_models"))
    assert not Key.objects.exists()


@pytest.mark.parametrize("value", [HUGE_ID, NOT_AN_INT])
def test_an_unknown_model_id_in_the_team_and_user_forms_is_a_field_error(admin_client, team, alice, value):
    for url in (reverse("team_edit", args=[team.pk]), reverse("user_edit", args=[alice.pk])):
        page = admin_client.get(url)
        data = {k: v for k, v in page.context["form"].initial.items() if v is not None and not isinstance(v, list)}
        response = admin_client.post(url, {**data, "allowed_models": [value]})
        assert response.status_code == 400, url
        assert field_errors(response, "allowed_models"), url


@pytest.mark.parametrize("value", [HUGE_ID, NOT_AN_INT])
def test_a_payload_logging_policy_for_an_unknown_user_is_a_field_error(admin_client, value):
    response = admin_client.post(reverse("request_log_list"), {"user": value, "enabled": "on", "retention_days": "7"})
    assert response.status_code == 400
    assert field_errors(response, "user")


@pytest.mark.parametrize("value", [HUGE_ID, NOT_AN_INT])
def test_request_logs_filtered_by_a_key_that_is_no_id_find_none(admin_client, value):
    response = admin_client.get(reverse("request_log_list"), {"key": value})
    assert response.status_code == 200
    assert list(response.context["payloads"]) == []


def test_a_yes_no_filter_keeps_its_translated_select_and_says_what_it_cannot_read(admin_client, alice, mallory):
    alice.is_active = False
    alice.save()
    page = admin_client.get(reverse("user_list"), {"is_active": "false"}, headers={"accept-language": "zh-hans"})
    assert [u.username for u in page.context["object_list"]] == ["alice"]
    select = page.context["filter"].form["is_active"]
    assert [str(label) for _, label in select.field.widget.choices] == ["任意", "是", "否"]
    assert 'value="false" selected' in str(select)
    page = admin_client.get(reverse("user_list"), {"is_active": "maybe"})
    assert page.status_code == 200 and not page.context["object_list"]
    assert page.context["filter"].form.errors == {"is_active": ["Enter true or false (or 1 or 0, yes or no)."]}
