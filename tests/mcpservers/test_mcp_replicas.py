"""The MCP per-key limit across two gateway replicas (two uvicorn processes on the same PostgreSQL
and Redis, as the /v1 limits are tested in tests/gateway/test_limits.py): a burst of tool calls
spread over both lets exactly the limit through in total, not the limit per replica, and only those
reach the MCP server."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from keys.services import issue_key
from mcpservers.models import McpCall
from mcpservers.services import check_server
from tests.gateway.conftest import spawn_gateway, wait_for  # noqa: F401 - the fixture
from tests.mcpservers.conftest import UPSTREAM_TOKEN
from tests.mcpservers.factories import grant, make_server

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.services, pytest.mark.slow]
LIMIT, CALLS = 10, 40
RATE_LIMITED = -32004


def jsonrpc_answer(answer: httpx.Response) -> dict:
    """The answer to the request: the JSON body, or on an event stream (a tools/call, which may
    carry notifications first) the message with an id."""
    if not answer.headers["content-type"].startswith("text/event-stream"):
        return answer.json()
    messages = [
        json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:") and line[5:].strip()
    ]
    return next(m for m in messages if "id" in m)


async def burst(urls: list[str], key: str, n: int) -> list[dict]:
    """`n` tools/call requests at once, spread over `urls` (stateless: each POST stands alone);
    their JSON-RPC answers."""
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    async with httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client:

        async def one(i: int) -> dict:
            call = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
            call["params"] = {"name": "echo", "arguments": {"text": str(i)}}
            answer = await client.post(urls[i % len(urls)], json=call)
            assert answer.status_code == 200, answer.text
            return jsonrpc_answer(answer)

        return await asyncio.gather(*(one(i) for i in range(n)))


def test_the_mcp_limit_is_exact_across_two_replicas(spawn_gateway, mcp_upstream, alice):  # noqa: F811
    server = make_server(slug="tracker", url=mcp_upstream.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    assert check_server(server.pk).status == "healthy"
    key, plaintext = issue_key(owner=alice, name="laptop")
    grant(server, tool="echo", key=key)
    replicas = spawn_gateway(2, GATEWAY_MCP_CALLS_PER_MINUTE=str(LIMIT))

    answers = asyncio.run(burst([f"{r.url}/mcp/tracker" for r in replicas], plaintext, CALLS))
    passed = [a for a in answers if "result" in a and not a["result"].get("isError")]
    refused = [a for a in answers if a.get("error", {}).get("code") == RATE_LIMITED]
    # Each replica got CALLS / 2 = 20 calls: with a limit per replica, twice LIMIT would pass.
    assert (len(passed), len(refused)) == (LIMIT, CALLS - LIMIT), json.dumps(answers)[:2000]
    assert len(mcp_upstream.calls()) == LIMIT  # the refused ones never reached the server
    wait_for(lambda: McpCall.objects.filter(key=key).count() == CALLS)
    assert McpCall.objects.filter(key=key, status="rate_limited").count() == CALLS - LIMIT
