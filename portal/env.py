"""Settings from the environment, with generated secrets kept in the data folder.

Every variable is listed in `.env.example`. A bad value stops the process at start with a message
that names the variable, never later in a request.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import stat
from pathlib import Path
from urllib.parse import urlsplit

import environ
from cryptography.fernet import Fernet


class ConfigError(SystemExit):
    """A setting is missing or malformed; raised at import time so nothing half-starts."""


env = environ.Env()


def value(name: str) -> str | None:
    """The raw value of `name`, or None when it is unset or empty: `DATABASE_URL=` as written in
    `.env.example` means "use the default", not "an empty URL"."""
    raw = os.environ.get(name)
    return raw if raw is not None and raw.strip() != "" else None


def get(name: str, cast, default):
    """Read `name` with `cast`, turning any parse error into a message that names the variable.
    An empty value is the default."""
    raw = value(name)
    if raw is None:
        return default
    try:
        return env.parse_value(raw.strip(), cast) if cast is not None else raw
    except (ValueError, TypeError, environ.ImproperlyConfigured) as exc:
        raise ConfigError(f"Invalid value for {name}: {raw!r} ({exc})") from None


WEB = ("http", "https")


def check_url(name: str, raw: str, schemes: tuple[str, ...] = WEB, *, host: bool = True) -> str:
    """`raw` if it is a URL with one of `schemes` and (when `host`) a host name, else a ConfigError
    naming `name`: every URL setting is checked at start, not when a request first uses it."""
    u = urlsplit(raw)
    problem = ""
    if u.scheme not in schemes:
        problem = f"the scheme must be {' or '.join(s + '://' for s in schemes)}"
    elif host and not u.hostname:
        problem = "it has no host name"
    elif any(c.isspace() for c in raw):
        problem = "it contains spaces"
    else:
        try:
            u.port  # noqa: B018 - raises on a port that is not a number in range
        except ValueError:
            problem = "its port is not a number from 1 to 65535"
    if problem:
        example = f"{schemes[0]}://llm.example.com" if schemes[0] in WEB else f"{schemes[0]}://host"
        raise ConfigError(f"Invalid value for {name}: {raw!r} is not a URL ({problem}; e.g. {example})")
    return raw


def url(name: str, default: str = "", schemes: tuple[str, ...] = WEB) -> str:
    """A URL setting (`check_url`), empty or unset meaning `default`."""
    raw = value(name)
    return check_url(name, raw.strip(), schemes) if raw is not None else default


def urls(name: str, schemes: tuple[str, ...] = WEB) -> list[str]:
    """A comma-separated list of URLs (`DJANGO_CSRF_TRUSTED_ORIGINS`), each checked."""
    raw = value(name) or ""
    return [check_url(name, e.strip(), schemes) for e in raw.split(",") if e.strip()]


def allowed_hosts(default: list[str]) -> list[str]:
    """DJANGO_ALLOWED_HOSTS: unset means `default`; set but empty (or only commas) is refused,
    since Django would then answer every request with 400."""
    raw = os.environ.get("DJANGO_ALLOWED_HOSTS")
    if raw is None:
        return default
    hosts = [h.strip() for h in raw.split(",") if h.strip()]
    if not hosts:
        raise ConfigError(
            "Invalid value for DJANGO_ALLOWED_HOSTS: it is set but empty, so every request would be refused. "
            "List the host names this portal answers to (e.g. llm.example.com,127.0.0.1), or remove the line."
        )
    return hosts


def networks(name: str, default: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """A comma-separated list of addresses or CIDRs (`10.0.0.0/8,192.168.1.5`)."""
    raw = value(name)
    entries = [e.strip() for e in raw.split(",") if e.strip()] if raw is not None else default
    try:
        return [ipaddress.ip_network(e, strict=False) for e in entries]
    except ValueError as exc:
        raise ConfigError(f"Invalid value for {name}: {exc} (expected addresses or CIDRs, comma-separated)") from None


def celery_broker_url(redis_url: str) -> str:
    """Celery speaks to the same Redis; kombu spells a unix socket `redis+socket:///path?virtual_host=N`."""
    if redis_url.startswith("unix://"):
        from urllib.parse import parse_qs, urlsplit

        u = urlsplit(redis_url)
        db = (parse_qs(u.query).get("db") or ["0"])[0]
        return f"redis+socket://{u.path}?virtual_host={db}"
    return redis_url


def redis_cache(redis_url: str, timeout: float) -> dict:
    """Django's Redis cache on `redis_url`, every command bounded by `timeout` seconds."""
    return {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": redis_url,
        "OPTIONS": {"socket_connect_timeout": timeout, "socket_timeout": timeout},
    }


# What the portal, the embedded Redis and SQLite create is for this user only: files 0600,
# folders 0700. SQLite gives its -wal and -shm files the database file's mode.
PRIVATE_UMASK = 0o077


