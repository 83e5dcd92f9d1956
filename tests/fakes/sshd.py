"""A real OpenSSH server on 127.0.0.1 (or another loopback address) posing as a GPU host, for tests.

Debian's `sshd` runs in the foreground with its own config on a free port, a generated host key
and an `authorized_keys` holding a generated client key. Sessions get a private HOME and a PATH
whose first folder holds:

- `nvidia-smi`: prints whatever fixture the test put in place (`target.use_gpus("nvidia_smi_rtx4090")`),
  or fails like a host without a driver when none is set;
- `llama-server`: the real llama.cpp server from `tests.fakes.llamacpp`;
- `vllm`: `vllm serve …` starts the fake OpenAI upstream (vLLM itself cannot run here);
- `ray`: `tests.fakes.ray_cli`, a stand-in for Ray's CLI that checks the multi-node contract.

`vllm` and `ray` log each call's argv and environment in `$HOME/.fake-argv.jsonl` (`tests.fakes.argv_log`).

    with SSHTarget() as target:
        target.port, target.client_private_key, target.host_key_fingerprint
"""

from __future__ import annotations

import getpass
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..services import free_port
from . import processes
from .llamacpp import REPO_ROOT, install_llama_server

FIXTURES = REPO_ROOT / "tests" / "fixtures"

NVIDIA_SMI = """#!/bin/sh
# Fake nvidia-smi: prints the fixture files the test suite placed in {state}.
state={state}
if [ ! -f "$state/gpus.csv" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. \\
Make sure that the latest NVIDIA driver is installed and running." >&2
  exit 9
fi
case "$*" in
  *--query-gpu=*) cat "$state/gpus.csv" ;;
  *--query-compute-apps=*) [ -f "$state/apps.csv" ] && cat "$state/apps.csv" ;;
  *--version*) cat "$state/version.txt" ;;
  *) cat "$state/version.txt" ;;
esac
exit 0
"""

VLLM = """#!/bin/sh
export PYTHONPATH={root}
exec {python} -m tests.fakes.vllm_cli "$@"
"""

RAY = """#!/bin/sh
export PYTHONPATH={root}
exec {python} -m tests.fakes.ray_cli "$@"
"""


class SSHTarget:
    """Start sshd; stop it (and everything its sessions left running) on exit."""

    def __init__(self, sshd: str = "/usr/sbin/sshd", address: str = "127.0.0.1") -> None:
        self.sshd = sshd
        self.address = address
        self.dir = Path(tempfile.mkdtemp(prefix="portal-sshd-"))
        self.home = self.dir / "home"
        self.bin = self.dir / "bin"
        self.state = self.dir / "nvidia"
        self.port = free_port()
        self.username = getpass.getuser()
        self.process: subprocess.Popen[bytes] | None = None
        self.log = self.dir / "sshd.log"
        # Folders this "machine" does not have: sshd runs in its own mount namespace with an empty
        # tmpfs over each (two targets on one filesystem, one without the other's files).
        self.hidden: list[Path] = []

    # --- keys -----------------------------------------------------------------------------------
    def _keygen(self, path: Path) -> None:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)

    @property
    def client_private_key(self) -> str:
        return (self.dir / "client_key").read_text()

    @property
    def host_key_fingerprint(self) -> str:
        out = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(self.dir / "host_key.pub")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return out.split()[1]

    def other_private_key(self) -> str:
        """A valid key that is not in authorized_keys."""
        path = self.dir / "stranger_key"
        if not path.exists():
            self._keygen(path)
        return path.read_text()

    # --- fake GPUs ------------------------------------------------------------------------------
    def use_gpus(self, name: str | None, apps: str | None = None, version: str = "nvidia_smi_version") -> None:
        """Make `nvidia-smi` print tests/fixtures/<name>.csv (None: behave as if no driver)."""
        for f in ("gpus.csv", "apps.csv", "version.txt"):
            (self.state / f).unlink(missing_ok=True)
        if name is None:
            return
        shutil.copy(FIXTURES / f"{name}.csv", self.state / "gpus.csv")
        if apps:
            shutil.copy(FIXTURES / f"{apps}.csv", self.state / "apps.csv")
        shutil.copy(FIXTURES / f"{version}.txt", self.state / "version.txt")

    # --- what the server saw -------------------------------------------------------------------
    def counts(self) -> tuple[int, int]:
        """(connections authenticated, sessions started) so far, from sshd's own log: what a
        client really cost the host, whatever the client believes it did."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("Accepted publickey for "), text.count("Starting session: ")

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> SSHTarget:
        for d in (self.home, self.bin, self.state):
            d.mkdir(parents=True)
        self._keygen(self.dir / "host_key")
        self._keygen(self.dir / "client_key")
        auth = self.dir / "authorized_keys"
        auth.write_text((self.dir / "client_key.pub").read_text())
        auth.chmod(0o600)
        (self.bin / "nvidia-smi").write_text(NVIDIA_SMI.format(state=shlex.quote(str(self.state))))
        (self.bin / "vllm").write_text(
            VLLM.format(root=shlex.quote(str(REPO_ROOT)), python=shlex.quote(sys.executable))
        )
        (self.bin / "ray").write_text(RAY.format(root=shlex.quote(str(REPO_ROOT)), python=shlex.quote(sys.executable)))
        for f in ("nvidia-smi", "vllm", "ray"):
            (self.bin / f).chmod(0o755)
        install_llama_server(self.bin)
        Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
        config = self.dir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {self.address}",
                    f"HostKey {self.dir / 'host_key'}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {auth}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "MaxStartups 50:30:100",
                    "MaxSessions 50",
                    "LogLevel VERBOSE",  # a line per connection and per session: `counts()`
                    f"SetEnv PATH={self.bin}:/usr/local/bin:/usr/bin:/bin HOME={self.home}",
                    "",
                ]
            )
        )
        argv = [self.sshd, "-D", "-E", str(self.log), "-f", str(config)]
        if self.hidden:
            mounts = " && ".join(f"mount -t tmpfs none {shlex.quote(str(h))}" for h in self.hidden)
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh", *argv]
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                out = self.log.read_text(errors="replace") if self.log.exists() else ""
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {out}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)  # sshd gives no readiness signal in -D mode
        self.stop()
        raise RuntimeError("sshd did not start listening within 10 s")

    def stop(self) -> None:
        processes.stop(self.process)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SSHTarget:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
