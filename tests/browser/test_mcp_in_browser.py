"""The MCP admin pages in a real browser, against a real MCP server (the official SDK's, on
loopback): the admin registers it with its own bearer token, runs "Check now" and sees its tools,
switches one off, grants the server to alice's key, and alice's key then lists exactly the tools
left through the gateway's `/mcp/<slug>`; the admin deletes the server after a confirmation page,
and the key gets a 404 there."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from keys.services import issue_key
from mcpservers.models import McpCall, McpServer
from tests.browser.robot import Robot
from tests.gateway.conftest import ThreadServer, wait_for
from tests.mcpservers.conftest import UPSTREAM_TOKEN, running_upstream
from tests.mcpservers.test_gateway_mcp import run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


async def _tool_names(session: ClientSession) -> list[str]:
    return sorted(t.name for t in (await session.list_tools()).tools)


def tool_names(url: str, key: str) -> list[str]:
    """What `key` lists on `url`, through the SDK's client (on a thread of its own: Playwright's
    sync API keeps an event loop on this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run, url, key, _tool_names).result()[0]


async def _call_refused(session: ClientSession) -> int:
    try:
        await session.call_tool("delete_everything", {})
    except MCPError as refused:
        return refused.code
    raise AssertionError("a disabled tool was called")


def call_refused(url: str, key: str) -> int:
    """The JSON-RPC error code `key` gets calling the disabled tool on `url`."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run, url, key, _call_refused).result()[0]


def initialize(url: str, key: str) -> httpx.Response:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream"}
    return httpx.post(url, json=hello, headers=headers, timeout=30)


def test_admin_registers_checks_limits_grants_and_deletes_an_mcp_server(
    live_server, browser, admin, alice, mallory, tmp_path, settings
):
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    key, plaintext = issue_key(owner=alice, name="laptop")
    _, mallorys = issue_key(owner=mallory, name="desk")
    with running_upstream(tmp_path) as upstream:
        gateway = ThreadServer().start()
        try:
            robot = Robot(browser.new_context().new_page(), live_server.url)
            robot.goto("/")
            robot.log_in("admin", "admin-pass-123")
            robot.click("nav >> text=MCP servers")
            robot.click("text=Add MCP server")
            robot.fill("#id_name", "Issue tracker")
            robot.fill("#id_slug", "tracker")
            robot.fill("#id_url", upstream.url)
            robot.page.select_option("#id_auth", "bearer")
            robot.fill("#id_bearer_token", UPSTREAM_TOKEN)
            robot.click("main button[type=submit]")
            robot.page.wait_for_url(re.compile(r".*/mcp-servers/\d+/$"))  # its page, not checked yet
            server = McpServer.objects.get(slug="tracker")
            assert server.bearer_token == UPSTREAM_TOKEN  # stored (encrypted), never shown again
            assert UPSTREAM_TOKEN not in robot.page.content()

            assert robot.page.url == f"{live_server.url}/mcp-servers/{server.pk}/"
            assert "Not checked yet" in robot.text("main")
            robot.click("button:text-is('Check now')")
            assert "Issue tracker answered with 8 tools." in robot.text(".flash-success")
            tools = robot.text("main table >> nth=0")
            for name in ("debug_headers", "delete_everything", "echo", "whoami"):
                assert name in tools

            row = robot.page.locator("main table >> nth=0").locator("tr", has_text="delete_everything")
            row.locator("button:text-is('Disable')").click()
            robot.clicks += 1
            assert "Tool delete_everything disabled." in robot.text(".flash-success")
            assert not server.tools.get(name="delete_everything").enabled

            robot.page.select_option("#id_key", label=f"alice · laptop ({key.masked})")
            robot.click("button:text-is('Add grant')")
            assert "key laptop of alice" in robot.text("main")
            assert robot.axe_violations() == []

            # Alice's key, through the gateway: every enabled tool of the server, not the disabled one.
            url = f"{gateway.url}/mcp/tracker"
            assert tool_names(url, plaintext) == ["big", "debug_headers", "echo", "hang", "refuse", "steps", "whoami"]
            assert initialize(url, mallorys).status_code == 404  # no grant for mallory: nothing here

            # The disabled tool, called anyway, is refused and recorded; the calls page says why in
            # the language of the admin who reads it.
            assert call_refused(url, plaintext) == -32003
            wait_for(lambda: McpCall.objects.filter(tool="delete_everything", status="forbidden").exists())
            admin.language = "zh-hans"
            admin.save(update_fields=["language"])
            robot.page.goto(f"{live_server.url}/mcp-servers/calls/")
            assert "不允许此密钥调用" in robot.text("main") and "not allowed" not in robot.text("main")
            admin.language = "en"  # and back (the switch's cookie says zh-hans now: a choice is needed)
            admin.save(update_fields=["language"])
            robot.page.goto(f"{live_server.url}/mcp-servers/{server.pk}/")

            robot.click("a[role=button]:text-is('Delete')")
            assert "Delete the MCP server Issue tracker?" in robot.text("main")
            assert McpServer.objects.filter(slug="tracker").exists()  # asked first, nothing deleted yet
            robot.click("main button[type=submit]:text-is('Delete MCP server')")
            assert "MCP server Issue tracker deleted." in robot.text(".flash-success")
            assert not McpServer.objects.filter(slug="tracker").exists()
            assert initialize(url, plaintext).status_code == 404
            assert robot.console_errors == []
        finally:
            gateway.stop()
