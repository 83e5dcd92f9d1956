"""MCP through the gateway, end to end: the official SDK's client → /mcp/<slug> with a developer key →
the real MCP server (official SDK) on 127.0.0.1 with the team's bearer token."""

from __future__ import annotations

import asyncio
import json

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway.surfaces.mcp import STORED_CATALOG
from keys.services import issue_key
from mcpservers.access import allowed_tools
from mcpservers.models import McpCall, McpServer
from mcpservers.services import check_server, set_tool_enabled
from mcpservers.upstream import MAX_ANSWER_BYTES
from tests.fakes import processes
from tests.gateway.conftest import spawn_gateway, wait_for  # noqa: F401 - the fixture
from tests.mcpservers.conftest import UPSTREAM_TOKEN, running_upstream, start_upstream
from tests.mcpservers.factories import grant, make_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services]


async def _session_run(url: str, key: str, work):
    seen: list[str] = []

    async def log(response: httpx2.Response) -> None:
        await response.aread()
        seen.append(response.text)
        seen.append(json.dumps(dict(response.headers)))

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, event_hooks={"response": [log]})
    async with http, streamable_http_client(url, http_client=http) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await work(session), seen


def in_chinese(call: McpCall) -> str:
    """The call's error as the calls page shows it to a reader of 中文."""
    from django.utils import translation

    with translation.override("zh-hans"):
        return call.error_text


def run(url: str, key: str, work):
    """Run `work(session)` in an MCP client session on `url` with `key`; (result, every response body
    and header set the client received)."""
    return asyncio.run(_session_run(url, key, work))


