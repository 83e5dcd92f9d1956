"""A script writer's `curl -d` (form-encoded) or `-F` (multipart) body is read as JSON is: a boolean
it leaves out takes its default, the model's on create (DRF reads such a body as an HTML form, where
a missing checkbox is false: a channel made with `curl -d name=… -d base_url=…` came out disabled,
and a PUT without `enabled` disabled it)."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from rest_framework import serializers

from channels.models import AlertTarget, Channel, Model
from keys.models import PayloadLogging
from mcpservers.models import McpServer
from portal.api.serializers import BooleanField
from tests.api.conftest import token_client

pytestmark = pytest.mark.django_db


def send(api, method: str, url: str, data: dict, encoding: str):
    if encoding == "form":
        return getattr(api, method)(url, urlencode(data, doseq=True), content_type="application/x-www-form-urlencoded")
    return getattr(api, method)(url, data, format="multipart")


CREATED = {
    "/api/channels/": (Channel, {"name": "x", "base_url": "http://10.0.0.9:8000/v1"}, ["enabled", "probe_inference"]),
    "/api/models/": (Model, {"name": "m-form"}, ["enabled"]),
    "/api/aliases/": (Model, {"name": "coder", "targets": "qwen3-32b"}, ["enabled"]),
    "/api/health/alert-targets/": (AlertTarget, {"name": "ops", "url": "https://hooks.example.com/x"}, ["enabled"]),
    "/api/payload-logging/": (PayloadLogging, {"user": "ALICE"}, ["enabled"]),
    "/api/mcp-servers/": (McpServer, {"name": "T", "slug": "t", "url": "http://127.0.0.1:9/mcp"}, ["enabled"]),
}


@pytest.mark.parametrize("encoding", ["form", "multipart"])
@pytest.mark.parametrize("url", list(CREATED))
def test_a_boolean_a_form_body_leaves_out_takes_the_models_default(admin, alice, model, url, encoding):
    kind, data, booleans = CREATED[url]
    data = {k: alice.pk if v == "ALICE" else v for k, v in data.items()}
    response = send(token_client(admin), "post", url, data, encoding)
    assert response.status_code == 201, response.content
    made = kind.objects.get(pk=response.json()["id"])
    assert {name: getattr(made, name) for name in booleans} == {name: True for name in booleans}
    assert response.json()["enabled"] is True


@pytest.mark.parametrize("encoding", ["form", "multipart"])
def test_a_form_put_without_a_boolean_keeps_it_and_false_still_switches_it_off(admin, channel, encoding):
    api = token_client(admin)
    body = {"name": channel.name, "base_url": channel.base_url, "priority": "3"}
    response = send(api, "put", f"/api/channels/{channel.pk}/", body, encoding)
    assert response.status_code == 200, response.content
    channel.refresh_from_db()
    assert (channel.priority, channel.enabled, channel.probe_inference) == (3, True, True)

    response = send(api, "patch", f"/api/channels/{channel.pk}/", {"enabled": "false"}, encoding)
    assert response.status_code == 200, response.content
    channel.refresh_from_db()
    assert channel.enabled is False


def test_an_unticked_box_of_the_browsable_apis_form_still_says_false(admin_api, channel):
    """The browsable API's HTML forms send Django's CSRF field; there a missing checkbox is an unticked one."""
    page = admin_api.get("/api/channels/", HTTP_ACCEPT="text/html").content.decode()
    assert 'name="csrfmiddlewaretoken"' in page and 'name="enabled"' in page  # the form this test stands for
    form = {"csrfmiddlewaretoken": "x", "name": "off", "base_url": "http://10.0.0.9:8000/v1"}
    created = admin_api.post("/api/channels/", form, format="multipart")
    assert created.status_code == 201, created.content
    assert Channel.objects.get(name="off").enabled is False
    edit = {"csrfmiddlewaretoken": "x", "name": channel.name, "base_url": channel.base_url}
    assert admin_api.put(f"/api/channels/{channel.pk}/", edit, format="multipart").status_code == 200
    channel.refresh_from_db()
    assert channel.enabled is False


def test_every_writable_boolean_of_the_api_reads_a_form_body_as_json(admin):
    """The shared fix holds for every serializer an API view uses, declared and model fields alike."""
    from django.urls import get_resolver

    seen = set()

    def walk(patterns):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from walk(p.url_patterns)
            else:
                cls = getattr(p.callback, "cls", None)
                if cls is not None and getattr(cls, "serializer_class", None) is not None:
                    yield cls.serializer_class

    for serializer_class in walk(get_resolver().url_patterns):
        if serializer_class in seen:
            continue
        seen.add(serializer_class)
        for name, field in serializer_class().get_fields().items():
            if isinstance(field, serializers.BooleanField) and not field.read_only:
                assert isinstance(field, BooleanField), f"{serializer_class.__name__}.{name}"
    assert seen
