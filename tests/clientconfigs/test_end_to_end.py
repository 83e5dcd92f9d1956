"""End to end: the real portal ASGI app (portal + gateway) under uvicorn in front of a fake upstream.
The sh installer fetches a bundle from it, then the official `openai` SDK, configured only from what
the generated files say, completes requests through the gateway; the doctor checks the same files."""

from __future__ import annotations

import json
import re
import tomllib
import uuid
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import yaml

from channels.models import Channel, Model, ModelRoute
from clientconfigs import services
from clientconfigs.models import KeyMode
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ThreadServer

from .test_installer import fetch, run_sh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
UPSTREAM_KEY = "sk-upstream-e2e-0000"


@pytest.fixture
def portal(transactional_db, settings, monkeypatch):
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "cctest-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""  # the request's own scheme and host, as behind no proxy
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    with FakeUpstream(api_key=UPSTREAM_KEY, max_model_len=8192) as up:
        channel = Channel.objects.create(
            name="gpu", kind="vllm", base_url=up.base_url, api_key=UPSTREAM_KEY, status="healthy"
        )
        model = Model.objects.create(name="qwen3-32b")
        ModelRoute.objects.create(
            model=model, channel=channel, upstream_model="fake-model", context_window=8192, max_output_tokens=2048
        )
        server = ThreadServer().start()
        try:
            yield server.url, up
        finally:
            server.stop()


def installed(portal_url: str, home: Path, user, client: str):
    _, token = services.issue_download_token(user, client, key_mode=KeyMode.MINT, key_name="e2e")
    result = run_sh(fetch(portal_url + "/connect/install.sh"), home, token)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_openai_sdk_configured_from_continue_files_completes_through_the_gateway(portal, tmp_path, alice):
    url, upstream = portal
    home = tmp_path / "home"
    home.mkdir()
    installed(url, home, alice, "continue")

    config = yaml.safe_load((home / ".continue" / "config.yaml").read_text())
    [entry] = config["models"]
    secret = re.fullmatch(r"\$\{\{ secrets\.(\w+) \}\}", entry["apiKey"]).group(1)
    env = dict(ln.split("=", 1) for ln in (home / ".continue" / ".env").read_text().splitlines() if "=" in ln)
    client = openai.OpenAI(
        base_url=entry["apiBase"],
        api_key=env[secret],
        default_headers=entry["requestOptions"]["headers"],
        max_retries=0,
    )
    options = entry["defaultCompletionOptions"]
    assert options == {"contextLength": 8192, "maxTokens": 2048}
    stream = client.chat.completions.create(
        model=entry["model"],
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=options["maxTokens"],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "tok0 tok1 tok2 tok3 tok4"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    assert upstream.requests[-1].json["model"] == "fake-model"

    doctor = run_sh(fetch(url + "/connect/install.sh"), home, "--check", "continue")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "context window 8192 agrees with the server" in doctor.stdout


def from_cline(home: Path) -> dict:
    providers = json.loads((home / ".cline" / "data" / "settings" / "providers.json").read_text())
    provider = providers["lastUsedProvider"]
    settings = providers["providers"][provider]["settings"]
    # Per-model limits live in models.json (a provider-wide one would override every model's).
    catalog = json.loads((home / ".cline" / "data" / "settings" / "models.json").read_text())
    assert "contextWindow" not in settings and "maxTokens" not in settings
    return {
        "base_url": settings["baseUrl"],
        "api_key": settings["apiKey"],
        "model": settings["model"],
        "max_tokens": catalog["providers"][provider]["models"][settings["model"]]["maxTokens"],
        "headers": settings["headers"],
    }


def from_opencode(home: Path) -> dict:
    config = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
    provider_id, model = config["model"].split("/", 1)
    provider = config["provider"][provider_id]
    return {
        "base_url": provider["options"]["baseURL"],
        "api_key": provider["options"]["apiKey"],
        "model": model,
        "max_tokens": provider["models"][model]["limit"]["output"],
        "headers": provider["options"]["headers"],
    }


def from_roo(home: Path) -> dict:
    profiles = json.loads((home / ".config" / "team-gateway" / "roo-settings.json").read_text())["providerProfiles"]
    profile = profiles["apiConfigs"][profiles["currentApiConfigName"]]
    return {
        "base_url": profile["openAiBaseUrl"],
        "api_key": profile["openAiApiKey"],
        "model": profile["openAiModelId"],
        "max_tokens": profile["openAiCustomModelInfo"]["maxTokens"],
        "headers": profile["openAiHeaders"],
    }


@pytest.mark.parametrize(("client", "read"), [("cline", from_cline), ("opencode", from_opencode), ("roo", from_roo)])
def test_openai_sdk_configured_from_each_clients_file_completes_through_the_gateway(
    portal, tmp_path, alice, client, read
):
    url, upstream = portal
    home = tmp_path / "home"
    home.mkdir()
    installed(url, home, alice, client)
    conf = read(home)
    sdk = openai.OpenAI(
        base_url=conf["base_url"], api_key=conf["api_key"], default_headers=conf["headers"], max_retries=0
    )
    reply = sdk.chat.completions.create(
        model=conf["model"], messages=[{"role": "user", "content": "hi"}], max_tokens=conf["max_tokens"]
    )
    assert reply.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4"
    assert upstream.requests[-1].json["max_tokens"] == 2048
    doctor = run_sh(fetch(url + "/connect/install.sh"), home, "--check", client)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr


def test_anthropic_sdk_configured_from_claude_code_settings_completes_through_the_gateway(portal, tmp_path, alice):
    url, _ = portal
    home = tmp_path / "home"
    home.mkdir()
    installed(url, home, alice, "claude-code")
    env = json.loads((home / ".claude" / "settings.json").read_text())["env"]
    probe = httpx.post(
        env["ANTHROPIC_BASE_URL"] + "/v1/messages",
        headers={"Authorization": f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}"},
        json={},
    )
    if probe.status_code == 404:
        pytest.skip("the gateway does not serve /v1/messages yet (issue 7)")
    sdk = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"], auth_token=env["ANTHROPIC_AUTH_TOKEN"], max_retries=0)
    reply = sdk.messages.create(
        model=env["ANTHROPIC_MODEL"],
        max_tokens=int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]),
        messages=[{"role": "user", "content": "hi"}],
    )
    assert reply.content[0].text


def test_openai_sdk_configured_from_codex_config_uses_the_responses_api(portal, tmp_path, alice):
    url, _ = portal
    home = tmp_path / "home"
    home.mkdir()
    installed(url, home, alice, "codex")
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    provider = config["model_providers"][config["model_provider"]]
    env_file = (home / ".config" / "team-gateway" / "env").read_text()
    key = re.search(provider["env_key"] + r"='([^']+)'", env_file).group(1)
    probe = httpx.post(provider["base_url"] + "/responses", headers={"Authorization": f"Bearer {key}"}, json={})
    if probe.status_code == 404 and "responses" in probe.text.lower():
        pytest.skip("the gateway does not serve /v1/responses yet (issue 7)")
    client = openai.OpenAI(base_url=provider["base_url"], api_key=key, max_retries=0)
    reply = client.responses.create(model=config["model"], input="hello")
    assert reply.output_text
