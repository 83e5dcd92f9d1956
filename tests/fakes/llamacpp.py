"""Real llama.cpp for tests: the HTTP server embedded in PyPI's `xllamacpp`, on a tiny GGUF.

Nothing is faked on the wire: this is llama.cpp's own server (OpenAI-compatible /v1/chat/completions
with usage, /v1/models, /props, /health, `--api-key` enforcement), serving the ~0.5 MB model that
`tests.fakes.tinygguf` writes. One thread (`-t 1`): on two cores more threads collapse throughput.

In a test:

    with LlamaServer(ctx=2048, api_key="k") as server:
        server.base_url        # http://127.0.0.1:PORT/v1
        server.model_id        # what /v1/models lists (the alias, default "tiny")

As a stand-in for the `llama-server` binary (e.g. on an SSH target's PATH):

    install_llama_server(bin_dir)      # writes bin_dir/llama-server
    llama-server -m tiny.gguf -c 2048 -ngl 99 --host 127.0.0.1 --port 8080 --api-key K -t 1 -np 1 --jinja -fa on

or directly `python -m tests.fakes.llamacpp -m … --port …`. It logs like llama-server (same lines,
e.g. "couldn't bind HTTP server socket" for a port in use) and exits 1 when the server cannot start.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from tests.fakes import processes

REPO_ROOT = Path(__file__).resolve().parents[2]
_lock = threading.Lock()


def tiny_gguf_path(context_length: int | None = None) -> Path:
    """The tiny model, written once per machine (same seed, same bytes) under the temp dir. Its
    training context is 4,096 tokens, and llama-server caps a slot at that whatever `-c` says; a
    real client's own prompt (Claude Code's is ~20k of this byte-level vocabulary's tokens) needs
    a variant trained for more (`context_length`), written beside it."""
    from .tinygguf import write_tiny_gguf

    name = f"tiny-llama-{context_length}.gguf" if context_length else "tiny-llama.gguf"
    path = Path(tempfile.gettempdir()) / f"portal-tests-{os.getuid()}" / name
    with _lock:
        if not path.exists():
            write_tiny_gguf(path, **({"context_length": context_length} if context_length else {}))
    return path


def install_llama_server(bin_dir: str | os.PathLike[str]) -> Path:
    """Write an executable `llama-server` into `bin_dir` that runs this module with this Python."""
    bin_dir = Path(bin_dir)
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "llama-server"
    script.write_text(
        "#!/bin/sh\n"
        f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}\n"
        f'exec {shlex.quote(sys.executable)} -m tests.fakes.llamacpp "$@"\n'
    )
    script.chmod(0o755)
    return script


class LlamaServer:
    """Start the real llama.cpp server in a child process on a free port; stop it on exit."""

    def __init__(
        self,
        *,
        ctx: int = 2048,
        parallel: int = 1,
        api_key: str | None = None,
        alias: str | None = "tiny",
        model_path: str | os.PathLike[str] | None = None,
        port: int | None = None,
        startup_timeout: float = 30.0,
        ignore_eos: bool = False,
        embeddings: bool = False,
    ) -> None:
        from tests.services import free_port

        self.ctx = ctx
        self.parallel = parallel
        self.api_key = api_key
        self.alias = alias
        self.model_path = Path(model_path) if model_path else tiny_gguf_path()
        self.model_id = alias or str(self.model_path)  # without an alias llama-server lists the file's path
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.ignore_eos = ignore_eos  # llama-server's --ignore-eos: every answer runs to max_tokens
        self.embeddings = embeddings  # llama-server's --embeddings: an embedding server, no completions
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "tests.fakes.llamacpp", "-m", str(self.model_path), "-c", str(self.ctx)]
        args += ["-np", str(self.parallel), "-t", "1", "--host", "127.0.0.1", "--port", str(self.port)]
        args += ["-a", self.alias, "--jinja"] if self.alias else ["--jinja"]
        if self.api_key:
            args += ["--api-key", self.api_key]
        if self.ignore_eos:
            args.append("--ignore-eos")
        if self.embeddings:
            args += ["--embeddings", "--pooling", "mean"]
        return args

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def start(self) -> LlamaServer:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.process = subprocess.Popen(self.argv(), stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.process.returncode}:\n{self.log()[-2000:]}")
            try:
                if httpx.get(f"{self.root_url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)  # the server offers no readiness event we could await
        self.stop()
        raise RuntimeError(f"llama.cpp server not healthy after {self.startup_timeout}s:\n{self.log()[-2000:]}")

    def stop(self) -> None:
        processes.stop(self.process)

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llama-server", description="llama.cpp HTTP server (xllamacpp)")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-c", "--ctx-size", type=int, default=4096)
    p.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", default="-1")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--api-key", action="append", default=[])
    p.add_argument("--api-key-file", default=None)
    # A released llama-server prints its buffer sizes at its default verbosity; this build needs 4.
    p.add_argument("-lv", "--verbosity", "--log-verbosity", type=int, default=4)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-np", "--parallel", type=int, default=1)
    p.add_argument("-a", "--alias", default=None)
    p.add_argument("--jinja", action="store_true")
    p.add_argument("-fa", "--flash-attn", nargs="?", const="on", default="auto", choices=["on", "off", "auto"])
    p.add_argument("--cache-type-k", "-ctk", default="f16")
    p.add_argument("--cache-type-v", "-ctv", default="f16")
    p.add_argument("--ignore-eos", action="store_true")
    p.add_argument("--embedding", "--embeddings", dest="embedding", action="store_true")
    p.add_argument("--pooling", default=None, choices=["none", "mean", "cls", "last", "rank"])
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import xllamacpp as xlc

    params = xlc.CommonParams()
    params.model.path = args.model
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.hostnames = [args.host]
    params.port = args.port
    params.use_jinja = args.jinja
    params.sampling.ignore_eos = args.ignore_eos
    params.embedding = args.embedding
    if args.pooling:
        params.pooling_type = getattr(xlc.llama_pooling_type, f"LLAMA_POOLING_TYPE_{args.pooling.upper()}")
    keys = list(args.api_key)
    if args.api_key_file:  # llama-server: one key per line
        with open(args.api_key_file) as f:
            keys += [line.strip() for line in f if line.strip()]
    if not keys and os.environ.get("LLAMA_API_KEY"):
        keys = [os.environ["LLAMA_API_KEY"]]
    if keys:
        params.api_keys = keys
    params.verbosity = args.verbosity
    fa = xlc.llama_flash_attn_type
    params.flash_attn_type = {"on": fa.LLAMA_FLASH_ATTN_TYPE_ENABLED, "off": fa.LLAMA_FLASH_ATTN_TYPE_DISABLED}.get(
        args.flash_attn, fa.LLAMA_FLASH_ATTN_TYPE_AUTO
    )
    if args.alias:
        params.model_alias = {args.alias}
    if args.n_gpu_layers not in ("auto", "all"):
        params.n_gpu_layers = int(args.n_gpu_layers)

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = xlc.Server(params)
    except RuntimeError as exc:
        print(f"main: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"main: server is listening on {server.listening_address}", file=sys.stderr, flush=True)
    stop.wait()
    del server  # ~Server drains the main loop
    return 0


if __name__ == "__main__":
    sys.exit(main())
