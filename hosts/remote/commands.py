"""Shell commands a launch job or a fit check runs on the host, over an open `ssh.Remote`.

A server is started detached in the deployment's folder on the host:

    cd ~/.gateway-portal/deployments/NAME && { setsid nohup sh -c '"$@"; echo $? >exit_code'
    launch CMD… >server.log 2>&1 </dev/null & echo $!; }

so its PID (a process group), exit code and log live in files next to it. Stopping sends TERM to
the process group, then KILL after a grace period.

What is only read (the model file and its header, free RAM, the port, the pid file) is also a
`Probe`: a command and how to read its result, so a caller can ask several in ONE SSH session
(`ask`) where each SSH round trip counts (a cold start's placement and launch).
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.conf import settings

from .. import backends, fit
from ..backends import Secret
from .ssh import Remote, Result

LOG_TAIL_BYTES = 8192
T = TypeVar("T")


@dataclass(frozen=True)
class Probe(Generic[T]):
    """A read-only command and how to read its result; `command` None: known without asking."""

    command: str | list[str] | None
    read: Callable[[Result], T]


_NOTHING_RUN = Result(0, "", "")


def ask(remote: Remote, *probes: Probe[Any]) -> list[Any]:
    """Each probe's reading, in order, from one session."""
    results = iter(remote.run_many([p.command for p in probes if p.command is not None]))
    return [p.read(next(results) if p.command is not None else _NOTHING_RUN) for p in probes]


def ask_one(remote: Remote, probe: Probe[T]) -> T:
    """One probe's reading (typed, unlike `ask`'s list of several)."""
    reading: T = ask(remote, probe)[0]
    return reading


def deployment_dir(remote_dir: str) -> str:
    """The deployment's folder, for a shell command (relative to the SSH user's home)."""
    return '"$HOME"/' + shlex.quote(remote_dir)


def alive_test(pid: int) -> str:
    """Shell test: the process exists and is not a zombie (kill -0 succeeds on zombies until reaped).
    Its state is read after kill -0, so a zombie reaped in between has no /proc entry left: that is
    gone too, not alive (init reaps orphans when it gets to it, any moment after they died). Without
    /proc, kill -0 alone."""
    p = str(int(pid))
    state = f's="$(sed \'s/.*) //\' /proc/{p}/stat 2>/dev/null | cut -c1)"; [ -n "$s" ] && [ "$s" != Z ]'
    return f"kill -0 {p} 2>/dev/null && {{ [ ! -d /proc/self ] || {{ {state}; }}; }}"


def group_test(pid: int) -> str:
    """Shell test: `pid` or a process of its group is there, not a zombie. A server started by
    `start_detached` leads its own group with its launcher (`sh -c`) and the server under it: the
    server outlives a launcher killed alone (its PID is the one on the record). Without `ps`,
    `alive_test` alone."""
    p = str(int(pid))
    listed = f"ps -eo pgid=,stat= 2>/dev/null | awk '$1 == {p} && $2 !~ /^Z/ {{found = 1}} END {{exit !found}}'"
    return f"{{ {alive_test(int(pid))} || {listed}; }}"


def is_alive(remote: Remote, pid: int | None) -> bool:
    if not pid:
        return False
    return remote.run(alive_test(pid)).ok


def pidfile_probe(folder: str, name: str = "server") -> Probe[int | None]:
    def read(result: Result) -> int | None:
        text = result.stdout.strip()
        return int(text) if text.isdigit() else None

    return Probe(f"cat {folder}/{name}.pid 2>/dev/null", read)


def read_pidfile(remote: Remote, folder: str, name: str = "server") -> int | None:
    return ask_one(remote, pidfile_probe(folder, name))


def write_pidfile(remote: Remote, folder: str, pid: int) -> None:
    remote.run(f"mkdir -p {folder} && echo {int(pid)} >{folder}/server.pid")


def remove_pidfile(remote: Remote, folder: str, name: str = "server") -> None:
    remote.run(f"rm -f {folder}/{name}.pid")


def read_exit_code(remote: Remote, folder: str) -> int | None:
    code_text = remote.run(f"cat {folder}/exit_code 2>/dev/null").stdout.strip()
    return int(code_text) if code_text.lstrip("-").isdigit() else None


def port_probe(port: int) -> Probe[bool]:
    """Is `port` taken: LISTEN sockets from /proc (no ss/netstat needed); state 0A is LISTEN."""
    hexport = f"{int(port):04X}"
    script = (
        'awk \'NR>1 && $4=="0A" {split($2,a,":"); print a[length(a)]}\' /proc/net/tcp /proc/net/tcp6 2>/dev/null'
        f" | grep -qx {hexport}"
    )
    return Probe(script, lambda result: result.ok)


def port_in_use(remote: Remote, port: int) -> bool:
    return ask_one(remote, port_probe(port))


