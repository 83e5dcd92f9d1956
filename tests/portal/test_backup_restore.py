"""`portal backup` while the portal serves, `portal restore` into a new folder, and the old keys
answer through a gateway started on the restored folder (real processes, SQLite and the embedded
Redis as `portal up` runs them)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile

import httpx
import pytest

from portal import embedded_redis
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ProcessServer
from tests.portal.datafolder import CHAT, env_for, manage, portal, seed

# Several real processes (migrate, seed, servers, backup, restore): minutes on a loaded 2-core box.
pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_backup_restored_into_a_new_folder_serves_the_old_keys(tmp_path, migrated_data_folder):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "backups" / "portal.tar.gz"
    old.mkdir()
    servers: list[ProcessServer] = []
    redises = [embedded_redis.EmbeddedRedis(old, appendonly=True).start()]
    try:
        with FakeUpstream() as upstream:
            env = env_for(old)
            made = seed(env, upstream.base_url, migrated_data_folder)
            servers.append(ProcessServer(env))
            servers[-1].wait_ready()
            auth = {"Authorization": f"Bearer {made['key']}"}
            assert httpx.post(servers[-1].url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=30).is_success

            done = portal(env, "backup", "--output", str(archive), cwd=tmp_path)  # online: the portal keeps serving
            assert done.returncode == 0, done.stderr
            assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
            with tarfile.open(archive) as tar:
                names = set(tar.getnames())
                manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            assert {"database/portal.sqlite3", "secrets/key_hash_secret", "secrets/encryption_key"} <= names
            assert any(n.startswith("redis/appendonlydir/") for n in names)
            assert manifest["database"] == "sqlite" and manifest["redis"] == "embedded"

            servers.pop().stop()
            redises.pop().stop()

            new_env = env_for(new)
            done = portal(new_env, "restore", str(archive), cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            again = portal(new_env, "restore", str(archive), cwd=tmp_path)
            assert again.returncode == 1 and "is not empty" in again.stderr and "--force" in again.stderr
            assert portal(new_env, "restore", str(archive), "--force", cwd=tmp_path).returncode == 0

            redises.append(embedded_redis.EmbeddedRedis(new, appendonly=True).start())
            servers.append(ProcessServer(new_env))
            servers[-1].wait_ready()
            r = httpx.post(servers[-1].url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=30)
            assert r.status_code == 200, r.text  # the old key, hashed with the restored secret
            keys = httpx.get(
                servers[-1].url + "/api/keys/", headers={"Authorization": f"Token {made['token']}"}, timeout=30
            )
            assert keys.status_code == 200 and [k["name"] for k in keys.json()["results"]] == ["laptop"]

            # The README's lost-admin-password recipe, on the restored folder, without a terminal.
            reset = subprocess.run(
                [sys.executable, "-m", "portal.cli", "manage", "changepassword", "admin"],
                input="Restored-pass-4821\nRestored-pass-4821\n",
                env=new_env,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=300,
                start_new_session=True,  # no controlling terminal: getpass reads stdin
            )
            assert reset.returncode == 0, reset.stderr
            check = "from accounts.models import User; print(User.objects.get(username='admin').check_password(PW))"
            out = manage(new_env, "shell", "-c", "PW = 'Restored-pass-4821'\n" + check)
            assert out.strip().splitlines()[-1] == "True", out
    finally:
        for server in servers:
            server.stop()
        for redis in redises:
            redis.stop()


def test_a_postgresql_backup_without_pg_dump_says_what_to_install(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from portal import backup

    monkeypatch.setenv("PATH", str(tmp_path))  # no pg_dump on it
    settings = SimpleNamespace(
        DATA_DIR=tmp_path,
        PORTAL_EMBEDDED_REDIS=False,
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "portal"}},
    )
    with pytest.raises(backup.BackupError, match=r"pg_dump` was not found on PATH.*postgresql-client"):
        backup.backup(settings, tmp_path / "out.tar.gz")
    assert not (tmp_path / "out.tar.gz").exists()


def test_restoring_a_file_that_is_no_archive_is_refused_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    junk = tmp_path / "junk.tgz"
    junk.write_text("junk\n")
    (tmp_path / "data").mkdir()
    env = {**os.environ, "PORTAL_DATA_DIR": str(tmp_path / "data")}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "portal.cli", "restore", str(junk)], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode != 0 and "is not a portal backup" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("manifest", "members", "said"),
    [
        ({"format": 1}, {}, "its manifest names no database"),
        (
            {"format": 1, "database": "sqlite", "secrets": ["key_hash_secret"]},
            {"database/portal.sqlite3": b"db"},
            "no secrets/key_hash_secret",
        ),
        (
            {"format": 1, "database": "sqlite", "secrets": ["key_hash_secret"]},
            {"secrets/key_hash_secret": b"s"},
            "no database/portal.sqlite3",
        ),
    ],
)
def test_restoring_an_incomplete_archive_is_refused_in_one_line_and_changes_nothing(tmp_path, manifest, members, said):
    import io

    archive = tmp_path / "cut.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, content in {"manifest.json": json.dumps(manifest).encode(), **members}.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "key_hash_secret").write_text("the folder's own secret\n")
    env = {**os.environ, "PORTAL_DATA_DIR": str(folder)}
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "portal.cli", "restore", "--force", str(archive)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["key_hash_secret"]
    assert (folder / "key_hash_secret").read_text() == "the folder's own secret\n"
