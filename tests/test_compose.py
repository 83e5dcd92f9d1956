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


def resolved_config(tmp_path, **env) -> dict:
    """`docker-compose config` output with an empty env file plus `env` (never a developer's .env)."""
    binary = require_binary("docker-compose", "apt-get install docker-compose (validates without an engine)")
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_", "POSTGRES_", "WEB_"))}
    clean.update(env)
    result = subprocess.run(
        [binary, "-f", str(COMPOSE), "--env-file", str(env_file), "config"],
        capture_output=True,
        text=True,
        env=clean,
        cwd=ROOT,
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
    result = subprocess.run([binary, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, cwd=ROOT)
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
    assert config["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pg-secret"


def test_web_scales_behind_one_published_port(tmp_path):
    config = resolved_config(tmp_path, WEB_REPLICAS="3", PORTAL_PORT="9000")
    web, proxy = config["services"]["web"], config["services"]["proxy"]
    assert web["deploy"]["replicas"] == 3
    assert "ports" not in web  # a fixed host port would stop a second replica
    assert "uvicorn" in web["command"] and "portal.asgi:application" in web["command"]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    assert "web:8000" in proxy["command"]
    port = proxy["ports"][0]  # docker-compose 1.x prints "9000:8080", 2.x a mapping
    published = str(port["published"]) if isinstance(port, dict) else port.split(":")[0]
    assert published == "9000"
    assert "/healthz" in " ".join(proxy["healthcheck"]["test"])


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
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert "uv sync --frozen --no-dev" in text
    assert "collectstatic --noinput" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert "/healthz" in text
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
