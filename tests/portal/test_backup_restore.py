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
import time

import httpx
import pytest

from portal import embedded_redis
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ProcessServer
from tests.portal.datafolder import CHAT, env_for, manage, portal, seed

# Several real processes (migrate, seed, servers, backup, restore): minutes on a loaded 2-core box.
pytestmark = [pytest.mark.services, pytest.mark.slow, pytest.mark.timeout(900)]


MORE = """
from accounts.models import Team
from channels.models import Channel
from django.contrib.auth import get_user_model
from keys.models import Budget
team = Team.objects.create(name="ml")
get_user_model().objects.create_user(username="alice", password="alice-pass-123", team=team)
Channel.objects.filter(name="primary").update(api_key="sk-upstream-0123456789")
Budget.objects.create(team=team, window="month", amount="12.5")
"""
CHECK = """
from channels.models import Channel
from django.contrib.auth import get_user_model
from keys.models import Budget
alice = get_user_model().objects.get(username="alice")
print(Channel.objects.get(name="primary").api_key, alice.team.name, "alice:%s" % alice.check_password("alice-pass-123"),
      Budget.objects.get().amount)
"""


def _usage_records(url: str, token: dict[str, str], at_least: int = 1) -> list[tuple]:
    """The usage records (newest first) once `at_least` are written: the gateway writes them in
    batches off the request path."""
    for _ in range(300):
        page = httpx.get(url + "/api/usage/records/", headers=token, timeout=30).json()["results"]
        if len(page) >= at_least:
            return [(r["id"], r["total_tokens"], r["status"]) for r in page]
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} usage records after 30 s: {page}")


def _restore(folder, *args: str, umask: int | None = None) -> subprocess.CompletedProcess:
    """`portal restore ARGS` as a process of its own onto the SQLite data folder `folder` (the
    environment's database URL and gateway state folder left out), with `umask` in the child only."""
    env = {**os.environ, "PORTAL_DATA_DIR": str(folder)}
    for name in ("DATABASE_URL", "GATEWAY_STATE_DIR"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "portal.cli", "restore", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        preexec_fn=None if umask is None else lambda: os.umask(umask),
    )


def _archive(path, manifest: dict, members: dict[str, bytes], folders: tuple[str, ...] = ()):
    """A backup archive made by hand: `manifest.json`, then `folders` (0700) and `members` (0600)."""
    import io

    with tarfile.open(path, "w:gz") as tar:
        for name in folders:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            tar.addfile(info)
        for name, content in {"manifest.json": json.dumps(manifest).encode(), **members}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o600
            tar.addfile(info, io.BytesIO(content))
    return path


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
            manage(env, "shell", "-c", MORE)
            auth = {"Authorization": f"Bearer {made['key']}"}
            token = {"Authorization": f"Token {made['token']}"}
            assert httpx.post(servers[-1].url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=30).is_success
            records = _usage_records(servers[-1].url, token)  # the key used once, its usage recorded

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
            keys = httpx.get(servers[-1].url + "/api/keys/", headers=token, timeout=30)
            assert keys.status_code == 200 and [k["name"] for k in keys.json()["results"]] == ["laptop"]
            assert _usage_records(servers[-1].url, token, at_least=len(records) + 1)[1:] == records
            # The upstream key decrypts with the restored encryption key; team, developer, budget kept.
            out = manage(new_env, "shell", "-c", CHECK)
            assert out.strip().splitlines()[-1] == "sk-upstream-0123456789 ml alice:True 12.5000", out

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
    junk = tmp_path / "junk.tgz"
    junk.write_text("junk\n")
    (tmp_path / "data").mkdir()
    result = _restore(tmp_path / "data", str(junk))
    assert result.returncode != 0 and "is not a portal backup" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("manifest", "members", "said"),
    [
        ({"format": 1}, {}, "its manifest names no database"),
        (  # a backup of a newer version, restored with an older one
            {"format": 1, "database": "sqlite", "secrets": [], "migrations": {"keys": "9999_from_a_later_version"}},
            {"database/portal.sqlite3": b"db"},
            "made by a newer version of the portal: its database has migrations this version does not know "
            "(keys.9999_from_a_later_version)",
        ),
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
    archive = _archive(tmp_path / "cut.tar.gz", manifest, members)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "key_hash_secret").write_text("the folder's own secret\n")
    result = _restore(folder, "--force", str(archive))
    assert result.returncode == 1 and said in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["key_hash_secret"]
    assert (folder / "key_hash_secret").read_text() == "the folder's own secret\n"


