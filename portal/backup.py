"""`portal backup` and `portal restore`: one archive (tar.gz, mode 0600) with everything a data
folder needs to come back elsewhere.

What goes in, each copied at a consistent point while the portal keeps running:
- the database: SQLite through its online backup API (a snapshot, WAL included), PostgreSQL with
  `pg_dump --format=custom` (a snapshot in one transaction);
- the embedded Redis's data (limiter windows, the task queue): `BGREWRITEAOF`, then its append-only
  folder (a fresh base and the few commands after it; a half-written last command is dropped at
  load). An external Redis (`REDIS_URL`) is not copied: it is the operator's, and nothing in it is
  needed to serve (counters start again, queued tasks are re-sent by beat);
- the generated secret files (`secret_key`, `encryption_key`, `key_hash_secret`). Secrets given as
  environment variables are not in the folder and so not in the archive: keep your `.env`.

`restore` writes into the data folder of `PORTAL_DATA_DIR` (and the database of `DATABASE_URL`),
which must be empty unless `--force`; it runs no Django code before the secrets are in place, so
importing the settings cannot generate new ones first.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from . import embedded_redis
from . import env as penv

FORMAT = 1
SECRET_FILES = ("secret_key", "encryption_key", "key_hash_secret")
SQLITE_NAME = "portal.sqlite3"
# What a data folder holds that is no data: collected static files, the `portal up` lock.
_FRESH = {"staticfiles", "portal.pid"}


class BackupError(Exception):
    """Why a backup or a restore cannot be done, for a person."""


# --- backup -------------------------------------------------------------------------------------


def backup(settings: Any, output: Path) -> dict:
    """Write the archive to `output` (0600) and return its manifest."""
    data_dir = Path(settings.DATA_DIR)
    db = settings.DATABASES["default"]
    sqlite = db["ENGINE"] == "django.db.backends.sqlite3"
    if not sqlite:
        _require("pg_dump")
    with tempfile.TemporaryDirectory(prefix="portal-backup-") as tmp:
        stage = Path(tmp)
        (stage / "database").mkdir()
        if sqlite:
            _sqlite_copy(Path(db["NAME"]), stage / "database" / SQLITE_NAME)
        else:
            _run(["pg_dump", "--format=custom", "--no-owner", "--no-privileges", "--file",
                  str(stage / "database" / "portal.pgdump")], db)  # fmt: skip
        redis_copied = False
        if settings.PORTAL_EMBEDDED_REDIS:
            redis_copied = _redis_copy(data_dir, stage / "redis")
        secrets = [name for name in SECRET_FILES if (data_dir / name).is_file()]
        if secrets:
            (stage / "secrets").mkdir()
            for name in secrets:
                shutil.copy2(data_dir / name, stage / "secrets" / name)
        manifest = {
            "format": FORMAT,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "database": "sqlite" if sqlite else "postgresql",
            "redis": "embedded" if redis_copied else "not included",
            "secrets": secrets,
            "migrations": _latest_migrations(),
        }
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        output = output.resolve()
        partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
                for item in sorted(stage.iterdir()):
                    tar.add(item, arcname=item.name)
            os.replace(partial, output)
        except OSError as exc:  # a read-only or full disk, a folder in the way: nothing half written stays
            raise BackupError(f"The archive cannot be written to {output} ({exc}).") from None
        finally:
            with contextlib.suppress(OSError):  # not there, or its folder could not be made
                partial.unlink(missing_ok=True)
    return manifest


def _sqlite_copy(source: Path, target: Path) -> None:
    if not source.is_file():
        raise BackupError(f"There is no database at {source}: nothing to back up.")
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        with dst:
            src.backup(dst)  # one step: a consistent snapshot while others keep writing (WAL)
    finally:
        dst.close()
        src.close()


def _redis_copy(data_dir: Path, target: Path) -> bool:
    """Copy the embedded Redis's append-only folder, after a rewrite when the server runs."""
    folder = data_dir / "redis" / "appendonlydir"
    sock = embedded_redis.socket_path(data_dir)
    if embedded_redis.ping(sock):
        _rewrite_aof(sock)
    if not (folder / "appendonly.aof.manifest").is_file():
        return False
    shutil.copytree(folder, target / "appendonlydir")
    return True


def _rewrite_aof(sock: Path, timeout: float = 60.0) -> None:
    import redis

    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=10)
    try:
        try:
            client.bgrewriteaof()
        except redis.ResponseError as exc:  # one is already running: wait for it instead
            if "in progress" not in str(exc).lower():
                raise
        deadline = time.monotonic() + timeout
        while True:
            info = client.info("persistence")
            if not info.get("aof_rewrite_in_progress") and not info.get("aof_rewrite_scheduled"):
                if info.get("aof_last_bgrewrite_status", "ok") != "ok":
                    raise BackupError("The embedded Redis could not rewrite its append-only file (is the disk full?).")
                return
            if time.monotonic() > deadline:
                raise BackupError(f"The embedded Redis did not finish rewriting its data within {timeout:g} s.")
            time.sleep(0.1)
    finally:
        client.close()