def restrict_umask() -> None:
    """Every file this process (and any child it starts: the embedded valkey-server) creates is
    private to its user, whatever the shell's umask."""
    os.umask(PRIVATE_UMASK)


def data_dir() -> Path:
    path = Path(os.environ.get("PORTAL_DATA_DIR") or "var").expanduser().resolve()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"PORTAL_DATA_DIR {str(path)!r} cannot be created: {exc}") from None
    return path


def tighten(folder: Path) -> tuple[int, list[str]]:
    """Take group and other access away from `folder` and everything in it (a folder made by an
    older version is 0755 with 0644 files). Returns how many entries changed, and the ones that
    could not be changed (not ours), with why. Symbolic links are not followed."""
    changed, failed = 0, []
    for root, dirs, files in os.walk(folder):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            try:
                st = os.lstat(name)
                if stat.S_ISLNK(st.st_mode) or not st.st_mode & PRIVATE_UMASK:
                    continue
                os.chmod(name, stat.S_IMODE(st.st_mode) & ~PRIVATE_UMASK)
                changed += 1
            except FileNotFoundError:
                continue  # removed meanwhile (a socket, a temporary file)
            except OSError as exc:
                failed.append(f"{name}: {exc.strerror}")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return changed, failed


def readable_by_others(folder: Path) -> bool:
    """Whether group or other users may enter or read `folder` itself."""
    try:
        return bool(os.stat(folder).st_mode & PRIVATE_UMASK)
    except OSError:
        return False


def unwritable(folder: Path, exc: OSError) -> ConfigError:
    """The one-line refusal for a data folder the portal cannot write to (`exc` says why)."""
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    why = {
        errno.EROFS: "is on a read-only file system",
        errno.ENOSPC: "is on a full disk",
        errno.EDQUOT: "is over its disk quota",
        errno.EACCES: "is not writable by this user",
        errno.EPERM: "is not writable by this user",
    }.get(exc.errno or 0, f"cannot be written ({exc.strerror or exc})")
    fix = "free space there" if full else "make it writable"
    return ConfigError(f"portal: the data folder {folder} {why}; {fix}, or set PORTAL_DATA_DIR to another folder.")


def generated_secret(folder: Path, filename: str, make) -> str:
    """Return the secret stored in `folder/filename`, creating it (mode 0600) on first use.

    Processes starting together on a new data folder (a worker and beat) must agree on one secret:
    each writes its candidate to a private file and links it into place; link() fails for all but
    the first, and every process reads the winner's, never a half-written file."""
    path = folder / filename
    if not path.exists():
        tmp = folder / f".{filename}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(make())
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process won the race: use its secret
        except OSError as exc:  # read-only, full: said in one line, nothing left behind
            raise unwritable(folder, exc) from None
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def secret_key(folder: Path) -> str:
    return os.environ.get("DJANGO_SECRET_KEY") or generated_secret(
        folder, "secret_key", lambda: secrets.token_urlsafe(50)
    )


def encryption_keys(folder: Path) -> list[str]:
    """Fernet keys, newest first. `PORTAL_ENCRYPTION_KEYS` is a comma-separated list."""
    raw = os.environ.get("PORTAL_ENCRYPTION_KEYS")
    if raw:
        keys = [k.strip() for k in raw.split(",") if k.strip()]
    else:
        keys = [generated_secret(folder, "encryption_key", lambda: Fernet.generate_key().decode())]
    for i, key in enumerate(keys):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            raise ConfigError(
                f"Invalid value for PORTAL_ENCRYPTION_KEYS: entry {i + 1} is not a Fernet key "
                "(32 url-safe base64-encoded bytes; make one with `portal genkey`)"
            ) from None
    return keys


def key_hash_secret(folder: Path) -> str:
    return os.environ.get("PORTAL_KEY_HASH_SECRET") or generated_secret(
        folder, "key_hash_secret", lambda: secrets.token_urlsafe(32)
    )


def oidc_group_map(name: str, roles: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """`GROUP=ROLE[:TEAM],…` → {group: {"role": ROLE, "team": TEAM}}. ROLE is one of `roles` or
    empty (the group then only names a team); TEAM is optional. Group names may contain `=` and
    `:` (the last `=` splits), not commas."""
    raw = value(name)
    rules: dict[str, dict[str, str]] = {}
    for entry in (raw or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        group, sep, target = entry.rpartition("=")
        role, _, team = target.partition(":")
        group, role, team = group.strip(), role.strip().lower(), team.strip()
        if not sep or not group or not (role or team):
            raise ConfigError(f"Invalid value for {name}: {entry!r} (expected GROUP=ROLE or GROUP=ROLE:TEAM)")
        if role and role not in roles:
            raise ConfigError(
                f"Invalid value for {name}: {entry!r} names the role {role!r} (one of: {', '.join(roles)})"
            )
        if group in rules:
            raise ConfigError(f"Invalid value for {name}: the group {group!r} is listed twice")
        rules[group] = {"role": role, "team": team}
    return rules
