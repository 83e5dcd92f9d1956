"""What a gateway process loads before its first request (issue 32: RSS ≤ 120 MiB after a run).

The official `mcp` SDK brings pydantic, starlette, anyio and their kin: ~40 MiB of every process's
memory. It is loaded by the first MCP request (`gateway.asgi.serve_mcp`) or the first MCP server
check (`mcpservers.services.check_server`), never by starting a web, gateway or worker process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import django
django.setup()
import portal.asgi
import portal.celery
portal.asgi.application
heavy = sorted(name for name in ("mcp", "mcp_types", "pydantic", "starlette") if name in sys.modules)
print(",".join(heavy) or "none")
"""


def test_starting_a_process_does_not_load_the_mcp_sdk(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "none"
