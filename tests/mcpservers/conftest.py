"""MCP rig: a real MCP server written with the official SDK (`tests/fakes/mcp_upstream.py`) in a
subprocess on 127.0.0.1, and the real gateway (uvicorn in a thread) in front of it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes import processes
from tests.gateway.conftest import ThreadServer
from tests.services import free_port

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_TOKEN = "mcp-upstream-secret-7f3a9c"


@dataclass
class McpUpstream:
    url: str
    calls_file: Path
    token: str
    process: subprocess.Popen

    def calls(self) -> list[dict]:
        if not self.calls_file.exists():
            return []
        return [json.loads(line) for line in self.calls_file.read_text().splitlines() if line]


@contextmanager
def running_upstream(tmp_path: Path, transport: str = "streamable-http") -> Iterator[McpUpstream]:
    """The fake MCP server (`streamable-http`, `json`, `sse` or `oauth`) for the duration of the block."""
    upstream = start_upstream(tmp_path, transport)
    try:
        yield upstream
    finally:
        processes.stop(upstream.process)


def start_upstream(tmp_path: Path, transport: str = "streamable-http") -> McpUpstream:
    port = free_port()
    calls = tmp_path / f"mcp-calls-{uuid.uuid4().hex[:6]}.jsonl"
    args = [sys.executable, "-m", "tests.fakes.mcp_upstream", str(port), str(calls), UPSTREAM_TOKEN, transport]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                processes.stop(process)
                raise RuntimeError("the MCP upstream did not start") from None
            time.sleep(0.05)
    path = "/sse" if transport == "sse" else "/mcp"
    return McpUpstream(f"http://127.0.0.1:{port}{path}", calls, UPSTREAM_TOKEN, process)


@pytest.fixture
def mcp_upstream(tmp_path):
    with running_upstream(tmp_path) as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def redis_namespace(monkeypatch):
    """Each test its own Redis key namespace, so rate-limit windows never leak between tests."""
    ns = "mcptest-" + uuid.uuid4().hex[:10]
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", ns)
    return ns  # the gateway processes a test spawns share it (tests.gateway.conftest.spawn_gateway)


@pytest.fixture
def gateway_url(transactional_db, settings, tmp_path):
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    server = ThreadServer().start()
    yield server.url
    server.stop()
