"""What a weight download runs on the host, over an open `hosts.remote.ssh.Remote`.

Every command is an argument list or a constant script whose only inputs are positional
parameters (`sh -c '…"$1"…' name ARG…`), so no repository name, pattern or path reaches the remote
shell unquoted. The download itself is a detached process (`commands.start_detached`) in the job's
folder (`~/.gateway-portal/downloads/<id>`: `download.pid`, `download.log`, `download.exit_code`);
the portal reads its progress from the sizes of the files in the download folder, including the
client's `.incomplete` files, at every poll.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import Secret
from ..remote import commands
from ..remote.ssh import Remote

TOOLS_DIR = ".gateway-portal/tools"
# A token handed over in a 0600 file (from SSH stdin) is deleted by the process that reads it
# before the tool starts; then the tool runs in the download folder ("$1").
RUN_IN_FOLDER = 'rm -f token; cd "$1" || exit 90; shift; exec "$@"'
FIND_TOOL = (
    'for c in "$HOME/$1/bin/$2" "$(command -v "$2")" ${3:+"$(command -v "$3")"}; do '
    'if [ -n "$c" ] && [ -x "$c" ]; then printf "%s\\n" "$c"; exit 0; fi; done; exit 1'
)
INSTALL_TOOL = 'python3 -m venv "$HOME/$1" && "$HOME/$1/bin/pip" install --quiet --upgrade "$2"'
SHA256 = 'cd "$1" || exit 90; shift; exec sha256sum -- "$@"'
LIST_MODELS = (
    'd="$HOME/$1"; [ -d "$d" ] || exit 0; cd "$d" || exit 0; for e in */; do e="${e%/}"; [ -d "$e" ] || continue; '
    'printf "%s\\t%s\\t" "$e" "$(du -sb -- "$e" | cut -f1)"; '
    '(cd "$e" && find . -name .cache -prune -o -name ._____temp -prune -o -type f '
    "\\( -name '*.gguf' -o -name config.json \\) -printf '%P|'); echo; done"
)


def home(remote: Remote) -> str:
    return remote.run(["sh", "-c", 'printf %s "$HOME"']).stdout.strip()


def job_dir(remote_dir: str) -> str:
    return commands.deployment_dir(remote_dir)


def find_tool(remote: Remote, venv: str, name: str, alt: str = "") -> str:
    """The host's own tool: the portal's venv first, then the PATH; "" when there is none."""
    result = remote.run(["sh", "-c", FIND_TOOL, "find-tool", f"{TOOLS_DIR}/{venv}", name, alt])
    return result.stdout.strip().splitlines()[0] if result.ok and result.stdout.strip() else ""


def disk_free(remote: Remote, path: str) -> int | None:
    """Bytes free for the SSH user on the filesystem holding `path` (df, POSIX format)."""
    result = remote.run(["df", "-P", "-B1", "--", path])
    lines = result.stdout.strip().splitlines()
    if not result.ok or len(lines) < 2:
        return None
    cols = lines[-1].split()
    return int(cols[3]) if len(cols) >= 4 and cols[3].isdigit() else None


def file_sizes(remote: Remote, path: str) -> dict[str, int]:
    """Every file under `path` (relative name → bytes), the clients' partial files included."""
    result = remote.run(["find", path, "-type", "f", "-printf", "%s %P\\n"], timeout=60)
    sizes: dict[str, int] = {}
    for line in result.stdout.splitlines():
        size, _, name = line.partition(" ")
        if size.isdigit() and name:
            sizes[name] = int(size)
    return sizes


@dataclass
class Probe:
    """One poll of a detached process: alive?, its exit code, the end of its log."""

    alive: bool
    exit_code: int | None
    log: str
    sizes: dict[str, int] = field(default_factory=dict)


def probe(remote: Remote, remote_dir: str, name: str, pid: int | None, secret: str = "") -> Probe:
    folder = job_dir(remote_dir)
    alive = commands.is_alive(remote, pid)
    code_text = remote.run(f"cat {folder}/{shlex.quote(name)}.exit_code 2>/dev/null").stdout.strip()
    exit_code = int(code_text) if code_text.lstrip("-").isdigit() else None
    log = commands.log_tail(remote, folder, secret, name=name)
    return Probe(alive=alive, exit_code=exit_code, log=log)


def read_log(remote: Remote, remote_dir: str, name: str) -> str:
    return remote.run(f"cat {job_dir(remote_dir)}/{shlex.quote(name)}.log 2>/dev/null", timeout=60).stdout


def start(
    remote: Remote, remote_dir: str, name: str, argv: list[str], env: dict[str, str], secret: Secret | None = None
) -> tuple[int | None, str]:
    return commands.start_detached(remote, job_dir(remote_dir), argv, env, secret, name=name)


def stop(remote: Remote, pid: int | None) -> bool:
    if pid and commands.is_alive(remote, pid):
        return commands.kill(remote, pid, grace=5)
    return True


def remove_job_dir(remote: Remote, remote_dir: str) -> None:
    remote.run(["sh", "-c", 'rm -rf -- "$HOME/$1"', "rm", remote_dir])


def list_models(remote: Remote, download_dir: str) -> list[dict[str, Any]]:
    """The folders in the host's download folder: name, bytes, GGUF files and whether a
    config.json is there."""
    result = remote.run(["sh", "-c", LIST_MODELS, "list-models", download_dir], timeout=120)
    rows = []
    for line in result.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        found = [f for f in parts[2].split("|") if f]
        rows.append(
            {
                "name": parts[0],
                "bytes": int(parts[1]) if parts[1].isdigit() else None,
                "gguf_files": sorted(f for f in found if f.endswith(".gguf")),
                "has_config": "config.json" in found,
            }
        )
    return rows


def delete_model(remote: Remote, download_dir: str, name: str) -> bool:
    return remote.run(["sh", "-c", 'rm -rf -- "$HOME/$1/$2"', "rm-model", download_dir, name], timeout=300).ok
