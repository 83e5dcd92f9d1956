"""A stand-in for `vllm serve`: the fake OpenAI upstream (vLLM flavour) on the requested port.

vLLM itself cannot run without a GPU; this accepts its command line, serves `--served-model-name`
with `--max-model-len` and the key vLLM reads from `VLLM_API_KEY`, ignores the tuning flags, and
runs until SIGTERM. It refuses `--api-key` on its command line (the portal must never put it there).
Tool calling as vLLM's: a request with tools is a 400 unless the server was started with
`--enable-auto-tool-choice --tool-call-parser NAME`; the first without the second, or a parser
vLLM does not know, stops it at start with vLLM's words.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from tests.fakes import argv_log

# Some of the names vLLM registers (vllm/tool_parsers/__init__.py).
TOOL_PARSERS = (
    "deepseek_v3",
    "deepseek_v31",
    "glm45",
    "hermes",
    "kimi_k2",
    "llama3_json",
    "mistral",
    "openai",
    "qwen3_coder",
)


def main(argv: list[str] | None = None) -> int:
    argv_log.record("vllm", argv)
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--distributed-executor-backend", default=None)
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--tool-call-parser", default=None)
    # Not vLLM's: seconds before the server listens, as a real one loading weights (tests of a
    # worker killed while a launch waits for /health).
    parser.add_argument("--fake-startup-delay", type=float, default=0.0)
    args, _unknown = parser.parse_known_args(argv)
    if args.api_key is not None:
        print("fake vllm: the API key was on the command line, readable by any user with ps", file=sys.stderr)
        return 2
    args.api_key = os.environ.get("VLLM_API_KEY") or None
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        print("TypeError: Error: --enable-auto-tool-choice requires --tool-call-parser", file=sys.stderr, flush=True)
        return 1
    if args.tool_call_parser and args.tool_call_parser not in TOOL_PARSERS:
        known = ", ".join(TOOL_PARSERS)
        print(
            f"KeyError: 'invalid tool call parser: {args.tool_call_parser} (chose from {{ {known} }})'", file=sys.stderr
        )
        sys.stderr.flush()
        return 1
    if args.distributed_executor_backend == "ray" and (problem := _ray_contract(args)):
        print(f"fake vllm: {problem}", file=sys.stderr, flush=True)
        return 1

    from tests.fakes.upstream import FakeUpstream

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    upstream = FakeUpstream(
        models=[args.served_model_name or args.model],
        max_model_len=args.max_model_len,
        api_key=args.api_key,
        port=args.port,
        bind=args.host,
    )
    if not (args.enable_auto_tool_choice and args.tool_call_parser):
        upstream.behave(mode="no_tools")
    if stop.wait(args.fake_startup_delay):
        return 0
    try:
        upstream.start()
    except OSError as exc:
        print(
            f"ERROR: [Errno {exc.errno}] error while attempting to bind on address: address already in use",
            file=sys.stderr,
        )
        return 1
    print(f"INFO: Uvicorn running on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    stop.wait()
    upstream.stop()
    return 0


def _ray_contract(args: argparse.Namespace) -> str:
    """What vLLM needs to run on a Ray cluster: RAY_ADDRESS of a live head with one node per
    pipeline stage, each with the tensor-parallel GPUs, and NCCL/Gloo told which interface to use."""
    from tests.fakes.ray_cli import status

    address = os.environ.get("RAY_ADDRESS", "")
    if not address:
        return "--distributed-executor-backend ray without RAY_ADDRESS"
    if (
        not os.environ.get("NCCL_SOCKET_IFNAME")
        or os.environ.get("GLOO_SOCKET_IFNAME") != os.environ["NCCL_SOCKET_IFNAME"]
    ):
        return "NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME not set to one interface"
    nodes = status(address)
    if nodes is None:
        return f"no Ray cluster at {address}"
    if len(nodes) != args.pipeline_parallel_size:
        return f"{len(nodes)} Ray node(s) for pipeline parallel size {args.pipeline_parallel_size}"
    short = [ip for ip, gpus in nodes.items() if gpus < args.tensor_parallel_size]
    if short:
        return f"node(s) {', '.join(short)} have fewer than {args.tensor_parallel_size} GPUs"
    print(f"INFO: Ray cluster {address}: {len(nodes)} nodes, TP {args.tensor_parallel_size}", file=sys.stderr)
    return ""


if __name__ == "__main__":
    sys.exit(main())
