"""A real MCP server on 127.0.0.1, written with the official SDK: the far end of the gateway's MCP.

Run as `python -m tests.fakes.mcp_upstream PORT CALLS_FILE TOKEN [sse]`. Every tool call is
appended to CALLS_FILE as one JSON line (tool, arguments, the Authorization header it came with),
so a test can prove what reached the server and what did not. Tools:

- `echo(text)`: answers `text`.
- `whoami()`: needs the server's own credential (`Authorization: Bearer TOKEN`), else a tool error.
- `debug_headers()`: a careless tool that answers with the request's headers (credentials too).
- `delete_everything()`: a tool no test key is ever allowed to call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import uvicorn
from mcp.server.mcpserver import Context, MCPServer


def build(calls_file: Path, token: str) -> MCPServer:
    server = MCPServer("fake-upstream")

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
        if record(ctx, "whoami", {}) != f"Bearer {token}":
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

    return server


def main() -> None:
    port, calls_file, token = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    transport = sys.argv[4] if len(sys.argv) > 4 else "streamable-http"
    server = build(calls_file, token)
    app = server.sse_app() if transport == "sse" else server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
