#!/usr/bin/env python3
"""The gateway in the workshop's side-by-side harness (`../shared/bench/run_compare.sh`), as issue 32
asks ("in the shared harness as well as bench/gateway_bench.py").

    uv run python bench/shared_harness.py [--harness ../shared/bench] [--repeats 3] [--out DIR]
                                          [--config production|embedded] [-- extra run_compare args]

The harness starts its own mock (granian, port 18000 unless MOCK_PORT says otherwise), its load
client, and the proxy under test from a command line; it needs the key up front. This prepares the
portal first, with this checkout's code, in the configuration asked for:
  production  a fresh PostgreSQL database (`portal_shared` on 127.0.0.1:5432, or DATABASE_URL) and
              Redis (REDIS_URL, else db 13), what the issue's 0.35 ms was measured on;
  embedded    SQLite and the embedded Redis, as `portal up` runs them;
with a channel to the harness's mock (`http://127.0.0.1:$MOCK_PORT/v1`), the model `fake-model`
and a key with all five limits set; then runs the harness with `--label ours` and the gateway as
production starts it (uvicorn, uvloop, httptools, one worker; the harness pins it to PROXY_CPUS).
The harness's own environments come from its `setup.sh bench` (BENCH_HOME, default
~/.cache/portal-bench); its results land in --out.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from gateway_bench import Group, embedded_env, free_port, prepare_portal, production_env  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", default=str(ROOT.parent / "shared" / "bench"), help="folder of run_compare.sh")
    ap.add_argument("--config", choices=("production", "embedded"), default="production")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="", help="results folder (default: a new temporary folder)")
    ap.add_argument("rest", nargs="*", help="more run_compare.sh arguments (after --)")
    a = ap.parse_args()
    script = Path(a.harness) / "run_compare.sh"
    if not script.exists():
        raise SystemExit(f"no harness at {script}")
    out = a.out or tempfile.mkdtemp(prefix="shared-harness-")
    mock_port = os.environ.setdefault("MOCK_PORT", "18000")
    group = Group()
    try:
        with tempfile.TemporaryDirectory(prefix="shared-harness-data-") as tmp:
            data = Path(tmp)
            base = {k: v for k, v in os.environ.items() if k != "PORTAL_DATA_DIR"}
            base.update(PORTAL_DATA_DIR=str(data), PORTAL_LOG_LEVEL="WARNING")
            if a.config == "production":
                env = production_env(base, database="portal_shared", redis_db=13)
                if env is None:
                    raise SystemExit("PostgreSQL is unreachable")
            else:
                env = embedded_env(base, data, group)
            key = prepare_portal(f"http://127.0.0.1:{mock_port}/v1", env, root=ROOT)
            port = free_port()
            start = (
                f"cd {shlex.quote(str(ROOT))} && exec {shlex.quote(sys.executable)} -m uvicorn portal.asgi:application"
                f" --host 127.0.0.1 --port {port} --loop uvloop --http httptools --no-access-log"
                " --lifespan on --log-level warning"
            )
            argv = [
                "bash", str(script), "--label", "ours", "--url", f"http://127.0.0.1:{port}", "--key", key,
                "--health", "/healthz", "--model", "fake-model", "--start", start,
                "--repeats", str(a.repeats), "--out", out, *a.rest,
            ]  # fmt: skip
            print(f"{a.config} portal prepared; results in {out}", flush=True)
            return subprocess.run(argv, env=env, check=False).returncode
    finally:
        group.stop_all()


if __name__ == "__main__":
    sys.exit(main())
