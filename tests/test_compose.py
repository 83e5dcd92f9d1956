"""docker-compose.yml and the Dockerfile are wired the way the README says.

No Docker engine runs here: `docker-compose config` (Debian's docker-compose) validates and
resolves the file, and the resolved environment is fed to the real settings module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.services import require_binary

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
APP_SERVICES = ("migrate", "web", "worker", "beat")
SECRETS = ("DJANGO_SECRET_KEY", "PORTAL_ENCRYPTION_KEYS", "PORTAL_KEY_HASH_SECRET")


def compose_project(tmp_path, dotenv: str = "") -> Path:
    """A copy of the compose project (docker-compose.yml, deploy/) with its own .env, never a
    developer's: compose reads `.env` next to the file, and `env_file: .env` requires one."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "docker-compose.yml").write_text(COMPOSE.read_text())
    (project / ".env").write_text(dotenv)
    return project


def resolved_config(tmp_path, dotenv: str = "", **env) -> dict:
    """`docker-compose config` output with a given .env (default empty) plus `env`."""
    binary = require_binary("docker-compose", "apt-get install docker-compose (validates without an engine)")
    project = compose_project(tmp_path, dotenv)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_", "POSTGRES_", "WEB_"))}
    clean.update(env)
    result = subprocess.run(
        [binary, "-f", str(project / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=project,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def env_example_names() -> set[str]:
    return set(re.findall(r"^([A-Z][A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))


def test_compose_file_validates(tmp_path):
    binary = require_binary("docker-compose", "apt-get install docker-compose")
    project = compose_project(tmp_path)
    result = subprocess.run(
        [binary, "-f", str(project / "docker-compose.yml"), "config", "-q"], capture_output=True, text=True, cwd=project
    )
    assert result.returncode == 0, result.stderr


def test_it_has_the_services_the_readme_names(raw):
    services = set(raw["services"])
    assert services == {"postgres", "redis", "migrate", "web", "worker", "beat", "proxy"}
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Production with Docker Compose", 1)[1].split("\n## ", 1)[0]
    for name in services:
        assert f"`{name}`" in section, f"README does not mention {name}"
    for volume in raw["volumes"]:
        assert f"`{volume}`" in section


def test_app_services_get_database_redis_data_dir_and_every_secret(tmp_path):
    config = resolved_config(
        tmp_path,
        POSTGRES_PASSWORD="pg-secret",
        DJANGO_SECRET_KEY="dsk",
        PORTAL_ENCRYPTION_KEYS="k1,k2",
        PORTAL_KEY_HASH_SECRET="hs",
        PORTAL_PUBLIC_URL="https://llm.example.com",
    )
    for name in APP_SERVICES:
        service = config["services"][name]
        env = service["environment"]
        assert env["DATABASE_URL"] == "postgres://portal:pg-secret@postgres:5432/portal", name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["PORTAL_DATA_DIR"] == "/data", name
        assert (env["DJANGO_SECRET_KEY"], env["PORTAL_ENCRYPTION_KEYS"], env["PORTAL_KEY_HASH_SECRET"]) == (
            "dsk",
            "k1,k2",
            "hs",
        )
        assert env["PORTAL_PUBLIC_URL"] == "https://llm.example.com"
        assert any(str(v).startswith("portal-data:/data") for v in service["volumes"]), name
        # Every variable handed to the app is documented in .env.example.
        assert set(env) <= env_example_names(), set(env) - env_example_names()
        assert env["PORTAL_ACCESS_LOG"] == "1", name  # one gateway.access line per request, per replica
    assert config["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pg-secret"


def test_web_scales_behind_one_published_port(tmp_path):
    config = resolved_config(tmp_path, WEB_REPLICAS="3", PORTAL_PORT="9000")
    web, proxy = config["services"]["web"], config["services"]["proxy"]
    assert web["deploy"]["replicas"] == 3
    assert web["deploy"]["mode"] == "replicated"  # podman-compose ignores `replicas` without it
    assert "ports" not in web  # a fixed host port would stop a second replica
    assert "uvicorn" in web["command"] and "portal.asgi:application" in web["command"]
    assert "/readyz" in " ".join(web["healthcheck"]["test"])
    # The proxy balances with deploy/Caddyfile (mounted), not a fixed `--to web:8000` upstream.
    assert "/etc/caddy/Caddyfile" in proxy["command"]
    assert any(str(v).endswith("deploy/Caddyfile:/etc/caddy/Caddyfile:ro") for v in proxy["volumes"])
    port = proxy["ports"][0]  # docker-compose 1.x prints "9000:8080", 2.x a mapping
    published = str(port["published"]) if isinstance(port, dict) else port.split(":")[0]
    assert published == "9000"
    assert "/healthz" in " ".join(proxy["healthcheck"]["test"])


def test_every_dotenv_variable_reaches_the_app_and_compose_still_wins(tmp_path):
    dotenv = "EMAIL_URL=smtp://mail.example.com:587\nPORTAL_PROBE_TIMEOUT=17\nDATABASE_URL=sqlite:///nope\n"
    config = resolved_config(tmp_path, dotenv=dotenv)
    for name in APP_SERVICES:
        env = config["services"][name]["environment"]
        # Not listed under `environment:`: reaches the container through `env_file: .env`.
        assert env["EMAIL_URL"] == "smtp://mail.example.com:587" and env["PORTAL_PROBE_TIMEOUT"] == "17", name
        assert env["DATABASE_URL"].startswith("postgres://portal:"), name  # compose's own value wins


def test_images_are_variables_and_the_base_image_an_argument(tmp_path):
    config = resolved_config(
        tmp_path,
        PORTAL_IMAGE="reg.example/portal:1",
        PYTHON_IMAGE="reg.example/python:3.11",
        POSTGRES_IMAGE="reg.example/pg:16",
        REDIS_IMAGE="reg.example/redis:7",
        PROXY_IMAGE="reg.example/caddy:2",
    )
    services = config["services"]
    assert services["postgres"]["image"] == "reg.example/pg:16"
    assert services["redis"]["image"] == "reg.example/redis:7"
    assert services["proxy"]["image"] == "reg.example/caddy:2"
    for name in APP_SERVICES:
        assert services[name]["image"] == "reg.example/portal:1"
        assert services[name]["build"]["args"]["BASE_IMAGE"] == "reg.example/python:3.11"
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", dockerfile, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", dockerfile, re.M)


def test_caddyfile_round_robins_over_every_replica_and_streams():
    """The spread itself is proven by deploy/ci-compose.sh (requests per replica in the access logs)."""
    text = (ROOT / "deploy" / "Caddyfile").read_text()
    assert re.search(r"dynamic a \{\s*name web\s*port 8000\s*refresh \d+s", text)
    assert re.search(r"^\s*lb_policy round_robin$", text, re.M)
    assert re.search(r"^\s*flush_interval -1$", text, re.M)


def test_every_launcher_keeps_idle_connections_longer_than_the_proxy(raw):
    """uvicorn closes an idle connection after --timeout-keep-alive; the proxy in front must drop
    its idle ones first, or a request it sends on one the replica closes at that moment is lost
    (Caddy answers 502 to a POST). `portal up`, the compose file, the image and Kubernetes agree."""
    from portal.cli import KEEP_ALIVE_SECONDS

    def keep_alive(command: list[str]) -> int:
        assert "--timeout-keep-alive" in command, command
        return int(command[command.index("--timeout-keep-alive") + 1])

    dockerfile = (ROOT / "Dockerfile").read_text()
    image = json.loads(re.search(r"^CMD (\[.*?\])$", dockerfile, re.M | re.S)[1].replace("\\\n", ""))
    kube = yaml.safe_load((ROOT / "deploy" / "kubernetes" / "base" / "web.yaml").read_text())
    pod = kube["spec"]["template"]["spec"]["containers"][0]["command"]
    assert keep_alive(raw["services"]["web"]["command"]) == keep_alive(image) == keep_alive(pod) == KEEP_ALIVE_SECONDS
    caddy = re.search(r"transport http \{\s*keepalive (\d+)s", (ROOT / "deploy" / "Caddyfile").read_text())
    assert caddy and int(caddy[1]) < KEEP_ALIVE_SECONDS


def test_startup_order_and_health_checks(raw):
    services = raw["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "migrate" in services["migrate"]["command"][-1] and "ensure_admin" in services["migrate"]["command"][-1]
    for name in ("postgres", "redis", "web", "worker", "proxy"):
        assert services[name]["healthcheck"]["test"], name
    assert "beat" in services["beat"]["command"] and "deploy" not in services["beat"]  # exactly one beat
    # The image's HEALTHCHECK probes web's /healthz; services without HTTP must not inherit it.
    assert services["beat"]["healthcheck"] == {"disable": True}
    assert services["migrate"]["healthcheck"] == {"disable": True}
    assert "worker" in services["worker"]["command"]
    # `podman exec` (health checks) has no HOSTNAME; $(hostname) works under Docker and podman.
    assert "celery@$$(hostname)" in services["worker"]["healthcheck"]["test"][-1]
    assert "-s" not in services["beat"]["command"]  # the database scheduler keeps no schedule file
    for volume in ("pgdata", "redisdata", "portal-data"):
        assert volume in raw["volumes"]


def test_the_environment_compose_passes_is_accepted_by_the_settings(tmp_path):
    config = resolved_config(tmp_path, PORTAL_PUBLIC_URL="https://llm.example.com")
    env = {k: str(v) for k, v in config["services"]["web"]["environment"].items()}
    env["PORTAL_DATA_DIR"] = str(tmp_path / "data")  # /data does not exist outside the container
    probe = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'db': s.DATABASES['default']['HOST'], 'engine': s.DATABASES['default']['ENGINE'], "
        "'broker': s.CELERY_BROKER_URL, 'cache': s.CACHES['default']['BACKEND'], 'hosts': s.ALLOWED_HOSTS, "
        "'csrf': s.CSRF_TRUSTED_ORIGINS}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["db"] == "postgres" and seen["engine"].endswith("postgresql")
    assert seen["broker"] == "redis://redis:6379/0" and seen["cache"].endswith("RedisCache")
    # No "*": the public URL's host, and loopback for the containers' health checks.
    assert seen["hosts"] == ["llm.example.com", "localhost", "127.0.0.1"] and seen["csrf"] == []


def test_dockerfile_builds_a_slim_non_root_image_with_locked_deps_and_static_files():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim", text, re.M)
    assert "uv sync --frozen --no-dev" in text
    assert "collectstatic --noinput" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "/readyz" in text
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".git", ".venv", "var", ".env"):
        assert path in ignored


def test_only_the_proxy_network_may_set_forwarded_headers(tmp_path, raw):
    """No `--forwarded-allow-ips "*"`: uvicorn ignores X-Forwarded-* itself, and the app trusts the
    proxy's network only (PORTAL_TRUSTED_PROXIES, applied in portal.asgi)."""
    config = resolved_config(tmp_path)
    web, proxy = config["services"]["web"], config["services"]["proxy"]
    assert "--no-proxy-headers" in web["command"] and "*" not in web["command"]
    assert "--forwarded-allow-ips" not in web["command"]
    trusted = web["environment"]["PORTAL_TRUSTED_PROXIES"]
    subnets = [c["subnet"] for c in config["networks"]["edge"]["ipam"]["config"]]
    assert subnets == [trusted] and "*" not in trusted
    assert "edge" in proxy["networks"] and "edge" in web["networks"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--forwarded-allow-ips" not in dockerfile and "--no-proxy-headers" in dockerfile