@pytest.fixture
def tracker(mcp_upstream, alice):
    server = make_server(slug="tracker", url=mcp_upstream.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    assert check_server(server.pk).status == "healthy"
    return server


def test_health_check_lists_the_servers_tools(tracker):
    assert sorted(tracker.tools.values_list("name", flat=True)) == [
        "big",
        "debug_headers",
        "delete_everything",
        "echo",
        "hang",
        "refuse",
        "steps",
        "whoami",
    ]
    assert tracker.tools.get(name="echo").input_schema["properties"]["text"]["type"] == "string"


def test_a_tool_an_admin_disabled_comes_back_disabled_after_the_server_stopped_listing_it(tmp_path, monkeypatch, alice):
    with running_upstream(tmp_path) as upstream:
        server = make_server(slug="tracker", url=upstream.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
        assert check_server(server.pk).status == "healthy"
    set_tool_enabled(server.tools.get(name="delete_everything"), False)
    key, _plaintext = issue_key(owner=alice, name="laptop")
    grant(server, key=key)  # every enabled tool of the server
    grant(server, tool="delete_everything", user=alice)

    def check_against_a_restarted_server() -> None:
        with running_upstream(tmp_path) as restarted:
            McpServer.objects.filter(pk=server.pk).update(url=restarted.url)
            assert check_server(server.pk).status == "healthy"

    monkeypatch.setenv("FAKE_MCP_HIDE", "delete_everything")  # a redeploy lists it late, say
    check_against_a_restarted_server()
    assert "delete_everything" not in allowed_tools(key, server).values_list("name", flat=True)
    monkeypatch.delenv("FAKE_MCP_HIDE")
    check_against_a_restarted_server()

    tool = server.tools.get(name="delete_everything")
    assert not tool.enabled and tool.grants.count() == 1
    assert "delete_everything" not in allowed_tools(key, server).values_list("name", flat=True)
    # An enabled tool the server stops listing still goes, with its grants.
    grant(server, tool="echo", user=alice)
    monkeypatch.setenv("FAKE_MCP_HIDE", "echo")
    check_against_a_restarted_server()
    assert not server.tools.filter(name="echo").exists()


def test_a_key_lists_and_calls_only_its_allowed_tools(gateway_url, tracker, mcp_upstream, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="echo", key=key)
    grant(tracker, tool="whoami", user=alice)
    url = f"{gateway_url}/mcp/tracker"

    async def work(session: ClientSession):
        listed = sorted(t.name for t in (await session.list_tools()).tools)
        echoed = await session.call_tool("echo", {"text": "hello"})
        who = await session.call_tool("whoami", {})
        with pytest.raises(MCPError) as refused:
            await session.call_tool("delete_everything", {})
        return listed, echoed, who, refused.value

    (listed, echoed, who, refused), seen = run(url, plaintext, work)
    assert listed == ["echo", "whoami"]
    assert echoed.content[0].text == "hello" and not echoed.is_error
    # The tool that needs the server's own credential got it, from the gateway.
    assert who.content[0].text == "the team's service account" and not who.is_error
    assert refused.code == -32003 and "not allowed" in refused.message
    # The refused call never reached the server; the allowed ones came with the team's token.
    calls = mcp_upstream.calls()
    assert [c["tool"] for c in calls] == ["echo", "whoami"]
    assert all(c["authorization"] == f"Bearer {UPSTREAM_TOKEN}" for c in calls)
    # Nothing the developer received carries the team's credential.
    assert not any(UPSTREAM_TOKEN in text for text in seen)
    records = wait_for(lambda: list(McpCall.objects.order_by("created")) if McpCall.objects.count() == 3 else None)
    assert [(r.tool, r.status, r.key_id, r.user_id) for r in records] == [
        ("echo", "ok", key.pk, alice.pk),
        ("whoami", "ok", key.pk, alice.pk),
        ("delete_everything", "forbidden", key.pk, alice.pk),
    ]
    assert all(r.duration_ms is not None and r.arguments is None for r in records)
    assert records[2].error == "not allowed" and in_chinese(records[2]) == "不允许此密钥调用"


def test_it_refuses_unknown_keys_and_servers_the_key_may_not_use(gateway_url, tracker, alice, mallory):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, key=key)
    _other, other_plain = issue_key(owner=mallory, name="m")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream"}
    no_key = httpx.post(f"{gateway_url}/mcp/tracker", json=body, headers=headers)
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == -32001
    for who in (other_plain,):
        answer = httpx.post(
            f"{gateway_url}/mcp/tracker", json=body, headers={**headers, "authorization": f"Bearer {who}"}
        )
        assert answer.status_code == 404 and answer.json()["error"]["code"] == -32002
    missing = httpx.post(
        f"{gateway_url}/mcp/nope", json=body, headers={**headers, "authorization": f"Bearer {plaintext}"}
    )
    assert missing.status_code == 404 and missing.json()["error"]["code"] == -32002


def test_it_rate_limits_tool_calls_per_key(gateway_url, tracker, mcp_upstream, alice):
    key, plaintext = issue_key(owner=alice, name="laptop", requests_per_minute=2)
    grant(tracker, key=key)

    async def work(session: ClientSession):
        await session.call_tool("echo", {"text": "1"})
        await session.call_tool("echo", {"text": "2"})
        with pytest.raises(MCPError) as refused:
            await session.call_tool("echo", {"text": "3"})
        return refused.value

    refused, _seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert refused.code == -32004 and "2 MCP tool calls per minute" in refused.message
    assert refused.data["retry_after"] >= 1
    assert [c["arguments"]["text"] for c in mcp_upstream.calls()] == ["1", "2"]
    record = wait_for(lambda: McpCall.objects.filter(status="rate_limited").first())
    assert record.error == refused.message  # the English the client got…
    assert "每分钟最多可调用 2 次 MCP 工具" in in_chinese(record)  # …read on the calls page in 中文


def test_an_answer_too_large_to_pass_on_is_said_so(gateway_url, tracker, mcp_upstream, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="big", key=key)

    async def work(session: ClientSession):
        # (The answer holds the text twice: as content and as structured content.)
        passed = await session.call_tool("big", {"size": MAX_ANSWER_BYTES // 3})
        with pytest.raises(MCPError) as too_large:
            await session.call_tool("big", {"size": MAX_ANSWER_BYTES + 1})
        return passed, too_large.value

    (passed, too_large), _seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert len(passed.content[0].text) == MAX_ANSWER_BYTES // 3
    said = "MCP server 'tracker' answered tools/call 'big' with more than 1 MiB, more than the gateway passes on."
    assert too_large.code == -32005 and too_large.message == said
    records = wait_for(lambda: list(McpCall.objects.order_by("created")) if McpCall.objects.count() == 2 else None)
    assert [(r.status, r.error) for r in records] == [("ok", ""), ("upstream_error", said)]


@pytest.mark.parametrize(
    ("upstream_kind", "transport", "slug"),
    [("json", "streamable-http", "plain"), ("sse", "sse", "legacy")],
    ids=["plain-json-answers", "legacy-sse"],
)
def test_an_answer_too_large_from_other_kinds_of_upstream_is_said_so_too(
    gateway_url, tmp_path, alice, upstream_kind, transport, slug
):
    """A plain-JSON answer (`json_response`) was read whole, however large; a legacy SSE server's
    oversize event was said as `SSEError`."""
    key, plaintext = issue_key(owner=alice, name="laptop")
    with running_upstream(tmp_path, upstream_kind) as upstream:
        server = make_server(
            slug=slug, url=upstream.url, tools=(), transport=transport, auth="bearer", bearer_token=UPSTREAM_TOKEN
        )
        assert check_server(server.pk).status == "healthy"
        grant(server, tool="big", key=key)

        async def work(session: ClientSession):
            passed = await session.call_tool("big", {"size": MAX_ANSWER_BYTES // 3})
            with pytest.raises(MCPError) as too_large:
                await session.call_tool("big", {"size": MAX_ANSWER_BYTES + 1})
            return passed, too_large.value

        (passed, too_large), _seen = run(f"{gateway_url}/mcp/{slug}", plaintext, work)
    assert len(passed.content[0].text) == MAX_ANSWER_BYTES // 3
    said = f"MCP server '{slug}' answered tools/call 'big' with more than 1 MiB, more than the gateway passes on."
    assert too_large.code == -32005 and too_large.message == said


def test_an_upstreams_jsonrpc_error_passes_on_its_code_not_its_words(gateway_url, tracker, mcp_upstream, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="refuse", key=key)

    async def work(session: ClientSession):
        with pytest.raises(MCPError) as refused:
            await session.call_tool("refuse", {})
        return refused.value

    refused, seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    said = "MCP server 'tracker' refused tools/call 'refuse' (JSON-RPC error -32050)."
    assert refused.code == -32005 and refused.message == said
    assert not any(UPSTREAM_TOKEN in text for text in seen)
    record = wait_for(lambda: McpCall.objects.filter(tool="refuse").first())
    assert (record.status, record.error) == ("upstream_error", said)


def test_an_upstream_stopping_mid_call_is_said_to_have_closed_the_connection(gateway_url, tmp_path, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    upstream = start_upstream(tmp_path)
    try:
        server = make_server(slug="tracker", url=upstream.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
        assert check_server(server.pk).status == "healthy"
        grant(server, tool="hang", key=key)

        async def work(session: ClientSession):
            call = asyncio.ensure_future(session.call_tool("hang", {}))
            while not upstream.calls():  # the call reached the server: stop it there
                await asyncio.sleep(0.05)
            processes.stop(upstream.process)
            with pytest.raises(MCPError) as stopped:
                await call
            return stopped.value

        stopped, _seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    finally:
        processes.stop(upstream.process)
    said = "MCP server 'tracker' is unreachable or failed: the connection closed before it answered."
    assert stopped.code == -32005 and stopped.message == said
    record = wait_for(lambda: McpCall.objects.filter(tool="hang").first())
    assert (record.status, record.error) == ("upstream_error", said)


def test_a_down_upstream_is_a_clear_jsonrpc_error_and_lists_its_stored_tools(gateway_url, tracker, mcp_upstream, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="echo", key=key)
    grant(tracker, tool="whoami", key=key)
    tracker.tools.filter(name="whoami").update(enabled=False)  # switched off since: not listed
    mcp_upstream.process.terminate()
    mcp_upstream.process.wait(20)

    async def work(session: ClientSession):
        with pytest.raises(MCPError) as failed:
            await session.call_tool("echo", {"text": "x"})
        return failed.value, await session.list_tools()

    (failed, listing), seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert failed.code == -32005 and "tracker" in failed.message and "unreachable" in failed.message
    # The client still starts with the tools the last check stored, and is told they are stored ones.
    assert [(t.name, t.input_schema["properties"]["text"]["type"]) for t in listing.tools] == [("echo", "string")]
    marker = listing.meta[STORED_CATALOG]
    tracker.refresh_from_db()
    assert "unreachable" in marker["reason"] and marker["checked"] == tracker.last_checked.isoformat()
    assert not any(UPSTREAM_TOKEN in text for text in seen)
    record = wait_for(lambda: McpCall.objects.filter(status="upstream_error").first())
    assert record.tool == "echo" and "unreachable" in record.error
    assert in_chinese(record).startswith("MCP 服务器“tracker”无法访问或出错")
    assert check_server(tracker.pk).status == "down"


def test_a_live_listing_carries_no_stored_catalog_marker(gateway_url, tracker, alice):
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="echo", key=key)

    async def work(session: ClientSession):
        return await session.list_tools()

    listing, _seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert [t.name for t in listing.tools] == ["echo"] and STORED_CATALOG not in (listing.meta or {})


def test_a_careless_upstream_cannot_hand_the_credentials_to_the_developer(gateway_url, mcp_upstream, alice):
    server = make_server(
        slug="careless",
        url=mcp_upstream.url,
        tools=(),
        auth="bearer",
        bearer_token=UPSTREAM_TOKEN,
        headers='{"X-Team-Secret": "team-header-secret-0042"}',
    )
    check_server(server.pk)
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(server, tool="debug_headers", key=key)

    async def work(session: ClientSession):
        return await session.call_tool("debug_headers", {})

    answer, seen = run(f"{gateway_url}/mcp/careless", plaintext, work)
    text = answer.content[0].text
    assert "x-team-secret" in text and "[redacted by the gateway]" in text
    assert not any(secret in "".join(seen) for secret in (UPSTREAM_TOKEN, "team-header-secret-0042"))
    # It did reach the server with both credentials.
    assert mcp_upstream.calls()[-1]["authorization"] == f"Bearer {UPSTREAM_TOKEN}"


def test_arguments_are_kept_redacted_only_where_request_logging_is_on(gateway_url, tracker, alice):
    from keys.models import PayloadLogging

    logged, logged_plain = issue_key(owner=alice, name="logged")
    PayloadLogging.objects.create(key=logged, enabled=True)
    quiet, quiet_plain = issue_key(owner=alice, name="quiet")
    grant(tracker, tool="echo", user=alice)
    secret = "sk-" + "A1b2C3d4" * 5

    async def work(session: ClientSession):
        return await session.call_tool("echo", {"text": f"deploy with {secret}"})

    run(f"{gateway_url}/mcp/tracker", logged_plain, work)
    run(f"{gateway_url}/mcp/tracker", quiet_plain, work)
    kept = wait_for(lambda: McpCall.objects.filter(key=logged).first())
    assert kept.arguments is not None and "deploy with" in kept.arguments["text"]
    assert secret not in json.dumps(kept.arguments)
    assert wait_for(lambda: McpCall.objects.filter(key=quiet).first()).arguments is None


def test_an_sse_upstream_is_served_as_streamable_http(gateway_url, tmp_path, alice):
    with running_upstream(tmp_path, "sse") as upstream:
        server = make_server(
            slug="legacy", url=upstream.url, tools=(), transport="sse", auth="bearer", bearer_token=UPSTREAM_TOKEN
        )
        assert check_server(server.pk).status == "healthy"
        key, plaintext = issue_key(owner=alice, name="laptop")
        grant(server, key=key)

        async def work(session: ClientSession):
            return await session.call_tool("whoami", {})

        who, _seen = run(f"{gateway_url}/mcp/legacy", plaintext, work)
        assert who.content[0].text == "the team's service account"


def test_a_server_behind_oauth_client_credentials(gateway_url, tmp_path, alice):
    """The gateway gets its access token with the client-credentials grant (discovered from the
    server's protected-resource metadata) and calls with it; the developer never sees either."""
    from tests.fakes.mcp_upstream import ACCESS_TOKEN, CLIENT_ID

    with running_upstream(tmp_path, "oauth") as upstream:
        root = upstream.url.removesuffix("/mcp")
        server = make_server(
            slug="oauthed",
            url=upstream.url,
            tools=(),
            auth="oauth",
            oauth_issuer=root,
            oauth_client_id=CLIENT_ID,
            oauth_client_secret=UPSTREAM_TOKEN,
        )
        assert check_server(server.pk).status == "healthy", server.last_error
        key, plaintext = issue_key(owner=alice, name="laptop")
        grant(server, key=key)

        async def work(session: ClientSession):
            return await session.call_tool("whoami", {})

        who, seen = run(f"{gateway_url}/mcp/oauthed", plaintext, work)
        assert who.content[0].text == "the team's service account", who
        assert not any(secret in "".join(seen) for secret in (ACCESS_TOKEN, UPSTREAM_TOKEN))
        assert upstream.calls()[-1] == {"tool": "whoami", "arguments": {}, "authorization": f"Bearer {ACCESS_TOKEN}"}
        assert any(c["tool"] == "oauth:token" for c in upstream.calls())


def test_a_client_that_leaves_mid_call_cancels_the_upstream_call(gateway_url, tracker, mcp_upstream, alice):
    """The SDK answers with JSON and never listens to the connection after the body: a client that
    gave up (Esc in the editor) left the upstream tool running, and the gateway's connection to it
    open, until the server's timeout, and the record then blamed the server."""
    McpServer.objects.filter(pk=tracker.pk).update(timeout_seconds=600)  # far beyond this test
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="hang", key=key)

    async def work(session: ClientSession):
        call = asyncio.ensure_future(session.call_tool("hang", {}))
        while not mcp_upstream.calls():  # the call reached the server: now the client leaves
            await asyncio.sleep(0.05)
        return call  # still pending: leaving the session closes the client's connection

    run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert wait_for(lambda: [c["tool"] for c in mcp_upstream.calls()] == ["hang", "hang:cancelled"], timeout=60)
    record = wait_for(lambda: McpCall.objects.filter(tool="hang").first(), timeout=60)
    assert (record.status, record.error) == ("cancelled", "the client disconnected before the tool answered")
    assert in_chinese(record) == "客户端在工具应答前断开了连接"


def test_progress_and_log_messages_reach_the_client_while_the_tool_runs(gateway_url, tracker, mcp_upstream, alice):
    """The gateway answered every call with one JSON body: a tool's progress notifications and log
    messages were dropped, so a client saw nothing until the result (or its own timeout). The
    upstream tool here answers only once the client has seen all three steps."""
    McpServer.objects.filter(pk=tracker.pk).update(timeout_seconds=30)  # bounds the old code's hang
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="steps", key=key)
    go = mcp_upstream.calls_file.with_name(mcp_upstream.calls_file.name + ".go")
    seen: list[tuple] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(("progress", done, total, message))
        if sum(1 for s in seen if s[0] == "progress") == 3:
            go.touch()  # now the upstream tool answers

    async def log(params) -> None:
        seen.append(("log", params.level, params.data))

    async def work(session: ClientSession):
        result = await session.call_tool("steps", {}, progress_callback=progress)
        seen.append(("result", result.content[0].text))
        return result

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {plaintext}"}, timeout=120)

    async def session_run():
        async with http, streamable_http_client(f"{gateway_url}/mcp/tracker", http_client=http) as (read, write):
            async with ClientSession(read, write, logging_callback=log) as session:
                await session.initialize()
                return await work(session)

    result = asyncio.run(session_run())
    assert not result.is_error
    assert [s for s in seen if s[0] == "progress"] == [
        ("progress", 1.0, 3.0, "step 1 of 3"),
        ("progress", 2.0, 3.0, "step 2 of 3"),
        ("progress", 3.0, 3.0, "step 3 of 3"),
    ]
    # The log lines too, in order, the team's credential scrubbed from them; the result last.
    assert [s for s in seen if s[0] == "log"] == [
        ("log", "info", "step 1 done"),
        ("log", "info", "step 2 done"),
        ("log", "info", "step 3 done with [redacted by the gateway]"),
    ]
    assert seen[-1] == ("result", "all steps done")
    record = wait_for(lambda: McpCall.objects.filter(tool="steps").first())
    assert (record.status, record.key_id) == ("ok", key.pk)


def test_calls_with_nul_characters_are_still_on_the_record(gateway_url, tracker, mcp_upstream, alice):
    """PostgreSQL refuses NUL in text and jsonb: a tool name or an argument carrying one left the
    call off the record (the write failed off the request path), though the call had run."""
    from keys.models import PayloadLogging

    key, plaintext = issue_key(owner=alice, name="laptop")
    PayloadLogging.objects.create(key=key, enabled=True)
    grant(tracker, tool="echo", key=key)

    async def work(session: ClientSession):
        echoed = await session.call_tool("echo", {"text": "a\x00b"})
        with pytest.raises(MCPError) as refused:
            await session.call_tool("echo\x00", {})
        return echoed, refused.value

    (echoed, refused), _seen = run(f"{gateway_url}/mcp/tracker", plaintext, work)
    assert echoed.content[0].text == "a\x00b" and refused.code == -32003
    records = wait_for(lambda: list(McpCall.objects.order_by("created")) if McpCall.objects.count() == 2 else None)
    assert [(r.tool, r.status, r.arguments) for r in records] == [
        ("echo", "ok", {"text": "a\ufffdb"}),
        ("echo\ufffd", "forbidden", None),
    ]


def test_a_get_is_told_there_is_no_server_stream_not_held_open(gateway_url, tracker, alice):
    """Stateless, the gateway never sends on a GET stream; the SDK held one open per client and
    server, idle, for as long as the client ran (the TypeScript SDK opens it after initialize and
    takes a 405 as "no stream here", as the spec says)."""
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, key=key)
    headers = {"authorization": f"Bearer {plaintext}", "accept": "text/event-stream"}
    with httpx.stream("GET", f"{gateway_url}/mcp/tracker", headers=headers, timeout=60) as answer:
        status, allow, content_type = answer.status_code, answer.headers.get("allow"), answer.headers["content-type"]
        body = json.loads(answer.read()) if status == 405 else None
    assert (status, allow, content_type) == (405, "POST, DELETE", "application/json")
    assert body["error"]["code"] == -32600 and "POST" in body["error"]["message"]


def _tools_list(url: str, plaintext: str, **headers: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    sent = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {plaintext}", **headers}
    return httpx.post(url, json=body, headers=sent, timeout=60)


def test_a_browser_page_calls_only_from_the_portals_own_origin_or_an_allowed_one(gateway_url, settings, tracker, alice):
    """The MCP spec: servers MUST validate Origin (DNS rebinding: a page at attacker.example, its
    name pointed at the gateway's address, is same-origin to the browser). Any Origin was served."""
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="echo", key=key)
    url = f"{gateway_url}/mcp/tracker"
    port = gateway_url.rsplit(":", 1)[1]

    refused = _tools_list(url, plaintext, origin="http://attacker.example")
    assert refused.status_code == 403 and refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error["code"] == -32007 and "GATEWAY_MCP_ALLOWED_ORIGINS" in error["message"]
    assert "'http://attacker.example'" in error["message"]
    # Rebound: the page's host name is the one the browser sends as Host, too.
    rebound = _tools_list(url, plaintext, origin=f"http://attacker.example:{port}", host=f"attacker.example:{port}")
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == -32007
    assert _tools_list(url, plaintext, origin="null").status_code == 403  # a sandboxed page, a file
    assert httpx.get(url, headers={"origin": "http://attacker.example"}, timeout=60).status_code == 403

    # The portal's own pages (the address it was reached at, a host it answers to), no Origin at
    # all (editors, CLIs, SDKs), PORTAL_PUBLIC_URL's and the listed ones are served.
    settings.PORTAL_PUBLIC_URL = "https://llm.example.com"
    settings.GATEWAY_MCP_ALLOWED_ORIGINS = ["https://Tools.example.com:443/"]
    for origin in (gateway_url, "https://llm.example.com", "https://tools.example.com", None):
        answer = _tools_list(url, plaintext, **({"origin": origin} if origin else {}))
        assert answer.status_code == 200, (origin, answer.text)
        assert [t["name"] for t in answer.json()["result"]["tools"]] == ["echo"]
    assert _tools_list(url, plaintext, origin="https://tools.example.com:8443").status_code == 403


def test_a_wildcard_in_allowed_hosts_lets_no_other_page_call(spawn_gateway, tracker, alice):  # noqa: F811
    """With DJANGO_ALLOWED_HOSTS=* every host name was one the portal answers to, so a rebinding
    page (its Origin's host sent as Host too) passed the same-host rule and was served."""
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, tool="echo", key=key)
    (gateway,) = spawn_gateway(1, DJANGO_ALLOWED_HOSTS="*", PORTAL_PUBLIC_URL="https://llm.example.com")
    url = f"{gateway.url}/mcp/tracker"
    for host in ("evil.example", f"evil.example:{gateway.port}"):
        refused = _tools_list(url, plaintext, origin=f"http://{host}", host=host)
        assert (refused.status_code, refused.headers["content-type"]) == (403, "application/json"), refused.text
        body = refused.json()
        assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", None, -32007)
        assert f"'http://{host}'" in body["error"]["message"]
    # The portal's own pages still call.
    answer = _tools_list(url, plaintext, origin="https://llm.example.com")
    assert answer.status_code == 200, answer.text
    assert [t["name"] for t in answer.json()["result"]["tools"]] == ["echo"]


def test_a_body_the_sdk_would_not_take_is_refused_as_a_short_jsonrpc_error(gateway_url, tracker, alice):
    """The SDK refused a wrong Content-Type and a body over 4 MiB in plain text, and a message that
    is not JSON-RPC with a page of pydantic's report (code -32602, invalid params)."""
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(tracker, key=key)
    url = f"{gateway_url}/mcp/tracker"
    headers = {"accept": "application/json, text/event-stream", "authorization": f"Bearer {plaintext}"}
    as_json = {**headers, "content-type": "application/json"}
    newer = {**headers, "content-type": "text/plain", "mcp-protocol-version": "2026-07-28"}  # the SDK's other path
    cases = [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', {**headers, "content-type": "text/plain"}, 400),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', newer, 400),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "%s"}}' % (b"x" * (4 << 20)), as_json, 413),
        (b'{"jsonrpc": "2.0", "id": 1}', as_json, 400),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}', as_json, 400),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', as_json, 400),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', as_json, 400),
        (b"{nope", as_json, 400),
    ]
    errors = []
    for body, sent, status in cases:
        answer = httpx.post(url, content=body, headers=sent, timeout=60)
        assert (answer.status_code, answer.headers.get("content-type")) == (status, "application/json"), answer.text
        reply = answer.json()
        assert reply["jsonrpc"] == "2.0" and reply["id"] is None
        errors.append((reply["error"]["code"], reply["error"]["message"]))
    assert errors == [
        (-32600, "The request's Content-Type is 'text/plain': send the JSON-RPC message as application/json."),
        (-32600, "The request's Content-Type is 'text/plain': send the JSON-RPC message as application/json."),
        (-32600, "The request body is larger than 4 MiB."),
        (-32600, 'The request body has no "method" (nor, as a response, "result" or "error").'),
        (-32600, 'The request body is not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0".'),
        (
            -32600,
            "The request body is a JSON array: send one JSON-RPC message per request (batches are not supported).",
        ),
        (-32600, 'The request\'s "params" must be a JSON object.'),
        (-32700, "The request body is not valid JSON (key must be a string at line 1 column 2)."),
    ]