def _latest_migrations() -> dict[str, str]:
    from django.db.migrations.recorder import MigrationRecorder

    latest: dict[str, str] = {}
    for app, name in MigrationRecorder.Migration.objects.values_list("app", "name").order_by("app", "name"):
        latest[app] = name
    return latest


# --- restore ------------------------------------------------------------------------------------


def restore(archive: Path, *, force: bool = False) -> dict:
    """Unpack `archive` into PORTAL_DATA_DIR (and DATABASE_URL's database); returns its manifest,
    with `set_aside` naming where the replaced state's gateway journal was moved (if there was one)."""
    if not archive.is_file():
        raise BackupError(f"No archive at {archive}.")
    data_dir = penv.data_dir()
    database_url = penv.value("DATABASE_URL")
    postgres = bool(database_url)
    leftovers = sorted(p.name for p in data_dir.iterdir() if p.name not in _FRESH)
    if leftovers and not force:
        raise BackupError(
            f"The data folder {data_dir} is not empty ({', '.join(leftovers[:5])}"
            f"{'…' if len(leftovers) > 5 else ''}). Restore into a new folder (set PORTAL_DATA_DIR), "
            "or add --force to replace what is there."
        )
    _refuse_if_running(data_dir)
    with tempfile.TemporaryDirectory(prefix="portal-restore-") as tmp:
        stage = Path(tmp)
        try:
            with tarfile.open(archive, "r:gz") as tar:
                try:
                    tar.extractall(stage, filter="data")  # no links or paths out of the folder
                except TypeError:  # Python < 3.11.4 has no filters
                    tar.extractall(stage)  # noqa: S202
        except (tarfile.TarError, EOFError, OSError) as exc:  # not gzip, not tar, cut short
            raise BackupError(f"{archive} is not a portal backup (it cannot be read as one: {exc}).") from None
        try:
            manifest = json.loads((stage / "manifest.json").read_text())
        except (OSError, ValueError):
            raise BackupError(f"{archive} is not a portal backup (no manifest.json).") from None
        if manifest.get("format") != FORMAT:
            raise BackupError(f"{archive} has backup format {manifest.get('format')!r}; this version reads {FORMAT}.")
        kind = manifest.get("database")
        if kind not in ("sqlite", "postgresql"):
            raise BackupError(f"{archive} is not a portal backup (its manifest names no database).")
        if kind == "postgresql" and not postgres:
            raise BackupError(
                "This backup holds a PostgreSQL database: set DATABASE_URL to the (new, empty) database "
                "to restore it into."
            )
        if kind == "sqlite" and postgres:
            raise BackupError(
                "This backup holds a SQLite database: unset DATABASE_URL to restore it into the data folder."
            )
        newer = _unknown_migrations(manifest.get("migrations") or {})
        if newer:
            raise BackupError(
                f"{archive} was made by a newer version of the portal: its database has migrations this "
                f"version does not know ({', '.join(newer[:3])}). Restore it with that version or a later one."
            )
        secrets = {name: (stage / "secrets" / name) for name in manifest.get("secrets", [])}
        missing = [name for name, path in secrets.items() if not path.is_file()]
        if missing:
            raise BackupError(f"{archive} is not a complete portal backup (no secrets/{missing[0]}).")
        # The database first: it is the step that can fail on what the archive holds (pg_restore
        # refusing the dump), and a failure there must leave the folder's secrets as they were.
        dump = stage / "database" / (SQLITE_NAME if kind == "sqlite" else "portal.pgdump")
        if not dump.is_file():
            raise BackupError(f"{archive} is not a complete portal backup (no database/{dump.name}).")
        if kind == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                (data_dir / f"{SQLITE_NAME}{suffix}").unlink(missing_ok=True)
            shutil.copy2(dump, data_dir / SQLITE_NAME)
            os.chmod(data_dir / SQLITE_NAME, 0o600)
        else:
            assert database_url is not None  # checked above: a PostgreSQL backup needs DATABASE_URL
            _pg_restore(database_url, dump, force=force)
        if (stage / "redis" / "appendonlydir").is_dir():
            target = data_dir / "redis"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            shutil.copytree(stage / "redis" / "appendonlydir", target / "appendonlydir")
        for name, path in secrets.items():
            _write_private(data_dir / name, path.read_bytes())
    set_aside = _set_aside_gateway_state(Path(penv.value("GATEWAY_STATE_DIR") or data_dir))
    return {**manifest, "set_aside": str(set_aside) if set_aside else None}


