"""The window a stopped on-demand model is listed with: the one its server reported at its last
start, to every key and through an alias, in `/v1/models` (the real gateway) and in the client
configs (`clientconfigs.services.model_specs`) alike. Before, a local-only key saw `null` for the
cold model (no local route serves it while it is stopped) and every key saw `null` for an alias of
it, so a client configured from either fell back to its own default window."""

from __future__ import annotations

import httpx
import pytest
from django.urls import reverse

from channels import services as channel_services
from channels.choices import Locality
from channels.models import Channel, Model, ModelRoute
from clientconfigs.services import model_specs
from hosts.models import Deployment
from keys.services import issue_key
from tests.hosts.test_ondemand import on_demand_far

pytestmark = [pytest.mark.services]

WINDOW = 1024  # what llama-server reported at the model's last start
CLOUD_WINDOW = 200_000


@pytest.fixture
def cold_model(transactional_db) -> Deployment:
    d = on_demand_far("od-window")
    Deployment.objects.filter(pk=d.pk).update(context_window=WINDOW)
    return d


@pytest.fixture
def aliases(cold_model) -> None:
    """`coder` over the cold model alone; `local-coder` (local-only) over a cloud model with a far
    larger window, then the cold model: a local request may only be served by the latter."""
    cloud = Channel.objects.create(
        name="cloud", kind="openai", base_url="https://api.example.com/v1", locality=Locality.EXTERNAL
    )
    cloud_model = Model.objects.create(name="cloud-coder")
    ModelRoute.objects.create(model=cloud_model, channel=cloud, context_window=CLOUD_WINDOW)
    channel_services.save_alias(name="coder", targets=["od-window"])
    channel_services.save_alias(name="local-coder", targets=["cloud-coder", "od-window"], local_only=True)


def _windows(gateway_url: str, key: str) -> dict[str, object]:
    listed = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    return {m["id"]: m["context_window"] for m in listed}


@pytest.mark.parametrize("local_only", [False, True], ids=["any-key", "local-only-key"])
def test_a_cold_model_and_its_aliases_are_listed_with_the_window_its_start_serves(
    local_only, aliases, gateway_url, alice
):
    stored, key = issue_key(owner=alice, name="laptop", local_only=local_only)

    windows = _windows(gateway_url, key)
    specs = {s.name: s.context_window for s in model_specs(alice, stored)}

    expected = {"od-window": WINDOW, "coder": WINDOW, "local-coder": WINDOW}
    if not local_only:
        expected["cloud-coder"] = CLOUD_WINDOW
    assert windows == expected
    assert specs == expected


def test_the_rest_api_and_the_admin_pages_give_a_cold_model_the_window_the_gateway_lists(aliases, admin_client):
    """`/api/models/`, `/api/aliases/` and the admin's model and alias pages said "unknown" (null)
    for a stopped on-demand model and its aliases while `/v1/models` and the client configs gave
    the window: a script or an admin reading them saw a model no client could size a prompt for."""
    models = {m["name"]: m["context_window"] for m in admin_client.get("/api/models/").json()["results"]}
    alias_windows = {a["name"]: a["context_window"] for a in admin_client.get("/api/aliases/").json()["results"]}
    cold = Model.objects.get(name="od-window")
    one = admin_client.get(f"/api/models/{cold.pk}/").json()
    page = admin_client.get(reverse("model_detail", args=[cold.pk]))
    local_alias = admin_client.get(reverse("model_alias_detail", args=[Model.objects.get(name="local-coder").pk]))

    assert models == {"cloud-coder": CLOUD_WINDOW, "od-window": WINDOW}
    assert (one["context_window"], one["max_output_tokens"]) == (WINDOW, None)
    assert alias_windows == {"coder": WINDOW, "local-coder": WINDOW}
    assert page.context["effective_context"] == WINDOW
    assert "the window its server starts with" in page.content.decode()
    assert local_alias.context["effective_context"] == WINDOW
    # a local-only alias: the cloud target's window is not one its requests may get
    assert [(r["target"].name, r["window"]) for r in local_alias.context["rows"]] == [
        ("cloud-coder", None),
        ("od-window", WINDOW),
    ]


def test_a_running_model_is_sized_by_its_routes_not_by_its_last_start(aliases, admin_client):
    """The last start's window is only for a model nothing serves now: once a route serves it
    (here a configured window smaller than the last start's), the route decides."""
    served = Channel.objects.create(name="od-now", base_url="http://127.0.0.1:9/v1", locality=Locality.LOCAL)
    ModelRoute.objects.create(model=Model.objects.get(name="od-window"), channel=served, context_window=WINDOW // 2)

    models = {m["name"]: m["context_window"] for m in admin_client.get("/api/models/").json()["results"]}

    assert models["od-window"] == WINDOW // 2
    assert Model.objects.get(name="od-window").effective_limits(cold={"od-window": WINDOW}) == (WINDOW // 2, None)


def test_a_model_never_started_is_listed_with_the_window_its_options_give_it(transactional_db, gateway_url, alice):
    """Before its first start nothing had reported a window: `/v1/models`, the client configs and
    the API said null, and a newcomer's client was configured with its own default (far larger than
    llama.cpp's `-c 1024 -np 2`, 512 a request) until someone started the model once."""
    d = on_demand_far("od-new")
    Deployment.objects.filter(pk=d.pk).update(options={**d.options, "ctx_size": 1024, "parallel": 2})
    stored, key = issue_key(owner=alice, name="laptop")

    assert Deployment.objects.get(pk=d.pk).context_window is None  # never started
    assert _windows(gateway_url, key) == {"od-new": 512}
    assert [(s.name, s.context_window) for s in model_specs(alice, stored)] == [("od-new", 512)]
    assert channel_services.cold_windows() == {"od-new": 512}
