"""A real MCP server on 127.0.0.1, written with the official SDK: the far end of the gateway's MCP.

Run as `python -m tests.fakes.mcp_upstream PORT CALLS_FILE TOKEN [streamable-http|sse|oauth]`. Every tool call is
appended to CALLS_FILE as one JSON line (tool, arguments, the Authorization header it came with),
so a test can prove what reached the server and what did not. Tools (less those named in the
environment's FAKE_MCP_HIDE, comma-separated):

- `echo(text)`: answers `text`.
- `whoami()`: needs the server's own credential (`Authorization: Bearer TOKEN`), else a tool error.
- `debug_headers()`: a careless tool that answers with the request's headers (credentials too).
- `delete_everything()`: a tool no test key is ever allowed to call.
- `big(size)`: answers `size` characters.
- `refuse()`: answers a JSON-RPC error whose message carries TOKEN.
- `steps()`: reports progress three times and logs each step (the third log line carries TOKEN),
  then answers once the file CALLS_FILE + ".go" exists (a test creates it when it saw the progress).
- `hang()`: never answers (a test stops the server while it hangs); when the call is cancelled
  (the client went away), `hang:cancelled` is appended to CALLS_FILE.

In `oauth` mode the server is also its own OAuth authorization server (issuer = its root URL):
`/mcp` needs an access token from `POST /token` (client-credentials grant, client `portal`, secret
TOKEN), discovered through the SDK's protected-resource metadata; `whoami` then expects that token.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import anyio
import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

ACCESS_TOKEN = "oauth-access-token-9d8e7f6a5b"
CLIENT_ID = "portal"


class Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id=CLIENT_ID, scopes=[]) if token == ACCESS_TOKEN else None


def build(calls_file: Path, token: str, issuer: str | None = None) -> MCPServer:
    if issuer is None:
        server = MCPServer("fake-upstream")
        expected = f"Bearer {token}"
    else:
        settings = AuthSettings(issuer_url=issuer, resource_server_url=f"{issuer}/mcp", validate_token_resource=False)
        server = MCPServer("fake-upstream", auth=settings, token_verifier=Verifier())
        expected = f"Bearer {ACCESS_TOKEN}"
        add_authorization_server(server, issuer, token, calls_file)

    def record(ctx: Context, tool: str, arguments: dict) -> str:
        request = ctx.request_context.request
        authorization = request.headers.get("authorization", "") if request is not None else ""
        with calls_file.open("a") as f:
            f.write(json.dumps({"tool": tool, "arguments": arguments, "authorization": authorization}) + "\n")
        return authorization

    @server.tool()
    def echo(text: str, ctx: Context) -> str:
        """Answer the text it was given."""
        record(ctx, "echo", {"text": text})
        return text

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Say whether the caller presented the server's own credential."""
        if record(ctx, "whoami", {}) != expected:
            raise ValueError("unauthorized: this tool needs the server's credential")
        return "the team's service account"

    @server.tool()
    def debug_headers(ctx: Context) -> str:
        """A careless tool: answers with the headers it was sent (credentials included)."""
        record(ctx, "debug_headers", {})
        request = ctx.request_context.request
        return json.dumps(dict(request.headers) if request is not None else {})

    @server.tool()
    def delete_everything(ctx: Context) -> str:
        """A dangerous tool."""
        record(ctx, "delete_everything", {})
        return "deleted"

    @server.tool()
    def big(size: int, ctx: Context) -> str:
        """Answer `size` characters."""
        record(ctx, "big", {"size": size})
        return "x" * size

    @server.tool()
    def refuse(ctx: Context) -> str:
        """Fail with a JSON-RPC error in the server's own words (its credential in them)."""
        record(ctx, "refuse", {})
        raise MCPError(-32050, f"refused, and here is my credential: {token}")

    @server.tool()
    async def steps(ctx: Context) -> str:
        """Report progress three times, logging each step, then answer when told to."""
        record(ctx, "steps", {})
        for step in (1, 2, 3):
            await ctx.report_progress(step, 3, f"step {step} of 3")
            await ctx.info(f"step {step} done" + (f" with {token}" if step == 3 else ""))
        go = calls_file.with_name(calls_file.name + ".go")
        while not go.exists():  # the test's signal that its client saw the progress
            await anyio.sleep(0.02)
        return "all steps done"

    @server.tool()
    async def hang(ctx: Context) -> str:
        """Never answer."""
        record(ctx, "hang", {})
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            with calls_file.open("a") as f:
                f.write(json.dumps({"tool": "hang:cancelled", "arguments": {}}) + "\n")
            raise
        return "never"

    return server


def add_authorization_server(server: MCPServer, issuer: str, secret: str, calls_file: Path) -> None:
    """RFC 8414 metadata and a token endpoint for the client-credentials grant (HTTP Basic)."""

    @server.custom_route("/.well-known/oauth-authorization-server", methods=["GET"])
    async def metadata(request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": issuer,
                "authorization_endpoint": f"{issuer}/authorize",
                "token_endpoint": f"{issuer}/token",
                "response_types_supported": ["code"],
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            }
        )

    @server.custom_route("/token", methods=["POST"])
    async def issue(request: Request) -> Response:
        form = await request.form()
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{secret}".encode()).decode()
        basic = request.headers.get("authorization") == expected
        posted = form.get("client_id") == CLIENT_ID and form.get("client_secret") == secret
        with calls_file.open("a") as f:
            f.write(json.dumps({"tool": "oauth:token", "arguments": {"grant_type": form.get("grant_type")}}) + "\n")
        if form.get("grant_type") != "client_credentials" or not (basic or posted):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        return JSONResponse({"access_token": ACCESS_TOKEN, "token_type": "Bearer", "expires_in": 3600})


def main() -> None:
    port, calls_file, token = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    transport = sys.argv[4] if len(sys.argv) > 4 else "streamable-http"
    issuer = f"http://127.0.0.1:{port}" if transport == "oauth" else None
    server = build(calls_file, token, issuer)
    for name in filter(None, os.environ.get("FAKE_MCP_HIDE", "").split(",")):
        server.remove_tool(name)  # a server that (for now) lists fewer tools
    if transport == "sse":
        app = server.sse_app()
    else:  # "json": Streamable HTTP that answers each request with one JSON body, no event stream
        app = server.streamable_http_app(json_response=transport == "json")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
