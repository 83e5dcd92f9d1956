"""A real data folder as `portal up` makes it, for the tests of what happens to it (full disk,
backup and restore): SQLite in the folder, the embedded Redis (append-only file on) on its data,
migrated by `portal manage migrate` (once per run, then copied), with an admin's API token and a
developer key routed to a fake upstream, all made by the portal's own code in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from django.conf import settings

SEED = """
import json
from accounts.choices import Role
from accounts.services import issue_token
from channels.models import Channel, Model, ModelRoute
from django.contrib.auth import get_user_model
from keys.services import issue_key
User = get_user_model()
admin = User.objects.create_user(username="admin", password="admin-pass-123", role=Role.ADMIN, is_staff=True)
model = Model.objects.create(name="qwen3-32b")
channel = Channel.objects.create(name="primary", kind="vllm", base_url=UPSTREAM, status="healthy")
ModelRoute.objects.create(model=model, channel=channel, upstream_model="fake-model", context_window=8192)
_t, token = issue_token(user=admin, name="script")
_k, key = issue_key(owner=admin, name="laptop")
print("SEED" + json.dumps({"token": token, "key": key}))
"""

CHAT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of `portal up` on `data_dir`: SQLite and the embedded Redis in the folder (run
    it with `embedded_redis.EmbeddedRedis(data_dir, appendonly=True)`), secrets generated there."""
    env = {**os.environ, "PORTAL_DATA_DIR": str(data_dir), "PYTHONPATH": str(settings.BASE_DIR), **extra}
    for name in ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "GATEWAY_REDIS_NAMESPACE"):
        env.pop(name, None)
    for name in ("DJANGO_SECRET_KEY", "PORTAL_ENCRYPTION_KEYS", "PORTAL_KEY_HASH_SECRET"):
        env.pop(name, None)
    return env


def portal(env: dict[str, str], *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The `portal` command (portal/cli.py), run from `cwd` (it reads `cwd/.env`)."""
    return subprocess.run(
        [sys.executable, "-m", "portal.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def seed(env: dict[str, str], upstream_url: str, migrated: Path) -> dict[str, str]:
    """Copy the run's migrated data folder (conftest's `migrated_data_folder`) into the folder, then
    make the admin's token and a key; returns their plaintexts."""
    shutil.copytree(migrated, env["PORTAL_DATA_DIR"], dirs_exist_ok=True)
    out = manage(env, "shell", "-c", f"UPSTREAM = {upstream_url!r}\n" + SEED)
    line = [ln for ln in out.splitlines() if ln.startswith("SEED")][-1]
    return json.loads(line[4:])