def _set_aside_gateway_state(state: Path) -> Path | None:
    """The replaced state's gateway files must not act on the restored database: its usage journal
    (records the old database never got) would be replayed into it at the next start, and its key
    snapshot would serve keys the restored database does not hold while the database is away. The
    snapshot is a cache (removed); the journal is moved aside, not deleted, and its new name returned."""
    (state / "gateway-snapshot.bin").unlink(missing_ok=True)
    journal = state / "usage-journal"
    if not journal.is_dir() or not any(journal.iterdir()):
        return None
    target = state / f"usage-journal.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while target.exists():
        n += 1
        target = target.with_name(f"{target.name.split('~')[0]}~{n}")
    journal.rename(target)
    return target


def _unknown_migrations(latest: dict[str, str]) -> list[str]:
    """The project's own apps' latest migrations in a manifest that this version does not have
    (read from the files: no Django before the secrets are in place). Code older than its schema
    would run against tables it does not know, and `migrate` cannot go back."""
    root = Path(__file__).resolve().parent.parent
    unknown = []
    for app, name in sorted(latest.items()):
        folder = root / app / "migrations"
        if folder.is_dir() and not (folder / f"{name}.py").is_file():
            unknown.append(f"{app}.{name}")
    return unknown


def _refuse_if_running(data_dir: Path) -> None:
    import fcntl

    lock = data_dir / "portal.pid"
    if not lock.exists():
        return
    with open(lock) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise BackupError(
                f"A `portal up` (PID {lock.read_text().strip() or 'unknown'}) is running on {data_dir}: stop it first."
            ) from None
        fcntl.flock(fh, fcntl.LOCK_UN)
    sock = embedded_redis.socket_path(data_dir)
    if embedded_redis.ping(sock):
        raise BackupError(f"An embedded Redis is answering on {sock}: stop the portal using {data_dir} first.")


def _write_private(path: Path, content: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(content)
    os.chmod(path, 0o600)


TABLES_SQL = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
# What --force replaces: every table, view and sequence of the public schema, so a table the dump
# does not hold (one a newer version's migration made) is not left beside the restored ones.
EMPTY_PUBLIC_SQL = """
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
           ORDER BY c.relkind = 'S' LOOP  -- sequences last: an identity column's goes with its table
    EXECUTE format('DROP %s IF EXISTS public.%I CASCADE',
                   CASE r.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                  WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
                   r.relname);
  END LOOP;
END $$;
"""


def _pg_restore(database_url: str, dump: Path, *, force: bool) -> None:
    _require("pg_restore")
    _require("psql")
    db = penv.env.db_url_config(database_url)
    tables = _run(["psql", "--no-psqlrc", "-At", "-c", TABLES_SQL], db).strip()
    if tables not in ("", "0") and not force:
        raise BackupError(
            f"The database {db['NAME']!r} already has {tables} tables. Restore into a new, empty database "
            "(createdb, then point DATABASE_URL at it), or add --force to replace what is there."
        )
    # The dump as SQL, then emptying and restoring in one psql transaction: a dump that stops half
    # way (another server version, a conflicting object) leaves the database as it was.
    script = dump.with_suffix(".sql")
    _run(["pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "--file", str(script), str(dump)], db)
    steps = ["-c", EMPTY_PUBLIC_SQL] if force else []
    try:
        _run(["psql", "--no-psqlrc", "-q", "-v", "ON_ERROR_STOP=1", "--single-transaction", *steps,
              "-f", str(script)], db)  # fmt: skip
    except BackupError as exc:
        raise BackupError(f"The dump could not be restored, so the database was left as it was. {exc}") from None


# --- shared -------------------------------------------------------------------------------------


def _require(binary: str) -> None:
    if shutil.which(binary) is None:
        raise BackupError(
            f"`{binary}` was not found on PATH. A PostgreSQL backup needs the PostgreSQL client tools of the "
            "server's major version or newer (Debian/Ubuntu: apt install postgresql-client)."
        )


def _run(argv: list[str], db: dict) -> str:
    """Run a PostgreSQL client tool with the connection in its environment (never in argv)."""
    env = dict(os.environ)
    for var, key in (("PGHOST", "HOST"), ("PGPORT", "PORT"), ("PGUSER", "USER"), ("PGPASSWORD", "PASSWORD")):
        if db.get(key):
            env[var] = str(db[key])
    env["PGDATABASE"] = str(db["NAME"])
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    except FileNotFoundError:
        _require(argv[0])
        raise
    if done.returncode != 0:
        raise BackupError(f"{argv[0]} failed: {done.stderr.strip()[-1500:]}")
    return done.stdout


def default_output(folder: Path | None = None) -> Path:
    """`portal-backup-<UTC time>.tar.gz` in `folder` (default: the current one)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
    return (folder or Path.cwd()) / f"portal-backup-{stamp}.tar.gz"
