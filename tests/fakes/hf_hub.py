"""A Hugging Face Hub-compatible server on 127.0.0.1 serving one small real repository, for tests.

It answers what `huggingface_hub` (the portal's listing and the host's `hf download`) calls:

    GET  /api/models/{repo}/revision/{rev}     repo info; `?blobs=true` adds sizes and LFS sha256
    GET  /api/models/{repo}/tree/{rev}         the tree listing snapshot_download reads
    HEAD /{repo}/resolve/{rev}/{file}          ETag / X-Linked-Etag / X-Linked-Size / X-Repo-Commit
    GET  /{repo}/resolve/{rev}/{file}          the bytes, with Range (206) support

Faults the tests ask for: `cut_after[file] = N` closes the connection after N bytes of the first
GET of that file (the client then resumes with a Range request); `hold_at[file] = N` pauses a GET
once N bytes of the file have been sent until `release()` (so a test sees a download in flight
without depending on speed); `token` makes every request need `Authorization: Bearer <token>`;
a name in `corrupt` is served with its first byte changed. `requests` records (method, path,
Range, Authorization) of each request.

    with FakeHub(repo_files) as hub:
        hub.url  # HF_ENDPOINT
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
HOLD_TIMEOUT = 120.0


@dataclass
class RepoFile:
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:  # git's blob id, as the Hub reports it for non-LFS files
        return hashlib.sha1(b"blob %d\0" % len(self.data) + self.data, usedforsecurity=False).hexdigest()

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.blob_id


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, RepoFile]], *, token: str = "") -> None:
        self.repos = repos
        self.token = token
        self.cut_after: dict[str, int] = {}
        self.hold_at: dict[str, int] = {}
        self.corrupt: set[str] = set()  # served with one byte changed (the listing keeps the true sha256)
        self.requests: list[tuple[str, str, str, str]] = []
        self._gets: dict[str, int] = {}
        self._released = threading.Event()
        self.holding = threading.Event()  # set while a GET waits at its hold point
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hf-hub", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def release(self) -> None:
        self._released.set()

    def gets_of(self, name: str) -> list[str]:
        """The Range headers of every GET of `name` ("" for a whole-file GET)."""
        return [r[2] for r in self.requests if r[0] == "GET" and r[1].endswith("/resolve/" + COMMIT + "/" + name)]

    def start(self) -> FakeHub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _json(self, body, status: int = 200) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, status: int, message: str, code: str = "") -> None:
                data = json.dumps({"error": message}).encode()
                self.send_response(status)
                if code:
                    self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", message)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _route(self):
                path = unquote(urlsplit(self.path).path)
                auth = self.headers.get("Authorization", "")
                with hub._lock:
                    hub.requests.append((self.command, path, self.headers.get("Range", ""), auth))
                if hub.token and auth != f"Bearer {hub.token}":
                    self._error(401, "Invalid credentials in Authorization header", "RepoNotFound")
                    return None
                return path

            def _repo(self, parts: list[str]):
                repo = "/".join(parts[:2])
                if repo not in hub.repos:
                    self._error(404, "Repository not found", "RepoNotFound")
                    return None
                return repo

            def do_GET(self) -> None:
                self._serve(body=True)

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def _serve(self, *, body: bool) -> None:
                path = self._route()
                if path is None:
                    return
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] in ("revision", "tree"):
                    repo = self._repo(parts[2:4])
                    if repo is None:
                        return
                    if parts[5] not in ("main", COMMIT):
                        self._error(404, "Revision not found", "RevisionNotFound")
                        return
                    files = hub.repos[repo]
                    if parts[4] == "revision":
                        siblings = [
                            {
                                "rfilename": name,
                                "size": len(f.data),
                                "blobId": f.blob_id,
                                **(
                                    {"lfs": {"sha256": f.sha256, "size": len(f.data), "pointerSize": 130}}
                                    if f.lfs
                                    else {}
                                ),
                            }
                            for name, f in files.items()
                        ]
                        self._json({"id": repo, "modelId": repo, "sha": COMMIT, "private": False, "siblings": siblings})
                    else:
                        self._json(
                            [
                                {
                                    "type": "file",
                                    "path": name,
                                    "size": len(f.data),
                                    "oid": f.blob_id,
                                    **(
                                        {"lfs": {"oid": f.sha256, "size": len(f.data), "pointerSize": 130}}
                                        if f.lfs
                                        else {}
                                    ),
                                }
                                for name, f in files.items()
                            ]
                        )
                    return
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo = self._repo(parts[:2])
                    if repo is None:
                        return
                    if parts[3] not in ("main", COMMIT):
                        self._error(404, "Revision not found", "RevisionNotFound")
                        return
                    name = "/".join(parts[4:])
                    f = hub.repos[repo].get(name)
                    if f is None:
                        self._error(404, "Entry not found", "EntryNotFound")
                        return
                    self._file(name, f, body=body)
                    return
                self._error(404, "Not found")

            def _file(self, name: str, f: RepoFile, *, body: bool) -> None:
                size = len(f.data)
                start = 0
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and rng[6:].split("-")[0].isdigit():
                    start = min(int(rng[6:].split("-")[0]), size)
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(size - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{f.blob_id if not f.lfs else f.sha256}"')
                if f.lfs:
                    self.send_header("X-Linked-Etag", f'"{f.sha256}"')
                    self.send_header("X-Linked-Size", str(size))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                if not body:
                    return
                with hub._lock:
                    nth = hub._gets[name] = hub._gets.get(name, 0) + 1
                cut = hub.cut_after.get(name) if nth == 1 else None
                hold = hub.hold_at.get(name)
                pos = start
                chunk = 64 * 1024
                while pos < size:
                    end = min(pos + chunk, size)
                    if cut is not None:
                        end = min(end, cut)
                    if hold is not None and pos < hold:
                        end = min(end, hold)
                    if hold is not None and pos == hold and not hub._released.is_set():
                        hub.holding.set()
                        hub._released.wait(HOLD_TIMEOUT)
                    piece = f.data[pos:end]
                    if name in hub.corrupt and pos == 0 and piece:
                        piece = bytes([piece[0] ^ 0xFF]) + piece[1:]
                    try:
                        self.wfile.write(piece)
                        self.wfile.flush()
                    except OSError:
                        return
                    pos = end
                    if cut is not None and pos >= cut:
                        self.close_connection = True
                        self.connection.shutdown(2)  # cut mid-body: Content-Length promised more
                        return

        return Handler


def small_repo(gguf: bytes) -> dict[str, RepoFile]:
    """config.json (llama architecture, read by the fit), a tokenizer and one GGUF (LFS)."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 4096,
        "vocab_size": 266,
        "torch_dtype": "float32",
    }
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {chr(i): i for i in range(32, 127)}}}
    return {
        "config.json": RepoFile(json.dumps(config, indent=2).encode(), lfs=False),
        "tokenizer.json": RepoFile(json.dumps(tokenizer).encode(), lfs=False),
        "tiny-Q8_0.gguf": RepoFile(gguf, lfs=True),
    }