def log_head(remote: Remote, folder: str, secret: str, size: int = 262144) -> str:
    """The start of the server's log (where servers report what they allocated), key masked."""
    result = remote.run(f"head -c {int(size)} {folder}/server.log 2>/dev/null")
    return mask_secret(result.stdout, secret)


def log_tail(remote: Remote, folder: str, secret: str, name: str = "server") -> str:
    """The end of the server's log, with `secret` (its API key) masked."""
    result = remote.run(f"tail -c {LOG_TAIL_BYTES} {folder}/{name}.log 2>/dev/null")
    return mask_secret(result.stdout, secret)


def alive_and_log_tail(remote: Remote, pid: int, folder: str, secret: str) -> tuple[bool, str]:
    """`is_alive` and `log_tail` in one session (a launch job's look at a starting server)."""
    alive, tail = remote.run_many(
        [alive_test(pid), f"tail -c {LOG_TAIL_BYTES} {folder}/server.log 2>/dev/null"], timeout=30
    )
    return alive.ok, mask_secret(tail.stdout, secret)


def mask_secret(text: str, secret: str) -> str:
    return text.replace(secret, backends.base.MASK) if secret else text


def start_detached(
    remote: Remote,
    folder: str,
    argv: list[str],
    env: dict[str, str],
    secret: Secret | None = None,
    *,
    name: str = "server",
) -> tuple[int | None, str]:
    """Start `argv` detached in `folder`; returns (its PID, or None, and what the shell said).

    `secret` (the server's API key) is written to a 0600 file from stdin, never through a command
    line: neither the SSH command, nor `env`, nor the server's argv holds it. When the backend
    reads it from a variable, the launcher's `sh -c` exports it from the file before exec.
    `name` names its files (`server.pid`, `server.log`; a Ray node of a multi-node deployment is
    `ray.pid`, `ray.log`)."""
    exit_file = "exit_code" if name == "server" else f"{name}.exit_code"
    log, pidfile = f"{name}.log", f"{name}.pid"
    env_args = [f"{k}={v}" for k, v in env.items()]
    body = f'"$@"; echo $? >{exit_file}'
    write_secret = ""
    if secret is not None:
        name = shlex.quote(secret.file)
        write_secret = f" && rm -f {name} && (umask 077 && cat >{name})"
        if secret.env:
            var = secret.env
            body = f'{var}="$(head -n1 {name})"; export {var}; ' + body
    # `sh -c '…; "$@"; echo $? >exit_code' launch CMD…` keeps the exit code; braces detach cleanly.
    inner = shlex.join(["env", *env_args, "sh", "-c", body, "launch", *argv])
    script = (
        f"mkdir -p {folder} && cd {folder} && rm -f {exit_file}{write_secret}"
        f" && {{ [ -f {log} ] && mv -f {log} {log}.1; true; }}"
        f" && {{ setsid nohup {inner} >{log} 2>&1 </dev/null & echo $! >{pidfile}; cat {pidfile}; }}"
    )
    result = remote.run(script, timeout=30, input=secret.text if secret is not None else None)
    pid_text = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if not result.ok or not pid_text.isdigit():
        return None, (result.stderr or result.stdout).strip()
    return int(pid_text), ""


def group_alive(remote: Remote, pid: int | None) -> bool:
    """Is anything of `pid`'s process group left (`group_test`)?"""
    if not pid:
        return False
    return remote.run(group_test(pid)).ok


def kill(remote: Remote, pid: int, grace: float | None = None) -> bool:
    """TERM the process group, KILL it after `grace` seconds. True when all of it is gone (the
    server too when its launcher, whose PID this is, died first)."""
    grace = settings.HOSTS_STOP_GRACE if grace is None else grace
    p = str(int(pid))
    steps = max(int(grace / 0.2), 1)
    alive = group_test(int(pid))
    script = (
        f"kill -TERM -- -{p} 2>/dev/null || kill -TERM {p} 2>/dev/null; "
        f"i=0; while [ $i -lt {steps} ]; do {alive} || exit 0; sleep 0.2; i=$((i+1)); done; "
        f"kill -KILL -- -{p} 2>/dev/null || kill -KILL {p} 2>/dev/null; "
        f"i=0; while [ $i -lt 25 ]; do {alive} || exit 0; sleep 0.2; i=$((i+1)); done; exit 1"
    )
    return remote.run(script, timeout=grace + 30).ok


def process_list(remote: Remote) -> list[tuple[int, str]]:
    """(PID, command line) of every process the SSH user can see."""
    rows = []
    for line in remote.run(["ps", "-eo", "pid=,args="]).stdout.splitlines():
        pid_text, _, args = line.strip().partition(" ")
        if pid_text.isdigit():
            rows.append((int(pid_text), args))
    return rows


