"""A stand-in for Ray's CLI on a test SSH target: enough of `ray start / status / stop` for the
portal's multi-node vLLM launch, and a check of the contract vLLM's docs give for it.

    ray start --head --port P --node-ip-address A --block       a head: a tiny registry on A:P
    ray start --address H:P --node-ip-address A --block         joins the head's registry
    ray status --address H:P                                    "Active:" and one line per node
    ray stop [--force]                                          stops the nodes started here

Every `ray start` refuses to run (exit 2, with the reason on stderr) unless the environment is
what vLLM asks for on each node: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME naming one existing
interface, and VLLM_HOST_IP equal to --node-ip-address. A node reports as many GPUs as the fake
`nvidia-smi` on its PATH lists.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fakes import argv_log

STATE = Path(os.environ.get("HOME", "/tmp")) / ".fake-ray"
JOIN_RETRY_SECONDS = 30.0


def _gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv"], capture_output=True, text=True)
    except FileNotFoundError:
        return 0
    return len([line for line in out.stdout.splitlines() if line.strip()]) if out.returncode == 0 else 0


def _check_env(node_ip: str) -> None:
    problems = []
    iface = os.environ.get("NCCL_SOCKET_IFNAME", "")
    if not iface:
        problems.append("NCCL_SOCKET_IFNAME is not set")
    elif not Path("/sys/class/net", iface).exists():
        problems.append(f"NCCL_SOCKET_IFNAME={iface} is not an interface of this node")
    if os.environ.get("GLOO_SOCKET_IFNAME") != iface:
        problems.append("GLOO_SOCKET_IFNAME differs from NCCL_SOCKET_IFNAME")
    if os.environ.get("VLLM_HOST_IP") != node_ip:
        problems.append(f"VLLM_HOST_IP={os.environ.get('VLLM_HOST_IP')!r}, but --node-ip-address is {node_ip}")
    if problems:
        print("fake ray: " + "; ".join(problems), file=sys.stderr, flush=True)
        sys.exit(2)


def _remember() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    (STATE / f"{os.getpid()}.pid").write_text(str(os.getpid()))


def _forget() -> None:
    (STATE / f"{os.getpid()}.pid").unlink(missing_ok=True)


def _wait_for_signal() -> None:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


def head(ip: str, port: int) -> int:
    nodes: dict[str, int] = {ip: _gpus()}
    lock = threading.Lock()

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline().decode().split()
            if line[:1] == ["STATUS"]:
                with lock:
                    self.wfile.write(json.dumps(nodes).encode() + b"\n")
                return
            if line[:1] == ["JOIN"] and len(line) == 3:
                with lock:
                    nodes[line[1]] = int(line[2])
                self.wfile.write(b"OK\n")
                self.rfile.read()  # the worker holds the connection while it lives
                with lock:
                    nodes.pop(line[1], None)

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True

    try:
        server = Server((ip, port), Handler)
    except OSError as exc:
        print(f"fake ray: cannot listen on {ip}:{port}: {exc}", file=sys.stderr, flush=True)
        return 1
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"Ray runtime started. Head at {ip}:{port}", flush=True)
    _wait_for_signal()
    server.shutdown()
    return 0


def worker(address: str, ip: str) -> int:
    """Join the head, retrying while it is not listening yet, as Ray's own start retries reaching
    the head's GCS: the portal starts the worker right after the head's process, and on a loaded
    machine the head's Python may not listen before the worker tries (a first refusal used to end
    the worker, and the launch waited out its health timeout)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + JOIN_RETRY_SECONDS
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=10)
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"fake ray: cannot reach the head at {address}: {exc}", file=sys.stderr, flush=True)
                return 1
            time.sleep(0.2)
    conn.sendall(f"JOIN {ip} {_gpus()}\n".encode())
    conn.recv(16)
    print(f"Ray runtime started. Joined {address} as {ip}", flush=True)
    _wait_for_signal()
    conn.close()
    return 0


def status(address: str) -> dict[str, int] | None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"STATUS\n")
            return json.loads(conn.makefile().readline())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    argv_log.record("ray", argv)
    parser = argparse.ArgumentParser(prog="ray")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start")
    start.add_argument("--head", action="store_true")
    start.add_argument("--port", type=int, default=6379)
    start.add_argument("--address")
    start.add_argument("--node-ip-address", required=True)
    start.add_argument("--block", action="store_true")
    st = sub.add_parser("status")
    st.add_argument("--address", required=True)
    stop = sub.add_parser("stop")
    stop.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)

    if args.command == "status":
        nodes = status(args.address)
        if nodes is None:
            print(f"ConnectionError: could not find any running Ray instance at {args.address}", file=sys.stderr)
            return 1
        print("======== Autoscaler status ========\nNode status\n" + "-" * 40 + "\nActive:")
        for ip in nodes:
            print(f" 1 node_{ip.replace('.', '')}")
        print(f"Resources\n 0.0/{float(sum(nodes.values()))} GPU")
        return 0
    if args.command == "stop":
        for f in STATE.glob("*.pid") if STATE.exists() else []:
            try:
                os.kill(int(f.read_text()), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass
            f.unlink(missing_ok=True)
        print("Stopped all Ray processes.")
        return 0
    if not args.block:
        print("fake ray: the portal runs Ray nodes in the foreground (--block)", file=sys.stderr)
        return 2
    if args.head == bool(args.address):
        print("fake ray: either --head or --address", file=sys.stderr)
        return 2
    _check_env(args.node_ip_address)
    _remember()
    try:
        return head(args.node_ip_address, args.port) if args.head else worker(args.address, args.node_ip_address)
    finally:
        _forget()


if __name__ == "__main__":
    sys.exit(main())
