"""Admin pages for MCP servers: list, create, edit (secrets kept), delete with confirmation, tools on/off,
grants, calls; members get 403."""

from __future__ import annotations

import pytest

from keys.services import issue_key
from mcpservers.models import McpCall, McpGrant, McpServer
from tests.mcpservers.factories import grant, make_server

pytestmark = pytest.mark.django_db

SECRET = "team-bearer-secret-77bb"


def test_an_admin_adds_edits_and_deletes_a_server(admin_client):
    page = admin_client.get("/mcp-servers/")
    assert page.status_code == 200 and b"MCP servers" in page.content
    added = admin_client.post(
        "/mcp-servers/new/",
        {
            "name": "Tracker",
            "slug": "tracker",
            "url": "http://127.0.0.1:9/mcp",
            "transport": "streamable-http",
            "enabled": "on",
            "auth": "bearer",
            "bearer_token": SECRET,
            "timeout_seconds": "30",
        },
    )
    server = McpServer.objects.get(slug="tracker")
    assert added.status_code == 302 and server.bearer_token == SECRET
    detail = admin_client.get(f"/mcp-servers/{server.pk}/")
    assert detail.status_code == 200 and SECRET.encode() not in detail.content and b"/mcp/tracker" in detail.content
    edit = admin_client.get(f"/mcp-servers/{server.pk}/edit/")
    assert SECRET.encode() not in edit.content
    saved = admin_client.post(
        f"/mcp-servers/{server.pk}/edit/",
        {
            "name": "Tracker",
            "slug": "tracker",
            "url": "http://127.0.0.1:9/mcp",
            "transport": "streamable-http",
            "auth": "bearer",
            "bearer_token": "",
            "timeout_seconds": "30",
        },
    )
    assert saved.status_code == 302
    server.refresh_from_db()
    assert server.bearer_token == SECRET and not server.enabled  # blank keeps the token
    confirm = admin_client.get(f"/mcp-servers/{server.pk}/delete/")
    assert confirm.status_code == 200 and b"Delete the MCP server Tracker?" in confirm.content
    assert McpServer.objects.exists()
    assert admin_client.post(f"/mcp-servers/{server.pk}/delete/").status_code == 302
    assert not McpServer.objects.exists()


def test_the_form_shows_field_errors(admin_client):
    answer = admin_client.post(
        "/mcp-servers/new/",
        {"name": "T", "slug": "t", "url": "http://x/mcp", "transport": "sse", "auth": "bearer", "timeout_seconds": "5"},
    )
    assert answer.status_code == 400 and b"Enter the bearer token" in answer.content
    assert not McpServer.objects.exists()
    headers = admin_client.post(
        "/mcp-servers/new/",
        {"name": "T", "slug": "t", "url": "http://x/mcp", "transport": "sse", "auth": "none", "timeout_seconds": "5"}
        | {"headers": '{"X-A": "ключ"}'},
    )
    assert headers.status_code == 400 and b"The value of X-A cannot be sent in an HTTP header" in headers.content
    assert not McpServer.objects.exists()


def test_a_form_sent_back_with_an_error_never_holds_the_secrets_it_was_given(admin_client):
    answer = admin_client.post(
        "/mcp-servers/new/",
        {
            "name": "T",
            "slug": "bad slug!",
            "url": "http://x/mcp",
            "transport": "sse",
            "auth": "bearer",
            "bearer_token": "bearer-55cc",
            "headers": '{"X-Api-Key": "header-55dd"}',
            "timeout_seconds": "5",
        },
    )
    assert answer.status_code == 400 and b"slug" in answer.content
    assert b"bearer-55cc" not in answer.content and b"header-55dd" not in answer.content


def test_tools_and_grants_on_the_server_page(admin_client, alice, team):
    server = make_server(tools=["echo", "whoami"])
    key, _ = issue_key(owner=alice, name="laptop")
    echo = server.tools.get(name="echo")
    admin_client.post(f"/mcp-servers/{server.pk}/tools/{echo.pk}/toggle/")
    echo.refresh_from_db()
    assert not echo.enabled
    added = admin_client.post(f"/mcp-servers/{server.pk}/grants/", {"tool": "", "team": team.pk})
    assert added.status_code == 302
    assert McpGrant.objects.filter(server=server, team=team, tool=None).exists()
    refused = admin_client.post(f"/mcp-servers/{server.pk}/grants/", {"key": key.pk, "user": alice.pk})
    assert refused.status_code == 400 and b"exactly one" in refused.content
    row = McpGrant.objects.get()
    assert admin_client.get(f"/mcp-servers/{server.pk}/grants/{row.pk}/delete/").status_code == 200
    admin_client.post(f"/mcp-servers/{server.pk}/grants/{row.pk}/delete/")
    assert not McpGrant.objects.exists()


def test_the_calls_page_lists_calls(admin_client, alice):
    server = make_server()
    McpCall.objects.create(server=server, server_slug="tracker", tool="echo", user=alice, status="forbidden")
    page = admin_client.get("/mcp-servers/calls/?status=forbidden")
    assert page.status_code == 200 and b"echo" in page.content


def test_the_calls_page_reads_a_calls_error_in_the_readers_language(admin_client, admin, alice):
    """Regression (probe): a call's error was stored and shown in English only."""
    from gateway.surfaces.mcp import NOT_ALLOWED

    server = make_server()
    McpCall.objects.create(
        server=server, server_slug="tracker", tool="rm", user=alice, status="forbidden", **NOT_ALLOWED.columns("error")
    )
    McpCall.objects.create(server=server, server_slug="tracker", tool="old", user=alice, status="forbidden", error="x1")
    admin.language = "zh-hans"
    admin.save(update_fields=["language"])
    page = admin_client.get("/mcp-servers/calls/").content.decode()
    assert "不允许此密钥调用" in page and "not allowed" not in page
    assert ">x1<" in page  # a row written before keeps its stored text


def test_a_member_cannot_see_or_edit_servers(client, alice):
    server = make_server(bearer_token=SECRET, auth="bearer")
    key, _ = issue_key(owner=alice, name="laptop")
    row = grant(server, key=key)
    client.force_login(alice)
    for path in (
        "/mcp-servers/",
        "/mcp-servers/new/",
        "/mcp-servers/calls/",
        f"/mcp-servers/{server.pk}/",
        f"/mcp-servers/{server.pk}/edit/",
        f"/mcp-servers/{server.pk}/delete/",
    ):
        assert client.get(path).status_code == 403, path
    assert client.post(f"/mcp-servers/{server.pk}/delete/").status_code == 403
    assert client.post(f"/mcp-servers/{server.pk}/grants/{row.pk}/delete/").status_code == 403
    assert client.post(f"/mcp-servers/{server.pk}/grants/", {"user": alice.pk}).status_code == 403
    assert McpServer.objects.exists() and McpGrant.objects.count() == 1
