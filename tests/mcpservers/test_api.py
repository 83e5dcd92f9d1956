"""REST API for MCP servers, tools, grants and calls: admins manage, members are refused, secrets never come back."""

from __future__ import annotations

import pytest

from accounts.models import AuditLog
from keys.services import issue_key
from mcpservers.models import McpCall, McpGrant, McpServer
from tests.api.conftest import session_client, token_client
from tests.mcpservers.factories import grant, make_server

pytestmark = pytest.mark.django_db

SECRET = "team-bearer-secret-55aa"


def test_an_admin_creates_a_server_and_its_secrets_are_write_only(admin):
    api = token_client(admin)
    created = api.post(
        "/api/mcp-servers/",
        {
            "name": "Tracker",
            "slug": "tracker",
            "url": "http://127.0.0.1:9/mcp",
            "auth": "bearer",
            "bearer_token": SECRET,
            "headers": '{"X-Team": "alpha-secret-header"}',
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert SECRET not in created.content.decode() and "alpha-secret-header" not in created.content.decode()
    body = created.json()
    assert body["has_bearer_token"] and body["has_headers"] and not body["has_oauth_client_secret"]
    server = McpServer.objects.get(slug="tracker")
    assert server.bearer_token == SECRET and server.extra_headers() == {"X-Team": "alpha-secret-header"}
    # Stored encrypted: the column never holds the plaintext.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT bearer_token, headers FROM mcpservers_mcpserver WHERE id = %s", [server.pk])
        raw = cursor.fetchone()
    assert SECRET not in raw[0] and "alpha-secret-header" not in raw[1]
    listed = api.get("/api/mcp-servers/")
    assert SECRET not in listed.content.decode()
    # Omitting a secret keeps it; an empty string clears it.
    api.patch(f"/api/mcp-servers/{server.pk}/", {"description": "issues"}, format="json")
    server.refresh_from_db()
    assert server.bearer_token == SECRET
    cleared = api.patch(f"/api/mcp-servers/{server.pk}/", {"auth": "none", "bearer_token": ""}, format="json")
    assert cleared.status_code == 200 and not cleared.json()["has_bearer_token"]
    # The audit log and its pages say a secret was set or changed, never what it is.
    rotated = api.patch(
        f"/api/mcp-servers/{server.pk}/", {"auth": "bearer", "bearer_token": "rotated-55bb"}, format="json"
    )
    assert rotated.status_code == 200, rotated.content
    entries = AuditLog.objects.filter(object_type="mcpserver").order_by("pk")
    assert entries[0].changes["bearer_token"] == "set" and entries[0].changes["headers"] == "set"
    assert entries.last().changes["bearer_token"] == "changed"
    logged = str(list(entries.values())) + api.get("/api/audit-log/?page_size=500").content.decode()
    for secret in (SECRET, "alpha-secret-header", "rotated-55bb"):
        assert secret not in logged


def test_it_answers_field_errors_for_bad_servers(admin):
    api = token_client(admin)
    no_token = api.post(
        "/api/mcp-servers/",
        {"name": "T", "slug": "t", "url": "http://127.0.0.1:9/mcp", "auth": "bearer"},
        format="json",
    )
    assert no_token.status_code == 400 and "bearer_token" in no_token.json()
    bad_headers = api.post(
        "/api/mcp-servers/",
        {"name": "T", "slug": "t", "url": "http://127.0.0.1:9/mcp", "headers": "[1, 2]"},
        format="json",
    )
    assert bad_headers.status_code == 400 and "headers" in bad_headers.json()


@pytest.mark.parametrize(
    "secrets,field,says",
    [
        ({"headers": '{"Bad Header": "y"}'}, "headers", "Not a header name: 'Bad Header'"),
        ({"headers": '{"X-Team:": "y"}'}, "headers", "Not a header name: 'X-Team:'"),
        ({"headers": '{"X-A": "ключ"}'}, "headers", "The value of X-A cannot be sent"),
        ({"headers": '{"X-A": "a\\r\\nX-Injected: 1"}'}, "headers", "The value of X-A cannot be sent"),
        ({"auth": "bearer", "bearer_token": "ключ"}, "bearer_token", "The bearer token can only contain ASCII"),
    ],
)
def test_it_refuses_headers_and_tokens_no_http_request_can_carry(admin, secrets, field, says):
    """Accepted before, each check of the server then failed with only "UnicodeEncodeError"."""
    answer = token_client(admin).post(
        "/api/mcp-servers/", {"name": "T", "slug": "t", "url": "http://127.0.0.1:9/mcp", **secrets}, format="json"
    )
    assert answer.status_code == 400 and says in answer.json()[field][0], answer.json()
    assert not McpServer.objects.exists()


def test_tools_are_switched_and_grants_managed_by_admins(admin, alice, team):
    server = make_server(tools=["echo", "whoami"])
    key, _ = issue_key(owner=alice, name="k")
    api = token_client(admin)
    echo = server.tools.get(name="echo")
    assert api.patch(f"/api/mcp-tools/{echo.pk}/", {"enabled": False}, format="json").json()["enabled"] is False
    made = api.post("/api/mcp-grants/", {"server": server.pk, "tool": echo.pk, "key": key.pk}, format="json")
    assert made.status_code == 201, made.content
    both = api.post("/api/mcp-grants/", {"server": server.pk, "key": key.pk, "team": team.pk}, format="json")
    assert both.status_code == 400
    other = make_server(slug="docs", tools=["search"])
    wrong_tool = api.post("/api/mcp-grants/", {"server": other.pk, "tool": echo.pk, "user": alice.pk}, format="json")
    assert wrong_tool.status_code == 400 and "tool" in wrong_tool.json()
    assert api.get(f"/api/mcp-grants/?key={key.pk}").json()["count"] == 1
    assert api.delete(f"/api/mcp-grants/{made.json()['id']}/").status_code == 204


@pytest.mark.parametrize("who", ["anonymous", "alice", "lena"])
def test_members_cannot_see_or_edit_servers_grants_or_calls(who, alice, lena):
    server = make_server(tools=["echo"], bearer_token=SECRET, auth="bearer")
    key, _ = issue_key(owner=alice, name="k")
    row = grant(server, key=key)
    McpCall.objects.create(server=server, server_slug="tracker", tool="echo", key=key, user=alice, status="ok")
    api = session_client(None if who == "anonymous" else {"alice": alice, "lena": lena}[who])
    expected = {401, 403}
    for path in (
        "/api/mcp-servers/",
        f"/api/mcp-servers/{server.pk}/",
        "/api/mcp-tools/",
        "/api/mcp-grants/",
        "/api/mcp-calls/",
    ):
        assert api.get(path).status_code in expected, path
    assert api.patch(f"/api/mcp-servers/{server.pk}/", {"url": "http://evil/"}, format="json").status_code in expected
    assert api.post("/api/mcp-grants/", {"server": server.pk, "user": alice.pk}, format="json").status_code in expected
    assert api.delete(f"/api/mcp-grants/{row.pk}/").status_code in expected
    assert api.delete(f"/api/mcp-servers/{server.pk}/").status_code in expected
    server.refresh_from_db()
    assert server.url == "http://127.0.0.1:9/mcp" and McpGrant.objects.count() == 1


def test_admins_list_the_calls(admin, alice):
    server = make_server()
    McpCall.objects.create(server=server, server_slug="tracker", tool="echo", user=alice, status="forbidden")
    calls = token_client(admin).get("/api/mcp-calls/?status=forbidden").json()
    assert calls["count"] == 1 and calls["results"][0]["tool"] == "echo"


def test_the_schema_documents_the_mcp_endpoints():
    from drf_spectacular.generators import SchemaGenerator

    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    for path in (
        "/api/mcp-servers/",
        "/api/mcp-servers/{id}/check/",
        "/api/mcp-tools/{id}/",
        "/api/mcp-grants/",
        "/api/mcp-calls/",
    ):
        assert path in paths, path