def test_a_restore_writes_a_private_data_folder_whatever_the_shells_umask(tmp_path):
    """Every file 0600 and folder 0700 (README, "Configuration"), also right after a restore run
    from a shell whose umask is 022, before `portal up` has started on the folder. (A manifest
    without its date, written by another tool, is restored with a message, not a traceback.)"""
    archive = _archive(
        tmp_path / "backup.tar.gz",
        {"format": 1, "database": "sqlite", "secrets": ["secret_key"]},
        {
            "database/portal.sqlite3": b"db",
            "redis/appendonlydir/appendonly.aof.manifest": b"file appendonly.aof.1.base.rdb seq 1 type b\n",
            "secrets/secret_key": b"s",
        },
        folders=("database", "redis", "redis/appendonlydir", "secrets"),
    )
    folder = tmp_path / "data"
    result = _restore(folder, str(archive), umask=0o022)  # the shell's usual umask
    assert result.returncode == 0 and "restored the backup of (no date)" in result.stdout, result.stderr
    modes = {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}
    assert {path: mode for path, mode in modes.items() if mode not in (0o600, 0o700)} == {}
    assert modes["redis"] == modes["redis/appendonlydir"] == 0o700


def test_a_backup_into_a_folder_names_itself_and_an_unwritable_place_is_a_message(tmp_path, migrated_data_folder):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(migrated_data_folder, data)
    env = env_for(data)
    (tmp_path / "backups").mkdir()
    done = portal(env, "backup", "-o", str(tmp_path / "backups"), cwd=tmp_path)  # README: `-o /backups/…`
    assert done.returncode == 0, done.stderr
    [archive] = (tmp_path / "backups").iterdir()
    assert archive.name.startswith("portal-backup-") and archive.name.endswith(".tar.gz")
    assert str(archive) in done.stdout and stat.S_IMODE(archive.stat().st_mode) == 0o600

    (tmp_path / "a-file").write_text("")
    done = portal(env, "backup", "-o", str(tmp_path / "a-file" / "portal.tar.gz"), cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"The archive cannot be written to {tmp_path / 'a-file' / 'portal.tar.gz'}" in done.stderr


def test_a_backup_of_an_older_version_is_restored_and_migrated_forward(tmp_path):
    """README, "Upgrading": a backup taken before an upgrade comes back with the new version, whose
    migrations move it forward (here: a database left at an early `keys` migration)."""
    old, new = tmp_path / "old", tmp_path / "new"
    manage(env_for(old), "migrate", "keys", "0005", "-v0")
    done = portal(env_for(old), "backup", "-o", str(tmp_path / "older.tar.gz"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    done = portal(env_for(new), "restore", str(tmp_path / "older.tar.gz"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (new / "key_hash_secret").read_bytes() == (old / "key_hash_secret").read_bytes()
    manage(env_for(new), "migrate", "-v0")  # what `portal up` runs before its children
    manage(env_for(new), "migrate", "--check")


def test_a_forced_restore_sets_the_replaced_portals_gateway_journal_aside(tmp_path):
    """The replaced folder's usage journal (records its own database never got) would be replayed
    into the restored database at the next start, and its key snapshot would serve the replaced
    portal's keys while the restored database is away: the journal is moved aside (named), the
    snapshot removed."""
    archive = _archive(
        tmp_path / "backup.tar.gz",
        {"format": 1, "database": "sqlite", "secrets": ["secret_key"], "created": "2026-12-01T00:00:00Z"},
        {"database/portal.sqlite3": b"db", "secrets/secret_key": b"s"},
    )
    folder = tmp_path / "data"
    (folder / "usage-journal").mkdir(parents=True)
    (folder / "usage-journal" / "batch-1.jsonl").write_text('{"key": "of the replaced portal"}\n')
    (folder / "gateway-snapshot.bin").write_bytes(b"the replaced portal's keys")
    result = _restore(folder, "--force", str(archive))
    assert result.returncode == 0, result.stderr
    assert not (folder / "usage-journal").exists() and not (folder / "gateway-snapshot.bin").exists()
    [aside] = folder.glob("usage-journal.replaced-*")
    assert (aside / "batch-1.jsonl").read_text() == '{"key": "of the replaced portal"}\n'  # kept, not replayed
    assert str(aside) in result.stdout, result.stdout
