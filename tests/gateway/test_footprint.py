"""What a gateway process loads before its first request, and what a request leaves behind
(issue 32: RSS ≤ 120 MiB after a run).

The official `mcp` SDK brings pydantic, starlette, anyio and their kin: ~40 MiB of every process's
memory. It is loaded by the first MCP request (`gateway.asgi.serve_mcp`) or the first MCP server
check (`mcpservers.services.check_server`), never by starting a web, gateway or worker process.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import httpx

from gateway.http import Request
from tests.gateway.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import django
django.setup()
import portal.asgi
import portal.celery
portal.asgi.application
heavy = sorted(name for name in ("mcp", "mcp_types", "pydantic", "starlette") if name in sys.modules)
print(",".join(heavy) or "none")
"""


def test_starting_a_process_does_not_load_the_mcp_sdk(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "none"


def test_a_finished_request_leaves_nothing_for_the_cyclic_collector(setup, gateway_url):
    """Every object of a request goes when nothing refers to it any more, by reference counting. A
    reference cycle through the request (its `send` was a closure over itself) kept all of them,
    uvicorn's cycle, the call, its usage event, until the cyclic collector ran: under load ~10,000
    objects and ~8 MiB of RSS held at any time, and the collector's passes over them. The collector
    is off during the traffic here, then one pass keeps what it found unreachable: none of it may be a
    request's. Non-streaming, streaming, a model list and refused requests."""
    url = f"{gateway_url}/v1"
    good = {"Authorization": f"Bearer {setup.plaintext}"}
    chat = {"model": setup.model.name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}

    def traffic(client: httpx.Client) -> None:
        assert client.post(f"{url}/chat/completions", json=chat, headers=good).status_code == 200
        with client.stream("POST", f"{url}/chat/completions", json={**chat, "stream": True}, headers=good) as r:
            assert r.status_code == 200 and b"[DONE]" in r.read()
        assert client.get(f"{url}/models", headers=good).status_code == 200
        refused = client.post(f"{url}/chat/completions", json=chat, headers={"Authorization": "Bearer no"})
        assert refused.status_code == 401
        assert client.post(f"{url}/chat/completions", json={**chat, "model": "none"}, headers=good).status_code == 404
        msgs = {"model": setup.model.name, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        assert client.post(f"{url}/messages", json=msgs, headers=good).status_code == 200
        with client.stream("POST", f"{url}/messages", json={**msgs, "stream": True}, headers=good) as r:
            assert r.status_code == 200 and b"message_stop" in r.read()
        resp = {"model": setup.model.name, "input": "hi", "max_output_tokens": 16}
        assert client.post(f"{url}/responses", json=resp, headers=good).status_code == 200
        with client.stream("POST", f"{url}/responses", json={**resp, "stream": True}, headers=good) as r:
            assert r.status_code == 200 and b"response.completed" in r.read()
        legacy = {"model": setup.model.name, "prompt": "hi", "max_tokens": 5}
        assert client.post(f"{url}/completions", json=legacy, headers=good).status_code == 200
        emb = {"model": setup.model.name, "input": "hi"}
        assert client.post(f"{url}/embeddings", json=emb, headers=good).status_code == 200

    with httpx.Client(timeout=60) as client:
        traffic(client)  # caches filled, connections open
        gc.collect()
        gc.disable()
        try:
            for _ in range(10):
                traffic(client)
            # The last handler ends after its answer went out: wait until each has (or is held).
            wait_for(lambda: all(o.answered for o in gc.get_objects() if type(o) is Request), 10)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = [o for o in gc.garbage if type(o) is Request]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert left == []
