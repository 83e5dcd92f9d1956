"""Stopping the real servers the tests start (sshd, llama.cpp, an OIDC provider, gateways)."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen | None, timeout: float = 10) -> None:
    """SIGTERM, wait up to `timeout` s, then SIGKILL; a process already gone is left alone."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