def architecture_probe(backend: str, model_path: str) -> Probe[fit.Architecture | None]:
    """The model's architecture from the host's files (GGUF header or config.json), if readable."""
    if backend == "llamacpp":
        q = shlex.quote(model_path)

        def read_gguf(result: Result) -> fit.Architecture | None:
            if not result.ok:
                return None
            size_line, _, encoded = result.stdout.partition("\n")
            try:
                meta = fit.parse_gguf_metadata(base64.b64decode(encoded.strip()))
                return fit.from_gguf_metadata(meta, file_size=int(size_line.strip()))
            except (ValueError, TypeError):
                return None

        return Probe(f"stat -c %s {q} && head -c 2097152 {q} | base64 -w0", read_gguf)
    if model_path.startswith("/"):
        folder = shlex.quote(model_path)
    else:  # a Hugging Face id: look in the default cache
        org, name = model_path.split("/", 1)
        folder = '"$HOME"/.cache/huggingface/hub/' + shlex.quote(f"models--{org}--{name}") + "/snapshots/*"
    script = (
        f'for d in {folder}; do [ -f "$d/config.json" ] || continue; cat "$d/config.json"; echo; '
        'echo "---portal-sizes---"; stat -L -c %s "$d"/*.safetensors 2>/dev/null; break; done'
    )

    def read_config(result: Result) -> fit.Architecture | None:
        config, sep, sizes = result.stdout.partition("---portal-sizes---")
        if not sep:
            return None
        total = sum(int(s) for s in sizes.split() if s.isdigit())
        try:
            return fit.from_config_json(config, weights_bytes=total or None)
        except ValueError:
            return None

    return Probe(script, read_config)


def read_architecture(remote: Remote, backend: str, model_path: str) -> fit.Architecture | None:
    return ask_one(remote, architecture_probe(backend, model_path))


def memory_probe() -> Probe[int | None]:
    """The host's available RAM (MemAvailable), for llama.cpp layers kept on the CPU."""

    def read(result: Result) -> int | None:
        parts = result.stdout.split()
        return int(parts[1]) // 1024 if result.ok and len(parts) >= 2 and parts[1].isdigit() else None

    return Probe("grep -m1 '^MemAvailable:' /proc/meminfo", read)


def memory_available_mib(remote: Remote) -> int | None:
    return ask_one(remote, memory_probe())


def model_probe(backend: str, model_path: str) -> Probe[str]:
    """Why the model cannot be loaded from the host's disk, or "" when it can (or will be
    downloaded: a Hugging Face id vLLM/SGLang fetch themselves)."""
    q = shlex.quote(model_path)
    if backend == "llamacpp":
        script = (
            f"if [ ! -e {q} ]; then echo missing; elif [ ! -f {q} ]; then echo notfile; "
            f"elif [ ! -r {q} ]; then echo unreadable; else echo ok $(stat -L -c %s {q}) $(head -c 4 {q}); fi"
        )
        return Probe(script, lambda result: _gguf_problem(model_path, result.stdout.split()))
    if not model_path.startswith("/"):
        return Probe(None, lambda _result: "")  # a Hugging Face id: the server downloads it when not cached
    script = (
        f"if [ ! -e {q} ]; then echo missing; elif [ ! -d {q} ]; then echo notdir; "
        f"elif [ ! -r {q}/config.json ]; then echo noconfig; else echo ok; fi"
    )
    return Probe(script, lambda result: _folder_problem(model_path, (result.stdout.split() or ["missing"])[0]))


def check_model(remote: Remote, backend: str, model_path: str) -> str:
    return ask_one(remote, model_probe(backend, model_path))


_FILE_PROBLEMS = {
    "missing": "The model file {path} does not exist on the host.",
    "notfile": "{path} on the host is not a file (llama.cpp needs the .gguf file itself).",
    "unreadable": "The model file {path} is not readable by the SSH user: check its permissions.",
    "empty": "The model file {path} is empty (an interrupted download?).",
    "notgguf": "{path} is not a GGUF file (it does not start with the GGUF magic).",
}
_FOLDER_PROBLEMS = {
    "missing": "The model folder {path} does not exist on the host.",
    "notdir": "{path} on the host is not a folder (give the model's folder, with its config.json).",
    "noconfig": "The model folder {path} has no readable config.json.",
}


def _gguf_problem(model_path: str, words: list[str]) -> str:
    state = words[0] if words else "missing"
    if state == "ok":
        size = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        state = "empty" if size == 0 else "notgguf" if len(words) < 3 or words[2] != "GGUF" else "ok"
    return _FILE_PROBLEMS.get(state, "").format(path=model_path)


def _folder_problem(model_path: str, state: str) -> str:
    return _FOLDER_PROBLEMS.get(state, "").format(path=model_path)
