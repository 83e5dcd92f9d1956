"""`portal backup` / `portal restore` on PostgreSQL (pg_dump / pg_restore): the test database is
backed up, restored into a new database the test creates (and drops), and a gateway started on
the restored database and folder serves the old key. The SQLite + embedded Redis journey is
tests/portal/test_backup_restore.py."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.gateway.conftest import ProcessServer, database_url
from tests.services import require_binary, require_postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SHORT = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}


def portal(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "portal.cli", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def psql(url: str, sql: str) -> None:
    subprocess.run(["psql", "--no-psqlrc", "-d", url, "-c", sql], check=True, capture_output=True, timeout=120)


def test_a_postgresql_backup_restored_into_a_new_database_serves_the_old_key(setup, tmp_path, redis_namespace):
    require_postgres()
    require_binary("pg_dump", "apt install postgresql-client")
    source = database_url()
    name = settings.DATABASES["default"]["NAME"] + "_restore"
    target = source.rsplit("/", 1)[0] + "/" + name
    base = {**os.environ, "PYTHONPATH": str(settings.BASE_DIR), "GATEWAY_REDIS_NAMESPACE": redis_namespace}
    archive = tmp_path / "pg.tar.gz"
    done = portal({**base, "DATABASE_URL": source, "PORTAL_DATA_DIR": str(settings.DATA_DIR)}, "backup", "-o",
                  str(archive), cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr

    psql(source, f'DROP DATABASE IF EXISTS "{name}"')
    psql(source, f'CREATE DATABASE "{name}"')
    server = None
    try:
        restored = {**base, "DATABASE_URL": target, "PORTAL_DATA_DIR": str(tmp_path / "new")}
        done = portal(restored, "restore", str(archive), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        again = portal({**restored, "PORTAL_DATA_DIR": str(tmp_path / "other")}, "restore", str(archive), cwd=tmp_path)
        assert again.returncode == 1 and "already has" in again.stderr and "--force" in again.stderr

        server = ProcessServer(restored)
        server.wait_ready()
        r = httpx.post(
            server.url + "/v1/chat/completions",
            json=SHORT,
            headers={"Authorization": f"Bearer {setup.plaintext}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
    finally:
        if server is not None:
            server.stop()
        psql(source, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _archive_of(path: Path, dump: Path) -> None:
    import io
    import json
    import tarfile

    manifest = {"format": 1, "created": "2026-12-01T00:00:00+00:00", "database": "postgresql",
                "secrets": ["key_hash_secret"]}  # fmt: skip
    with tarfile.open(path, "w:gz") as tar:
        for name, content in (("manifest.json", json.dumps(manifest).encode()),
                              ("secrets/key_hash_secret", b"the archive's secret\n")):  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        tar.add(dump, "database/portal.pgdump")


@contextlib.contextmanager
def _dumped_and_restored_into(tmp_path: Path, source_sql: str, target_sql: str) -> Iterator[tuple[str, Path]]:
    """Two new databases made with their SQL: the first dumped into a backup archive (yielded with
    the second's URL, the restore's target), both dropped at the end."""
    require_postgres()
    require_binary("pg_restore", "apt install postgresql-client")
    server = database_url().rsplit("/", 1)[0]
    base_name = settings.DATABASES["default"]["NAME"]
    source, target = f"{base_name}_source", f"{base_name}_target"
    for name in (source, target):
        psql(f"{server}/postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        psql(f"{server}/postgres", f'CREATE DATABASE "{name}"')
    try:
        psql(f"{server}/{source}", source_sql)
        psql(f"{server}/{target}", target_sql)
        dump = tmp_path / "portal.pgdump"
        subprocess.run(["pg_dump", "--format=custom", "-f", str(dump), "-d", f"{server}/{source}"], check=True,
                       timeout=120)  # fmt: skip
        archive = tmp_path / "backup.tar.gz"
        _archive_of(archive, dump)
        yield f"{server}/{target}", archive
    finally:
        for name in (source, target):
            psql(f"{server}/postgres", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_forced_restore_leaves_no_table_the_backup_did_not_hold(tmp_path):
    """The way back from an upgrade (README: restore the backup taken before it, --force onto the
    same database) must not keep the tables the newer migrations made: the next upgrade's migrate
    would stop on "relation already exists"."""
    older = "CREATE TABLE kept (id bigint GENERATED BY DEFAULT AS IDENTITY, n int); INSERT INTO kept (n) VALUES (1)"
    upgraded = (
        "CREATE TABLE kept (id bigint GENERATED BY DEFAULT AS IDENTITY, n int); INSERT INTO kept (n) VALUES (2);"
        "CREATE TABLE newer (id serial); CREATE VIEW newer_view AS SELECT * FROM newer"
    )
    with _dumped_and_restored_into(tmp_path, older, upgraded) as (target, archive):
        (tmp_path / "data").mkdir()
        env = {**os.environ, "PYTHONPATH": str(settings.BASE_DIR), "DATABASE_URL": target,
               "PORTAL_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
        done = portal(env, "restore", str(archive), "--force", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        listed = subprocess.run(["psql", "--no-psqlrc", "-At", "-d", target, "-c",
                                 "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class c JOIN pg_namespace"
                                 " s ON s.oid = c.relnamespace WHERE nspname = 'public' AND relkind IN ('r', 'v');"
                                 "SELECT n FROM kept"], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert listed.stdout.split() == ["kept", "1"], listed.stdout + listed.stderr


def test_a_restore_pg_restore_stops_on_changes_neither_the_database_nor_the_secrets(tmp_path):
    """A restore stopping half way (here: a schema of the dump is already there) rolls back what
    --force had dropped, and the folder keeps its own secrets."""
    # --force empties the public schema only: the dump's other schema already being there stops
    # the restore after that emptying, which must be rolled back with it.
    dumped = "CREATE TABLE z_kept (id int); CREATE SCHEMA other"
    kept_sql = "CREATE TABLE z_kept (id int); INSERT INTO z_kept VALUES (7); CREATE SCHEMA other"
    with _dumped_and_restored_into(tmp_path, dumped, kept_sql) as (target, archive):
        folder = tmp_path / "data"
        folder.mkdir()
        (folder / "key_hash_secret").write_text("the folder's own secret\n")

        env = {**os.environ, "PYTHONPATH": str(settings.BASE_DIR), "DATABASE_URL": target,
               "PORTAL_DATA_DIR": str(folder)}  # fmt: skip
        done = portal(env, "restore", str(archive), "--force", cwd=tmp_path)
        assert done.returncode == 1 and "could not be restored" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert (folder / "key_hash_secret").read_text() == "the folder's own secret\n"
        kept = subprocess.run(["psql", "--no-psqlrc", "-At", "-d", target, "-c",
                               "SELECT id FROM z_kept"], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert kept.stdout.strip() == "7", kept.stderr
