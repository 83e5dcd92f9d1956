"""The shared FilterSets as the API uses them (the HTML lists use the same classes)."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from accounts.models import AuditLog
from channels.models import Channel
from hosts.models import Host
from keys.services import issue_key

pytestmark = pytest.mark.django_db


def ids(response) -> list:
    assert response.status_code == 200, response.content[:300]
    return [row["id"] for row in response.json()["results"]]


def test_audit_log_filters_by_actor_type_action_and_date(world, admin, admin_api):
    admin_api.patch(f"/api/hosts/{world['host']}/", {"notes": "x"}, format="json")
    by_admin = admin_api.get("/api/audit-log/", {"actor": admin.pk}).json()["results"]
    assert by_admin and all(row["actor"] == admin.pk for row in by_admin)
    hosts = admin_api.get("/api/audit-log/", {"object_type": "host", "action": "update"}).json()["results"]
    assert [row["object_id"] for row in hosts] == [str(world["host"])]
    future = (timezone.now() + datetime.timedelta(hours=1)).isoformat()
    assert admin_api.get("/api/audit-log/", {"created_after": future}).json()["count"] == 0
    assert admin_api.get("/api/audit-log/", {"created_before": future}).json()["count"] == AuditLog.objects.count()
    assert admin_api.get("/api/audit-log/", {"action": "nonsense"}).status_code == 400


def test_key_filters_by_state_owner_and_model(world, admin_api, alice, mallory, model):
    expired, _ = issue_key(owner=alice, name="old", expires_at=timezone.now() - datetime.timedelta(days=1))
    scoped, _ = issue_key(owner=mallory, name="scoped", allowed_models=[model])
    assert ids(admin_api.get("/api/keys/", {"state": "expired"})) == [expired.pk]
    assert ids(admin_api.get("/api/keys/", {"owner": mallory.pk})) == [scoped.pk]
    assert ids(admin_api.get("/api/keys/", {"model": "qwen3-32b"})) == [scoped.pk]
    assert admin_api.get("/api/keys/", {"owner": 99999}).status_code == 400


def test_host_and_channel_filters(world, admin_api, host, channel):
    Host.objects.create(name="cpu-box", address="10.0.0.9", username="root", labels=["cpu"])
    assert ids(admin_api.get("/api/hosts/", {"label": "a100"})) == [host.pk]
    Channel.objects.create(name="claude", kind="anthropic", base_url="https://api.anthropic.com/v1")
    assert ids(admin_api.get("/api/channels/", {"kind": "vllm"})) == [channel.pk]
    assert ids(admin_api.get("/api/channels/", {"model": "qwen3-32b"})) == [channel.pk]
    assert ids(admin_api.get("/api/channels/", {"q": "anthropic"})) != [channel.pk]


def test_user_filters(world, admin_api, alice):
    assert ids(admin_api.get("/api/users/", {"role": "admin"})) == [world["admin"]]
    alice.is_active = False
    alice.save()
    assert ids(admin_api.get("/api/users/", {"is_active": "false"})) == [alice.pk]


@pytest.mark.parametrize(
    "value, inactive_listed",
    [("false", True), ("FALSE", True), ("0", True), ("No", True), ("1", False), ("yes", False)],
)
def test_a_yes_no_filter_reads_the_usual_spellings(world, admin_api, alice, value, inactive_listed):
    alice.is_active = False
    alice.save()
    listed = ids(admin_api.get("/api/users/", {"is_active": value}))
    assert listed and (alice.pk in listed) == inactive_listed
    assert all((pk == alice.pk) == inactive_listed for pk in listed)


@pytest.mark.parametrize(
    "path, param", [("/api/users/", "is_active"), ("/api/channels/", "enabled"), ("/api/tokens/", "active")]
)
@pytest.mark.parametrize("value", ["maybe", "2", "on"])
def test_a_yes_no_filter_refuses_a_value_it_cannot_read(world, admin_api, path, param, value):
    """Ignoring it listed every row, which a script took for the filtered list."""
    response = admin_api.get(path, {param: value})
    assert response.status_code == 400
    assert response.json() == {param: ["Enter true or false (or 1 or 0, yes or no)."]}


def test_the_token_filter_is_a_boolean_in_the_schema(openapi_schema):
    params = openapi_schema["paths"]["/api/tokens/"]["get"]["parameters"]
    assert next(p for p in params if p["name"] == "active")["schema"] == {"type": "boolean"}


# One object, a fixed list that reads no parameter, totals over two validated parameters, a POST.
UNFILTERED = {"me", "health/schedule", "client-configs/clients", "usage/summary", "fit-estimate"}


def test_a_nul_in_any_query_parameter_of_a_list_is_a_400_naming_it(world, admin_api):
    """DRF's search answered a bare list without the parameter's name; other parameters passed."""
    from portal.api.views import endpoints

    lists = [path for name, path in endpoints().items() if name not in UNFILTERED]
    assert len(lists) > 20
    wrong = {}
    for path in lists:
        for param in ("search", "q", "ordering", "page", "no_such_filter"):
            response = admin_api.get(path, {param: "a\x00b"})
            if (response.status_code, response.json()) != (400, {param: ["Null characters are not allowed."]}):
                wrong[f"{path}?{param}"] = (response.status_code, response.content[:100])
    assert not wrong
    response = admin_api.get("/api/keys/", {"q": "x", "state\x00": "active"}, headers={"accept-language": "zh-hans"})
    assert response.status_code == 400 and response.json() == {"state": ["不允许包含空字符（NUL）。"]}


def test_ordering_by_a_field_a_list_cannot_order_by_is_a_400_naming_the_choices(world, admin_api, lead_api):
    """DRF dropped an unknown `ordering` field silently and answered in the default order."""
    response = admin_api.get("/api/budgets/", {"ordering": "-spent"})
    assert response.status_code == 400
    assert response.json() == {"ordering": ["Cannot order by -spent. Choose one of: created, amount, window."]}
    response = lead_api.get("/api/tokens/", {"ordering": "name,nmae"}, headers={"accept-language": "zh-hans"})
    assert response.status_code == 400
    assert response.json() == {
        "ordering": ["无法按 nmae 排序。请从以下选项中选择：name、created、last_used_at、expires_at。"]
    }
    # A field it can order by, descending and with a trailing comma, still orders.
    assert (
        ids(admin_api.get("/api/channels/", {"ordering": "-name,"}))
        == ids(admin_api.get("/api/channels/", {"ordering": "name"}))[::-1]
    )


@pytest.mark.parametrize("page", ["abc", "-1", "0", "3"])
def test_a_page_that_does_not_exist_is_a_400_on_page(world, admin_api, page, openapi_schema):
    """It was a 404 `Invalid page.`, which no list documents."""
    for path in ("/api/channels/", "/api/usage/records/"):
        response = admin_api.get(path, {"page": page, "page_size": 1})
        assert response.status_code == 400
        assert response.json() == {"page": [f"Choose a page from 1 to {pages(admin_api, path)}."]}
        assert "400" in openapi_schema["paths"][path]["get"]["responses"]
    assert ids(admin_api.get("/api/channels/", {"page": "last", "page_size": 1}))


@pytest.mark.parametrize("page_size", ["abc", "0", "-5"])
def test_a_page_size_that_is_not_a_positive_number_is_a_400_on_page_size(world, admin_api, page_size, openapi_schema):
    """DRF answered with its default of 50 rows instead."""
    for path in ("/api/channels/", "/api/usage/records/"):
        response = admin_api.get(path, {"page_size": page_size})
        assert response.status_code == 400
        assert response.json() == {"page_size": ["Choose a page size from 1 to 500."]}
        (parameter,) = (p for p in openapi_schema["paths"][path]["get"]["parameters"] if p["name"] == "page_size")
        assert parameter["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
        assert "capped at 500" in parameter["description"]
    response = admin_api.get("/api/channels/", {"page_size": "0"}, headers={"accept-language": "zh-hans"})
    assert response.status_code == 400 and "500" in response.json()["page_size"][0]
    assert admin_api.get("/api/channels/", {"page_size": ""}).status_code == 200
    assert len(admin_api.get("/api/channels/", {"page_size": 501}).json()["results"]) == pages(
        admin_api, "/api/channels/"
    )


def pages(api, path: str) -> int:
    """How many pages of one row `path` lists."""
    return api.get(path, {"page_size": 1}).json()["count"]
