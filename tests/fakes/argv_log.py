"""What the fake CLIs on a test SSH target were run with: one JSON line per call in
`$HOME/.fake-argv.jsonl` (the target's private HOME), so a test asserts the argv and environment
each node received."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ENV = (
    "CUDA_VISIBLE_DEVICES",
    "VLLM_HOST_IP",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "RAY_ADDRESS",
    "MODELSCOPE_DOMAIN",
)  # never a token
NAME = ".fake-argv.jsonl"


def record(prog: str, argv: list[str] | None = None) -> None:
    line = {"prog": prog, "argv": list(sys.argv[1:] if argv is None else argv)}
    line["env"] = {k: os.environ[k] for k in ENV if k in os.environ}
    with open(Path(os.environ.get("HOME", "/tmp")) / NAME, "a") as f:
        f.write(json.dumps(line) + "\n")


def calls(home: Path, prog: str) -> list[dict]:
    """The calls of `prog` on the target whose HOME is `home`, oldest first."""
    path = home / NAME
    if not path.exists():
        return []
    return [c for c in map(json.loads, path.read_text().splitlines()) if c["prog"] == prog]
