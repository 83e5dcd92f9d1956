"""A stand-in for `vllm serve`: the fake OpenAI upstream (vLLM flavour) on the requested port.

vLLM itself cannot run without a GPU; this accepts its command line, serves `--served-model-name`
with `--max-model-len` and `--api-key`, ignores the tuning flags, and runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", default=None)
    # Not vLLM's: seconds before the server listens, as a real one loading weights (tests of a
    # worker killed while a launch waits for /health).
    parser.add_argument("--fake-startup-delay", type=float, default=0.0)
    args, _unknown = parser.parse_known_args(argv)

    from tests.fakes.upstream import FakeUpstream

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    upstream = FakeUpstream(
        models=[args.served_model_name or args.model],
        max_model_len=args.max_model_len,
        api_key=args.api_key,
        port=args.port,
    )
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


if __name__ == "__main__":
    sys.exit(main())
