"""Settings come from the environment, fail loudly, and every variable is documented."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# `manage.py check` once per case, each in a process of its own that starts from nothing the
# portal read: one Python process imports Django's own modules (which read no setting) and forks a
# child per case, which sets the case's environment and runs manage.py as `python manage.py check`
# would (exit status, stdout and stderr its own). A fresh interpreter per case cost 1.5 CPU-s
# each, mostly importing Django again.
_FORK_PER_CASE = r"""
import json, os, runpy, sys, tempfile, traceback
import django.core.management, django.core.checks, django.db.models, django.forms, django.template, django.urls

cases, results = json.load(sys.stdin), []
for env in cases:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            code = 1
            try:
                os.environ.update(env)
                sys.argv = ["manage.py", "check"]
                runpy.run_path("manage.py", run_name="__main__")
                code = 0
            except SystemExit as exc:  # what the interpreter does with it: a text is printed, exit 1
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
                if not isinstance(exc.code, int | None):
                    print(exc.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        results.append({"returncode": os.waitstatus_to_exitcode(status), "stdout": out.read().decode(errors="replace"),
                        "stderr": err.read().decode(errors="replace")})
json.dump(results, sys.__stdout__)
"""


def manage_check(cases: list[dict[str, str]]) -> list[subprocess.CompletedProcess]:
    """`python manage.py check` with each environment in `cases` (added to this one's), each case in
    its own process (see _FORK_PER_CASE)."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK_PER_CASE],
        cwd=ROOT,
        env=os.environ,
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=60 + 30 * len(cases),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [subprocess.CompletedProcess(["manage.py", "check"], **r) for r in json.loads(done.stdout)]


def test_every_variable_read_by_settings_has_a_line_in_env_example():
    source = (ROOT / "portal" / "settings.py").read_text() + (ROOT / "portal" / "env.py").read_text()
    read = set(
        re.findall(r'(?:get|value|db_url|email_url|url|urls|networks|environ\.get)\(\s*"([A-Z][A-Z0-9_]+)"', source)
    )
    documented = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert read, "the pattern found no variables: the test would pass vacuously"
    assert read - documented == set()


BAD_VALUES = [
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
    ("PORTAL_TRUSTED_PROXIES", "1.2.3.4/99"),  # a typo would trust no proxy, silently
    ("DATABASE_URL", "notaurl"),
]


@pytest.fixture(scope="module")
def bad_value_starts(tmp_path_factory):
    """What `manage.py check` did with each of BAD_VALUES, all started by one process (manage_check)."""
    folder = tmp_path_factory.mktemp("bad-values")
    cases = [{"PORTAL_DATA_DIR": str(folder / str(i)), name: value} for i, (name, value) in enumerate(BAD_VALUES)]
    return dict(zip(BAD_VALUES, manage_check(cases), strict=True))


@pytest.mark.parametrize(("name", "value"), BAD_VALUES)
def test_a_bad_value_stops_the_process_at_start_naming_the_variable(bad_value_starts, name, value):
    result = bad_value_starts[name, value]
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


UNSAFE = [
    ({"DJANGO_DEBUG": "true"}, "SECURITY WARNING: DJANGO_DEBUG is on"),
    ({"DJANGO_ALLOWED_HOSTS": "*"}, "SECURITY WARNING: DJANGO_ALLOWED_HOSTS contains *"),
    (
        {"PORTAL_PUBLIC_URL": "http://llm.example.com"},
        "SECURITY WARNING: PORTAL_PUBLIC_URL is http://llm.example.com (http on a non-loopback host)",
    ),
]
SAFE = [
    {"PORTAL_PUBLIC_URL": "https://llm.example.com", "DJANGO_ALLOWED_HOSTS": "llm.example.com"},
    {"PORTAL_PUBLIC_URL": "http://127.0.0.1:8000"},
]


@pytest.fixture(scope="module")
def check_outputs(tmp_path_factory) -> list[str]:
    """What `manage.py check` wrote to stderr for each of UNSAFE's configurations, then SAFE's, all
    started by one process (manage_check); each must start."""
    folder = tmp_path_factory.mktemp("warnings")
    configurations = [variables for variables, _ in UNSAFE] + SAFE
    cases = [{"PORTAL_DATA_DIR": str(folder / str(i) / "data"), **v} for i, v in enumerate(configurations)]
    results = manage_check(cases)
    for result in results:
        assert result.returncode == 0, result.stderr[-2000:]
    return [result.stderr for result in results]


@pytest.mark.parametrize(
    ("case", "warning"), list(enumerate(w for _, w in UNSAFE)), ids=["debug", "wildcard-hosts", "http-public-url"]
)
def test_an_unsafe_setting_is_a_loud_warning_at_start(check_outputs, case, warning):
    assert warning in check_outputs[case]


def test_a_safe_configuration_starts_without_warnings(check_outputs):
    quiet, loopback = check_outputs[len(UNSAFE) :]
    assert "SECURITY WARNING" not in quiet
    assert "SECURITY WARNING" not in loopback


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
