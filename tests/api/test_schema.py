"""The OpenAPI schema validates with no warnings, types every operation, and the interactive
docs work offline: every asset is served by the app from /static/."""

from __future__ import annotations

import re

import pytest
import yaml
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_schema_validates_without_warnings(tmp_path):
    out = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    paths = schema["paths"]
    for expected in ["/api/users/", "/api/me/", "/api/tokens/", "/api/audit-log/", "/api/hosts/", "/api/channels/"]:
        assert expected in paths
    assert "/api/keys/{id}/rotate/" in paths and "/api/users/{id}/reset-password/" in paths
    assert "apiToken" in schema["components"]["securitySchemes"]


@pytest.fixture
def schema(openapi_schema) -> dict:
    return openapi_schema


def test_every_operation_has_a_typed_response(schema):
    for path, item in schema["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if code == "204":
                    continue
                content = response.get("content", {}).get("application/json", {})
                assert content.get("schema"), f"{method.upper()} {path} {code} has no response schema"


def test_write_only_and_once_only_fields_are_documented(schema):
    components = schema["components"]["schemas"]
    assert "api_key" in components["ChannelRequest"]["properties"]
    assert "api_key" not in components["Channel"]["properties"]
    assert "has_api_key" in components["Channel"]["properties"]
    assert "key" in components["KeyCreated"]["properties"] and "key" not in components["Key"]["properties"]
    assert "token" in components["ApiTokenCreated"]["properties"]


def test_each_object_is_described_by_its_own_docstring_never_a_base_classs(schema):
    """drf-spectacular falls back to the nearest base class's docstring: our base serializer's
    (written for this code's readers) described 23 objects, the channel's among them."""
    from portal.api.serializers import ModelSerializer

    base_doc = ModelSerializer.__doc__.split(":")[0]
    components = schema["components"]["schemas"]
    leaked = [name for name, c in components.items() if base_doc in c.get("description", "")]
    assert not leaked
    for name in ["Channel", "ChannelHealth", "ModelRoute", "McpServer", "AuditLog", "LaunchJob", "ProbeResult"]:
        assert components[name].get("description"), name
    assert components["Channel"]["description"].startswith("An upstream.")


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_load_only_local_assets(alice_api, client, page):
    response = alice_api.get(page)
    assert response.status_code == 200
    html = response.content.decode()
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert urls, html[:500]
    assert not re.search(r"https?://", " ".join(urls)), urls
    assets = [u for u in urls if not u.startswith("/api/")]
    assert assets and all(u.startswith("/static/") for u in assets), assets
    for url in assets:
        asset = client.get(url)
        assert asset.status_code == 200, url
        asset.close()


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_send_a_signed_out_browser_to_the_login_page(client, page):
    response = client.get(page)
    assert response.status_code == 302 and response["Location"] == f"/login/?next={page}"
    assert client.get("/api/schema/").status_code == 401  # the schema is an API answer


def test_the_schema_view_resolves_every_extension_before_it_builds(admin_api, monkeypatch):
    """drf-spectacular resolves extensions' target classes lazily and without a lock; concurrent
    first requests raced there (a 500). The view resolves them all once, under a lock, first:
    afterwards no schema build has one left to resolve."""
    from drf_spectacular import extensions

    from portal.api import schema_view

    registries = [
        extensions.OpenApiAuthenticationExtension,
        extensions.OpenApiSerializerExtension,
        extensions.OpenApiSerializerFieldExtension,
        extensions.OpenApiViewExtension,
        extensions.OpenApiFilterExtension,
    ]
    monkeypatch.setattr(schema_view, "_loaded", False)
    unresolved = [e for base in registries for e in base._registry if e.target_class is None]
    assert unresolved  # optional extensions of apps not installed (allauth, simplejwt, …)
    for extension in unresolved:  # as a new process has them: a dotted path not imported yet
        monkeypatch.setattr(extension, "target_class", "allauth.not_installed.Target")

    held: list[bool] = []  # whether the view's lock was held at each resolution
    resolve = extensions.OpenApiGeneratorExtension._load_class.__func__

    def watched(cls):
        held.append(schema_view._lock.locked())
        resolve(cls)

    monkeypatch.setattr(extensions.OpenApiGeneratorExtension, "_load_class", classmethod(watched))

    assert admin_api.get("/api/schema/").status_code == 200

    assert held and all(held)
    assert not [e for base in registries for e in base._registry if isinstance(e.target_class, str)]


def test_every_operation_documents_the_errors_it_may_answer(schema):
    """A script writer reads the answers it must handle from the schema: 400 where a body or a
    query is read, 401/403 where a token is needed, 404 on an object's path, 409 on a delete, 429
    and 503 everywhere (it documented only 200/201 and 503)."""
    key = schema["paths"]["/api/keys/{id}/"]
    assert {"400", "401", "403", "404", "429", "503"} <= set(key["get"]["responses"])
    channel = schema["paths"]["/api/channels/{id}/"]
    assert {"401", "403", "404", "409", "429", "503"} <= set(channel["delete"]["responses"])
    assert "400" not in channel["delete"]["responses"]
    assert "400" in schema["paths"]["/api/keys/"]["post"]["responses"]
    assert "404" not in schema["paths"]["/api/keys/"]["post"]["responses"]  # no object in the path
    # The installer bundle is fetched with a one-time token in the body, not an API token.
    assert "401" not in schema["paths"]["/api/client-configs/bundle/"]["post"]["responses"]
    detail = schema["components"]["schemas"]["Error"]
    assert detail["properties"]["detail"]["type"] == "string"


def test_the_api_root_names_the_docs_and_every_endpoint_each_of_which_answers(admin_api):
    """`GET /api/` answered 404: a script had to guess. Now it lists where to go."""
    root = admin_api.get("/api/").json()
    assert (root["schema"], root["docs"]) == ("/api/schema/", "/api/docs/")
    endpoints = root["endpoints"]
    assert endpoints["channels"] == "/api/channels/" and endpoints["health/channels"] == "/api/health/channels/"
    assert endpoints["me"] == "/api/me/" and endpoints["health/schedule"] == "/api/health/schedule/"
    assert len(endpoints) >= 30
    answers = {name: admin_api.get(path) for name, path in endpoints.items()}
    post_only = {name for name, r in answers.items() if r.status_code == 405 and r["Allow"] == "POST, OPTIONS"}
    assert post_only == {"fit-estimate"}
    assert {name: r.status_code for name, r in answers.items() if r.status_code != 200 and name not in post_only} == {}
