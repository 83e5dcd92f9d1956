"""Static files through the real ASGI app under uvicorn, warnings turned into errors in the server:
WhiteNoise's answers (variants, validators, cache headers, HEAD, ranges, 404) with the files'
exact bytes, no "StreamingHttpResponse must consume synchronous iterators" warning, and no file
left open by a client that leaves mid-file."""

from __future__ import annotations

import gzip
import os
import socket
import uuid
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.gateway.conftest import ProcessServer, database_url, wait_for

pytestmark = [pytest.mark.services, pytest.mark.slow]

CSS = b"body { color: #222; }\n" * 2000
BIG = 32 << 20  # far more than the socket buffers hold (below): the server is mid-file when the client leaves


@pytest.fixture(scope="module")
def served(django_db_setup, tmp_path_factory):
    """One uvicorn process on a data folder whose collected static files hold a stylesheet with its
    gzip and brotli variants and a big file; returns it with that folder."""
    data = tmp_path_factory.mktemp("static-data")
    collected = data / "staticfiles"
    collected.mkdir()
    (collected / "site.css").write_bytes(CSS)
    (collected / "site.css.gz").write_bytes(gzip.compress(CSS))
    (collected / "site.css.br").write_bytes(b"brotli-stand-in " + os.urandom(64))  # served as stored
    (collected / "big.bin").write_bytes(b"\1" * BIG)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "PORTAL_DATA_DIR": str(data),
        "GATEWAY_REDIS_NAMESPACE": "static-" + uuid.uuid4().hex[:10],
        "PYTHONWARNINGS": "error",
    }
    server = ProcessServer(env)
    try:
        server.wait_ready()
        yield server, collected
    finally:
        server.stop()
    assert "Traceback" not in server.log.text and "Warning" not in server.log.text, server.log.text[-4000:]


def raw(response: httpx.Response) -> bytes:
    """The body as sent (not decoded)."""
    return b"".join(response.iter_raw())


def get(server: ProcessServer, path: str, method: str = "GET", **headers: str) -> tuple[httpx.Response, bytes]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream(method, path, headers={"Accept-Encoding": "identity", **headers}) as response:
            return response, raw(response)


def test_static_files_are_whitenoise_answers_with_the_files_bytes(served):
    server, collected = served
    vendored = settings.BASE_DIR / "static/vendor/chart-4.6.1.umd.min.js"
    response, body = get(server, "/static/vendor/chart-4.6.1.umd.min.js")
    assert response.status_code == 200 and body == vendored.read_bytes()
    assert response.headers["content-type"].startswith("text/javascript")
    assert response.headers["content-length"] == str(len(body))
    assert response.headers["cache-control"] == "max-age=60, public"
    assert response.headers["x-content-type-options"] == "nosniff"  # SecurityMiddleware still wraps it

    plain, body = get(server, "/static/site.css")
    assert body == CSS and plain.headers["vary"] == "Accept-Encoding" and "content-encoding" not in plain.headers
    assert plain.headers["content-type"] == 'text/css; charset="utf-8"'
    for encoding, variant in (("gzip", "site.css.gz"), ("br", "site.css.br")):
        response, body = get(server, "/static/site.css", **{"Accept-Encoding": encoding})
        assert response.headers["content-encoding"] == encoding
        assert body == (collected / variant).read_bytes()
        assert response.headers["content-length"] == str(len(body))

    for validator in ({"If-None-Match": plain.headers["etag"]}, {"If-Modified-Since": plain.headers["last-modified"]}):
        response, body = get(server, "/static/site.css", **validator)
        assert response.status_code == 304 and body == b""
        assert response.headers["etag"] == plain.headers["etag"]

    response, body = get(server, "/static/site.css", "HEAD")
    assert response.status_code == 200 and body == b"" and response.headers["content-length"] == str(len(CSS))

    response, body = get(server, "/static/site.css", Range="bytes=100-199")
    assert response.status_code == 206 and body == CSS[100:200]
    assert response.headers["content-range"] == f"bytes 100-199/{len(CSS)}"
    response, body = get(server, "/static/site.css", Range="bytes=-10")
    assert response.status_code == 206 and body == CSS[-10:]
    response, _ = get(server, "/static/site.css", Range=f"bytes={len(CSS)}-")
    assert response.status_code == 416 and response.headers["content-range"] == f"bytes */{len(CSS)}"

    assert get(server, "/static/missing.js")[0].status_code == 404
    assert get(server, "/static/site.css", "POST")[0].status_code == 405


def test_a_client_leaving_mid_file_leaves_no_file_open(served):
    server, collected = served
    big = str((collected / "big.bin").resolve())

    def open_in_server() -> int:
        return sum(1 for fd in Path(f"/proc/{server.proc.pid}/fd").iterdir() if os.path.realpath(fd) == big)

    with socket.socket() as client:
        # A small receive buffer, so the kernel cannot take the whole file in on the client's behalf.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        client.connect(("127.0.0.1", server.port))
        client.sendall(b"GET /static/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert client.recv(1 << 16).startswith(b"HTTP/1.1 200 ")
        assert open_in_server() == 1
    wait_for(lambda: open_in_server() == 0, timeout=60)
    assert get(server, "/static/big.bin", Range="bytes=0-9")[1] == b"\1" * 10  # and the server goes on
