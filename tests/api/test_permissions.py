"""Role matrix: every API endpoint and method, as anonymous, alice (developer and owner of the
alice_* objects), mallory (another developer) and admin. Other people's objects are 404."""

from __future__ import annotations

import re

import pytest
from django.db import transaction

pytestmark = pytest.mark.django_db

ROLES = ("anon", "alice", "mallory", "admin")

HOST_PUT = {"name": "gpu-1", "address": "10.0.0.6", "username": "ubuntu"}
CHANNEL_PUT = {"name": "vllm-a", "kind": "vllm", "base_url": "http://10.0.0.5:8000"}

# (method, path template, body, expected status for anon, alice, mallory, admin)
MATRIX = [
    # users: admins only; deactivated, never deleted
    ("get", "/api/users/", None, (401, 403, 403, 200)),
    ("post", "/api/users/", {"username": "newbie", "role": "developer"}, (401, 403, 403, 201)),
    ("get", "/api/users/{alice}/", None, (401, 403, 403, 200)),
    ("patch", "/api/users/{alice}/", {"tokens_per_day": 1000}, (401, 403, 403, 200)),
    ("put", "/api/users/{alice}/", {"username": "alice", "role": "developer"}, (401, 403, 403, 200)),
    ("delete", "/api/users/{alice}/", None, (401, 403, 403, 405)),
    ("post", "/api/users/{alice}/deactivate/", None, (401, 403, 403, 200)),
    ("post", "/api/users/{alice}/reactivate/", None, (401, 403, 403, 200)),
    ("post", "/api/users/{alice}/reset-password/", None, (401, 403, 403, 200)),
    # me: anyone logged in, read-only
    ("get", "/api/me/", None, (401, 200, 200, 200)),
    ("post", "/api/me/", {}, (401, 405, 405, 405)),
    ("patch", "/api/me/", {}, (401, 405, 405, 405)),
    # personal API tokens: own only, even for admins
    ("get", "/api/tokens/", None, (401, 200, 200, 200)),
    ("post", "/api/tokens/", {"name": "ci"}, (401, 201, 201, 201)),
    ("get", "/api/tokens/{alice_token}/", None, (401, 200, 404, 404)),
    ("post", "/api/tokens/{alice_token}/revoke/", None, (401, 200, 404, 404)),
    ("patch", "/api/tokens/{alice_token}/", {"name": "x"}, (401, 405, 405, 405)),
    ("delete", "/api/tokens/{alice_token}/", None, (401, 405, 405, 405)),
    # audit log: admins, read-only
    ("get", "/api/audit-log/", None, (401, 403, 403, 200)),
    ("get", "/api/audit-log/{audit}/", None, (401, 403, 403, 200)),
    ("post", "/api/audit-log/", {}, (401, 403, 403, 405)),
    ("delete", "/api/audit-log/{audit}/", None, (401, 403, 403, 405)),
    # hosts: admins only
    ("get", "/api/hosts/", None, (401, 403, 403, 200)),
    ("post", "/api/hosts/", {"name": "gpu-2", "address": "gpu-2.lan", "username": "root"}, (401, 403, 403, 201)),
    ("get", "/api/hosts/{host}/", None, (401, 403, 403, 200)),
    ("patch", "/api/hosts/{host}/", {"notes": "rack 3"}, (401, 403, 403, 200)),
    ("put", "/api/hosts/{host}/", HOST_PUT, (401, 403, 403, 200)),
    ("post", "/api/hosts/{host}/refresh-inventory/", None, (401, 403, 403, 202)),
    # nothing awaits confirmation on a fresh host, so even an admin gets a field error
    ("post", "/api/hosts/{host}/confirm-host-key/", {"fingerprint": "SHA256:x"}, (401, 403, 403, 400)),
    ("delete", "/api/hosts/{host}/", None, (401, 403, 403, 204)),
    # channels: admins only
    ("get", "/api/channels/", None, (401, 403, 403, 200)),
    ("post", "/api/channels/", {"name": "c2", "kind": "openai", "base_url": "https://x.test"}, (401, 403, 403, 201)),
    ("get", "/api/channels/{channel}/", None, (401, 403, 403, 200)),
    ("patch", "/api/channels/{channel}/", {"priority": 5}, (401, 403, 403, 200)),
    ("put", "/api/channels/{channel}/", CHANNEL_PUT, (401, 403, 403, 200)),
    ("delete", "/api/channels/{channel}/", None, (401, 403, 403, 204)),
    # models: developers read the ones they may use, admins write
    ("get", "/api/models/", None, (401, 200, 200, 200)),
    ("post", "/api/models/", {"name": "llama-3"}, (401, 403, 403, 201)),
    ("get", "/api/models/{model}/", None, (401, 200, 200, 200)),
    ("patch", "/api/models/{model}/", {"description": "fast"}, (401, 403, 403, 200)),
    ("put", "/api/models/{model}/", {"name": "qwen3-32b"}, (401, 403, 403, 200)),
    ("delete", "/api/models/{model}/", None, (401, 403, 403, 204)),
    # keys: own for developers, everyone's for admins; revoked, never deleted
    ("get", "/api/keys/", None, (401, 200, 200, 200)),
    ("post", "/api/keys/", {"name": "laptop"}, (401, 201, 201, 201)),
    ("get", "/api/keys/{alice_key}/", None, (401, 200, 404, 200)),
    ("patch", "/api/keys/{alice_key}/", {"name": "renamed"}, (401, 200, 404, 200)),
    ("put", "/api/keys/{alice_key}/", {"name": "renamed"}, (401, 200, 404, 200)),
    ("delete", "/api/keys/{alice_key}/", None, (401, 405, 405, 405)),
    ("post", "/api/keys/{alice_key}/revoke/", None, (401, 200, 404, 200)),
    ("post", "/api/keys/{alice_key}/rotate/", {"grace_seconds": 60}, (401, 201, 404, 201)),
    # the API description needs a login too
    ("get", "/api/schema/", None, (401, 200, 200, 200)),
    ("get", "/api/docs/", None, (401, 200, 200, 200)),
    ("get", "/api/redoc/", None, (401, 200, 200, 200)),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "expected"),
    [pytest.param(*row, id=f"{row[0].upper()} {row[1]}") for row in MATRIX],
)
def test_role_matrix(request, world, method, path, body, expected):
    """Each role runs in a savepoint that is rolled back, so every role sees the same world
    (a delete by the admin cannot hide the object from the next role) at a quarter of the setup cost."""
    url = path.format(**world)
    got = {}
    for role in ROLES:
        client = request.getfixturevalue(f"{role}_api")
        with transaction.atomic():
            call = getattr(client, method)
            response = call(url, body, format="json") if body is not None else call(url)
            got[role] = response.status_code
            transaction.set_rollback(True)
    assert got == dict(zip(ROLES, expected, strict=True))


