"""A ModelScope-compatible hub on 127.0.0.1 and a stand-in for the host's `modelscope` CLI, for tests.

The server answers the two calls a model download makes (ModelScope's hub API):

    GET /api/v1/models/{owner}/{name}/repo/files?Revision=R&Recursive=true   the file list (Path, Size, Sha256)
    GET /api/v1/models/{owner}/{name}/repo?Revision=R&FilePath=F             the file's bytes

`token` makes every request need `Authorization: Bearer <token>`; `requests` records (path,
FilePath, Authorization) of each request.

The CLI (`python -m tests.fakes.modelscope download --model R --revision V --local_dir D
[--include GLOB …]`) takes the arguments of `modelscope download`, logs them
(tests/fakes/argv_log.py), lists the repository, and writes each chosen file to
`D/._____temp/<name>` first and moves it into place when complete, as ModelScope's
`snapshot_download` does. It reads the hub's host from MODELSCOPE_DOMAIN and the token from
MODELSCOPE_API_TOKEN. One difference from the real tool, for the loopback server: it speaks
http, where ModelScope's SDK always puts `https://` in front of MODELSCOPE_DOMAIN.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import httpx

from tests.fakes.hf_hub import RepoFile

TEMP = "._____temp"


class FakeModelScope:
    def __init__(self, repos: dict[str, dict[str, RepoFile]], *, token: str = "") -> None:
        self.repos = repos
        self.token = token
        self.requests: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-modelscope", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeModelScope:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _send(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _json(self, body: dict, status: int = 200) -> None:
                self._send(status, json.dumps(body).encode(), "application/json")

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = parse_qs(url.query)
                parts = unquote(url.path).strip("/").split("/")
                auth = self.headers.get("Authorization", "")
                file_path = query.get("FilePath", [""])[0]
                with hub._lock:
                    hub.requests.append((url.path, file_path, auth))
                if hub.token and auth != f"Bearer {hub.token}":
                    self._json({"Code": 401, "Message": "Unauthorized", "Success": False}, 401)
                    return
                if parts[:3] != ["api", "v1", "models"] or len(parts) < 6 or parts[5] != "repo":
                    self._json({"Code": 404, "Message": "Not found", "Success": False}, 404)
                    return
                files = hub.repos.get(f"{parts[3]}/{parts[4]}")
                if files is None:
                    self._json({"Code": 404, "Message": "Model not found", "Success": False}, 404)
                    return
                if parts[6:] == ["files"]:
                    listing = [
                        {
                            "Name": name.rsplit("/", 1)[-1],
                            "Path": name,
                            "Type": "blob",
                            "Size": len(f.data),
                            "Sha256": f.sha256,
                        }
                        for name, f in files.items()
                    ]
                    self._json({"Code": 200, "Data": {"Files": listing}, "Success": True})
                elif not parts[6:] and file_path in files:
                    self._send(200, files[file_path].data, "application/octet-stream")
                else:
                    self._json({"Code": 404, "Message": "File not found", "Success": False}, 404)

        return Handler


def _get(url: str, token: str) -> bytes:
    response = httpx.get(url, headers={"Authorization": f"Bearer {token}"} if token else {}, timeout=60)
    response.raise_for_status()
    return response.content


def main(argv: list[str] | None = None) -> int:
    from tests.fakes import argv_log

    argv_log.record("modelscope", argv)
    parser = argparse.ArgumentParser(prog="modelscope")
    sub = parser.add_subparsers(dest="command", required=True)
    download = sub.add_parser("download")
    download.add_argument("--model", required=True)
    download.add_argument("--revision", default="master")
    download.add_argument("--local_dir", required=True)
    download.add_argument("--include", nargs="*", default=None)
    args = parser.parse_args(argv)

    base = "http://" + os.environ.get("MODELSCOPE_DOMAIN", "www.modelscope.cn")
    token = os.environ.get("MODELSCOPE_API_TOKEN", "")
    api = f"{base}/api/v1/models/{quote(args.model)}/repo"
    rev = quote(args.revision)
    entries = json.loads(_get(f"{api}/files?Revision={rev}&Recursive=true", token))["Data"]["Files"]
    wanted = [e for e in entries if e["Type"] == "blob"]
    if args.include:
        wanted = [e for e in wanted if any(fnmatch.fnmatch(e["Path"], g) for g in args.include)]
    target = Path(args.local_dir)
    for entry in wanted:
        final = target / entry["Path"]
        if final.exists() and final.stat().st_size == entry["Size"]:
            continue
        partial = target / TEMP / entry["Path"]
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(_get(f"{api}?Revision={rev}&FilePath={quote(entry['Path'])}", token))
        final.parent.mkdir(parents=True, exist_ok=True)
        partial.replace(final)
        print(f"Downloading [{entry['Path']}]: 100%", flush=True)
    print(f"Successfully downloaded {len(wanted)} files of {args.model} to {target.resolve()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
