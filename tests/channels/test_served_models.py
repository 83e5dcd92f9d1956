"""Channel → models in one click: the page lists what the upstream's /v1/models reports (a real
HTTP server on 127.0.0.1), with the served context window prefilled; one POST adds model and route."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse

from channels.models import Channel, Model, ModelRoute
from channels.services import save_alias, suggest_public_name
from tests.fakes.upstream import FakeUpstream

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
FAST = override_settings(PORTAL_PROBE_TIMEOUT=2.0, PORTAL_PROBE_CONNECT_TIMEOUT=1.0)


@pytest.fixture
def upstream():
    up = FakeUpstream(models=["Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B"], max_model_len=32768).start()
    yield up
    up.stop()


@FAST
def test_it_lists_the_served_models_and_adds_one_with_its_route(admin_client, upstream):
    channel = Channel.objects.create(name="vllm-a", kind="vllm", base_url=upstream.base_url)
    url = reverse("channel_served_models", args=[channel.pk])
    page = admin_client.get(url).content.decode()
    assert "Qwen/Qwen3-32B" in page and "meta-llama/Llama-3.1-8B" in page
    assert 'value="qwen3-32b"' in page and 'value="32768"' in page  # name suggested, context prefilled

    rows = {"Qwen/Qwen3-32B": "m0", "meta-llama/Llama-3.1-8B": "m1"}
    prefix = rows["Qwen/Qwen3-32B"]
    r = admin_client.post(
        url,
        {
            "prefix": prefix,
            f"{prefix}-upstream_model": "Qwen/Qwen3-32B",
            f"{prefix}-name": "qwen3-32b",
            f"{prefix}-context_window": "32768",
        },
    )
    assert r.status_code == 302 and r.url == url
    route = ModelRoute.objects.get()
    assert (route.model.name, route.channel, route.upstream_model, route.context_window) == (
        "qwen3-32b",
        channel,
        "Qwen/Qwen3-32B",
        32768,
    )
    page = admin_client.get(url).content.decode()
    assert "Routed as" in page and page.count("Add model</button>") == 1

    # Bad input is a field error on its row, not a 500; nothing is saved.
    bad = admin_client.post(
        url,
        {
            "prefix": "m1",
            "m1-upstream_model": "meta-llama/Llama-3.1-8B",
            "m1-name": "no spaces",
            "m1-context_window": "5",
        },
    )
    assert bad.status_code == 400
    html = bad.content.decode()
    assert "Use letters, digits" in html and "greater than or equal to 256" in html
    assert Model.objects.count() == 1

    # An alias's name: refused on its row (an alias has targets, not routes: the gateway would
    # never use one, and no page would show it).
    save_alias(name="fast", targets=["qwen3-32b"])
    aliased = admin_client.post(
        url,
        {"prefix": "m1", "m1-upstream_model": "meta-llama/Llama-3.1-8B", "m1-name": "fast", "m1-context_window": ""},
    )
    assert aliased.status_code == 400 and "fast is an alias" in aliased.content.decode()
    assert ModelRoute.objects.count() == 1


@FAST
def test_llamacpp_reports_its_context_from_props(admin_client):
    up = FakeUpstream(models=["tiny"], max_model_len=4096, flavour="llamacpp").start()
    try:
        channel = Channel.objects.create(name="llama", kind="llamacpp", base_url=up.base_url)
        page = admin_client.get(reverse("channel_served_models", args=[channel.pk])).content.decode()
    finally:
        up.stop()
    assert 'value="4096"' in page


@FAST
def test_an_unreachable_upstream_is_said_plainly(admin_client):
    channel = Channel.objects.create(name="gone", kind="vllm", base_url="http://127.0.0.1:9/v1")
    r = admin_client.get(reverse("channel_served_models", args=[channel.pk]))
    assert r.status_code == 200 and "Could not list the upstream" in r.content.decode()


def test_developers_cannot_list_or_add(alice_client):
    channel = Channel.objects.create(name="x", kind="vllm", base_url="http://127.0.0.1:9/v1")
    assert alice_client.get(reverse("channel_served_models", args=[channel.pk])).status_code == 403
    assert alice_client.post(reverse("channel_served_models", args=[channel.pk])).status_code == 403


@pytest.mark.parametrize(
    ("upstream_id", "name"),
    [("Qwen/Qwen3-32B", "qwen3-32b"), ("/models/tiny-Q4_K_M.gguf", "tiny-q4_k_m"), ("gpt 4o", "gpt-4o")],
)
def test_the_public_name_suggested_is_a_valid_model_name(upstream_id, name):
    assert suggest_public_name(upstream_id) == name
    Model(name=name).full_clean()


def launch(channel, model_name):
    """What a deployment's launch job registers: `channel` (None: a new one) serving `model_name`."""
    from channels.services import register_served_model

    return register_served_model(
        channel=channel,
        name="gpu-1",
        kind="vllm",
        base_url="http://127.0.0.1:8000",
        api_key="",
        model_name=model_name,
        upstream_model=model_name,
        context_window=8192,
        status_message="starting",
    )


def test_a_relaunch_under_another_name_keeps_the_old_routes_price_history():
    """Regression (probe): a deployment registered again with another served model deleted the
    route to the model it served before, and with it the prices an admin had set on that route."""
    import datetime as dt

    from django.utils import timezone

    from channels.models import RoutePrice

    channel = launch(None, "qwen3-8b")
    priced = ModelRoute.objects.get(channel=channel)
    RoutePrice.objects.create(route=priced, effective_from=timezone.now() - dt.timedelta(days=30), input=1, output=2)
    RoutePrice.objects.create(route=priced, input=2, output=3)
    launch(channel, "scratch")  # an unpriced route…
    launch(channel, "llama-8b")  # …goes when the server moves on; the priced one stays, off

    routes = {r.model.name: r.enabled for r in ModelRoute.objects.filter(channel=channel)}
    assert routes == {"qwen3-8b": False, "llama-8b": True}
    assert RoutePrice.objects.filter(route=priced).count() == 2

    launch(channel, "qwen3-8b")  # back under the old name: the same route, its prices with it
    priced.refresh_from_db()
    assert priced.enabled and RoutePrice.objects.filter(route=priced).count() == 2
    assert {r.model.name: r.enabled for r in ModelRoute.objects.filter(channel=channel)} == {"qwen3-8b": True}


def test_a_stopped_deployments_channel_is_not_reported_healthy():
    """Regression (probe): after a stop, /api/health/channels/ said `healthy` (its last probe) with
    `enabled: false`, for a server that was gone."""
    from rest_framework.test import APIClient

    from accounts.models import User
    from channels.models import StatusChange
    from channels.services import disable_served_channel

    channel = launch(None, "qwen3-8b")
    Channel.objects.filter(pk=channel.pk).update(status="healthy")
    disable_served_channel(channel.pk, status_message="Deployment gpu-1 was stopped; launch it to re-enable.")
    api = APIClient()
    api.force_authenticate(User.objects.create_user("root", password="x", role="admin"))
    row = api.get(f"/api/health/channels/{channel.pk}/").json()
    assert (row["enabled"], row["status"]) == (False, "unknown")
    assert row["status_message"] == "Deployment gpu-1 was stopped; launch it to re-enable."
    assert not StatusChange.objects.filter(channel=channel).exists()  # a stop is no health event