MY_VIEW_MODULES = {
    "accounts.api.views",
    "hosts.api.views",
    "channels.api.views",
    "keys.api.views",
    "drf_spectacular.views",
}


def api_routes() -> list[tuple[str, object]]:
    """(route with {} placeholders, view callback) for every URL under /api/, whoever owns it."""
    from django.urls import get_resolver

    def walk(patterns, prefix=""):
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            else:
                yield prefix + str(p.pattern), p.callback

    found = []
    for route, callback in walk(get_resolver().url_patterns):
        route = re.sub(r"\(\?P<[^>]+>[^)]*\)", "{}", route).replace("^", "").replace("$", "")
        route = re.sub(r"<[^>]+>|\{[^}]+\}", "{}", route).replace("\\.", ".")
        if route.startswith("api/") and "{}.{}" not in route and "format" not in route:
            found.append((route, callback))
    return found


def test_the_matrix_covers_every_route_of_this_api():
    """A new endpoint in our modules must be added to the matrix."""
    covered = {re.sub(r"\{[^}]+\}", "{}", p.lstrip("/")) for _m, p, _b, _e in MATRIX}
    ours = {
        route
        for route, callback in api_routes()
        if getattr(callback, "cls", None) is not None and callback.cls.__module__ in MY_VIEW_MODULES
    }
    assert ours and ours <= covered, sorted(ours - covered)


# Endpoints whose credential is in the body, on purpose (a one-use download token for installers).
PUBLIC_BY_DESIGN = {"api/client-configs/bundle/"}


@pytest.mark.parametrize("method", ["get", "post", "put", "patch", "delete"])
def test_every_api_route_refuses_anonymous_callers(db, anon_api, method):
    """A guard over the whole API, other engineers' endpoints included: no anonymous access."""
    opened = []
    for route, _callback in api_routes():
        if route in PUBLIC_BY_DESIGN:
            continue
        response = getattr(anon_api, method)("/" + route.replace("{}", "1"))
        if response.status_code not in (401, 403, 404, 405):
            opened.append((route, response.status_code))
    assert not opened
