"""Never a 500: every writable field of every create/update endpoint, one odd value at a time on
top of an otherwise valid payload. Field names come from the OpenAPI schema, so new fields are
covered without editing this file."""

from __future__ import annotations

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

ODD_VALUES = [None, {}, 10**30, "\x00"]

# (role, method, path, valid base payload)
ENDPOINTS = [
    ("admin", "post", "/api/users/", {"username": "fuzz", "role": "developer"}),
    ("admin", "patch", "/api/users/{alice}/", {}),
    ("alice", "post", "/api/tokens/", {"name": "fuzz"}),
    ("admin", "post", "/api/hosts/", {"name": "fuzz", "address": "fuzz.lan", "username": "root"}),
    ("admin", "patch", "/api/hosts/{host}/", {}),
    ("admin", "post", "/api/channels/", {"name": "fuzz", "kind": "openai", "base_url": "https://x.test"}),
    ("admin", "patch", "/api/channels/{channel}/", {}),
    ("admin", "post", "/api/models/", {"name": "fuzz", "routes": [{"channel": "vllm-a"}]}),
    ("admin", "patch", "/api/models/{model}/", {}),
    ("alice", "post", "/api/keys/", {"name": "fuzz"}),
    ("alice", "patch", "/api/keys/{alice_key}/", {}),
    ("alice", "post", "/api/keys/{alice_key}/rotate/", {}),
]


@pytest.fixture
def request_fields(openapi_schema) -> dict[tuple[str, str], list[str]]:
    schema = openapi_schema
    components = schema["components"]["schemas"]
    fields = {}
    for path, item in schema["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
            ref = body.get("$ref", "").rsplit("/", 1)[-1]
            if ref:
                fields[(method, path)] = sorted(components[ref].get("properties", {}))
    return fields


def schema_path(path: str) -> str:
    import re

    return re.sub(r"\{[^}]+\}", "{id}", path)


@pytest.mark.parametrize(("role", "method", "path", "base"), ENDPOINTS, ids=[f"{e[1]} {e[2]}" for e in ENDPOINTS])
def test_odd_values_in_any_field_never_cause_a_500(request, world, request_fields, role, method, path, base):
    client = request.getfixturevalue(f"{role}_api")
    names = request_fields[(method, schema_path(path))]
    assert names
    url = path.format(**world)
    failures = []
    for name in names:
        for value in ODD_VALUES:
            with transaction.atomic():
                response = getattr(client, method)(url, {**base, name: value}, format="json")
                transaction.set_rollback(True)
            if response.status_code >= 500:
                failures.append((name, repr(value)[:20], response.status_code))
    assert not failures


LISTS = [
    "/api/users/",
    "/api/tokens/",
    "/api/audit-log/",
    "/api/hosts/",
    "/api/channels/",
    "/api/models/",
    "/api/keys/",
]


@pytest.fixture
def list_params(openapi_schema) -> dict[str, list[str]]:
    paths = openapi_schema["paths"]
    return {path: [p["name"] for p in paths[path]["get"].get("parameters", [])] for path in LISTS}


@pytest.mark.parametrize("path", LISTS)
def test_odd_query_parameters_never_cause_a_500(world, admin_api, list_params, path):
    failures = []
    for name in list_params[path]:
        for value in ["\x00", "-1", "99999999999999999999999"]:
            response = admin_api.get(path, {name: value})
            if response.status_code >= 500:
                failures.append((name, value[:10], response.status_code))
    assert list_params[path] and not failures
