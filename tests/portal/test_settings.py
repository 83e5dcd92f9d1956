"""Settings come from the environment, fail loudly, and every variable is documented."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_variable_read_by_settings_has_a_line_in_env_example():
    source = (ROOT / "portal" / "settings.py").read_text() + (ROOT / "portal" / "env.py").read_text()
    read = set(
        re.findall(r'(?:get|value|db_url|email_url|url|urls|networks|environ\.get)\(\s*"([A-Z][A-Z0-9_]+)"', source)
    )
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert read, "the pattern found no variables: the test would pass vacuously"
    assert read - documented == set()


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("HOSTS_STOP_GRACE", "soon"),
        ("REDIS_URL", "localhost:6379"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("PORTAL_ENCRYPTION_KEYS", "not-a-fernet-key"),
        ("EMAIL_URL", "pigeon://coop"),
        ("PORTAL_OIDC_GROUP_MAP", "portal-admins=root"),
        ("PORTAL_OIDC_DEFAULT_ROLE", "root"),
        ("PORTAL_OIDC_CLIENT_ID", "portal"),  # on, but no issuer to discover the endpoints from
        ("PORTAL_PASSWORD_LOGIN_ADMINS_ONLY", "true"),  # without single sign-on nobody else could log in
        ("PORTAL_PUBLIC_URL", "not-a-url"),
        ("PORTAL_PUBLIC_URL", "ftp://llm.example.com"),
        ("PORTAL_PUBLIC_URL", "https://"),
        ("PORTAL_PUBLIC_URL", "https://llm.example.com:99999"),
        ("DJANGO_CSRF_TRUSTED_ORIGINS", "llm.example.com"),
        ("PORTAL_OIDC_ISSUER", "id.example.com/realms/eng"),
        ("PORTAL_OIDC_TOKEN_ENDPOINT", "/token"),
        ("REDIS_URL", "redis://"),
        ("CELERY_BROKER_URL", "amqp:///vhost"),
        ("PORTAL_LOGIN_TRUSTED_ADDRESSES", "localhost"),
    ],
)
def test_a_bad_value_stops_the_process_at_start_naming_the_variable(tmp_path, name, value):
    env = {**os.environ, "PORTAL_DATA_DIR": str(tmp_path), name: value}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert f"Invalid value for {name}" in result.stderr + result.stdout


def _take_secret(folder: str, queue) -> None:
    import secrets as _secrets

    from portal.env import generated_secret

    queue.put(generated_secret(Path(folder), "encryption_key", lambda: _secrets.token_hex(16)))


def test_processes_starting_together_on_a_new_data_folder_agree_on_one_secret(tmp_path):
    """A worker and beat started at once on a fresh folder (it failed CI once with FileExistsError)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for round_ in range(10):
        folder = tmp_path / str(round_)
        folder.mkdir()
        queue = ctx.Queue()
        procs = [ctx.Process(target=_take_secret, args=(str(folder), queue)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        assert all(p.exitcode == 0 for p in procs)
        got = {queue.get(timeout=10) for _ in procs}
        assert len(got) == 1 and all(got)
        assert (folder / "encryption_key").stat().st_mode & 0o777 == 0o600
        assert [f.name for f in folder.iterdir()] == ["encryption_key"]  # no temporary file left


def check_output(tmp_path: Path, **variables: str) -> str:
    env = {**os.environ, "PORTAL_DATA_DIR": str(tmp_path / "data"), **variables}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stderr


@pytest.mark.parametrize(
    ("variables", "warning"),
    [
        ({"DJANGO_DEBUG": "true"}, "SECURITY WARNING: DJANGO_DEBUG is on"),
        ({"DJANGO_ALLOWED_HOSTS": "*"}, "SECURITY WARNING: DJANGO_ALLOWED_HOSTS contains *"),
        (
            {"PORTAL_PUBLIC_URL": "http://llm.example.com"},
            "SECURITY WARNING: PORTAL_PUBLIC_URL is http://llm.example.com (http on a non-loopback host)",
        ),
    ],
    ids=["debug", "wildcard-hosts", "http-public-url"],
)
def test_an_unsafe_setting_is_a_loud_warning_at_start(tmp_path, variables, warning):
    assert warning in check_output(tmp_path, **variables)


def test_a_safe_configuration_starts_without_warnings(tmp_path):
    quiet = check_output(tmp_path, PORTAL_PUBLIC_URL="https://llm.example.com", DJANGO_ALLOWED_HOSTS="llm.example.com")
    assert "SECURITY WARNING" not in quiet
    assert "SECURITY WARNING" not in check_output(tmp_path, PORTAL_PUBLIC_URL="http://127.0.0.1:8000")


def test_a_data_folder_others_can_read_is_warned_about(settings, tmp_path):
    from portal import startup

    folder = tmp_path / "data"
    folder.mkdir()
    folder.chmod(0o755)
    settings.DATA_DIR = folder
    assert any("is open to other users of this machine" in w for w in startup.warnings())
    startup.secure_data_dir()  # what every process does at start
    assert folder.stat().st_mode & 0o777 == 0o700
    assert not any("open to other users" in w for w in startup.warnings())
