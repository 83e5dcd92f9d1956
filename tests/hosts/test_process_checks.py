"""The shell tests every look at a remote process is made of (`hosts.remote.commands`), run here by
`sh` as the SSH session runs them, on processes of this machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from hosts.remote.commands import alive_test


def _run(script: str, path: str | None = None) -> int:
    env = {**os.environ, "PATH": path} if path else None
    return subprocess.run(["sh", "-c", script], env=env, check=False).returncode


def test_a_running_process_is_alive_and_one_that_is_gone_or_a_zombie_is_not():
    running = subprocess.Popen(["sleep", "60"])
    try:
        assert _run(alive_test(running.pid)) == 0
    finally:
        running.kill()
    os.waitid(os.P_PID, running.pid, os.WEXITED | os.WNOWAIT)  # it has died; not reaped: a zombie
    assert Path(f"/proc/{running.pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z"
    assert _run(alive_test(running.pid)) == 1
    running.wait()
    assert _run(alive_test(running.pid)) == 1


def test_a_zombie_reaped_while_it_is_looked_at_is_gone_not_alive(tmp_path):
    """init reaps orphans whenever it gets to it (here: seconds after they died). A zombie reaped
    between the test's `kill -0` and its read of /proc said "alive": the supervisor's CI failure
    (the head's server of a crashed multi-node deployment still alive after its kill). The reap is
    put exactly there: a `sed` first on PATH waits for this test to reap the zombie."""
    zombie = subprocess.Popen(["sh", "-c", "exit 0"])
    ready, go = tmp_path / "ready", tmp_path / "go"
    os.mkfifo(ready)
    os.mkfifo(go)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real_sed = subprocess.run(["sh", "-c", "command -v sed"], capture_output=True, text=True).stdout.strip()
    (bin_dir / "sed").write_text(f'#!/bin/sh\necho >{ready}\nread _ <{go}\nexec {real_sed} "$@"\n')
    (bin_dir / "sed").chmod(0o755)

    looking = subprocess.Popen(
        ["sh", "-c", alive_test(zombie.pid)], env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    )
    with open(ready) as f:  # the test has run kill -0 (the zombie answered) and now reads /proc
        f.read()
    zombie.wait()  # reaped: its /proc entry is gone
    with open(go, "w") as f:
        f.write("\n")

    assert looking.wait() == 1


def test_a_worker_reaped_while_the_sweep_looks_at_it_is_dead(monkeypatch):
    """The stale-job sweep's own look at a worker of this host (`jobs._orphaned`): kill(0) finds
    the dead worker as a zombie, init reaps it before /proc is read. That said "alive" (the job
    stayed held until the heartbeat went stale); the reap is put exactly there."""
    from hosts.deployments import jobs
    from hosts.models import LaunchJob

    worker = subprocess.Popen(["sh", "-c", "exit 0"])
    os.waitid(os.P_PID, worker.pid, os.WEXITED | os.WNOWAIT)  # it has died; not reaped: a zombie
    kill = os.kill

    def kill_then_reaped(pid: int, sig: int) -> None:
        kill(pid, sig)  # finds the zombie
        worker.wait()  # reaped now, before the sweep reads /proc

    monkeypatch.setattr(jobs.os, "kill", kill_then_reaped)
    assert jobs._orphaned(LaunchJob(worker=f"box:{worker.pid}"), "box")
