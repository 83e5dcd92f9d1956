"""CC Switch deep links, read back by a parser that applies CC Switch's documented import rules
(src-tauri/src/deeplink/{parser,provider,utils}.rs as summarised in the research note)."""

from __future__ import annotations

import base64
import binascii
import json
import tomllib
from urllib.parse import parse_qsl, urlsplit

import pytest

from clientconfigs.clients import ccswitch

from .conftest import SAMPLE_KEY, sample_input

APPS = {"claude", "codex", "gemini", "grokbuild", "opencode", "openclaw", "hermes"}


class DeepLinkError(ValueError):
    pass


def decode_b64(value: str) -> bytes:
    """Standard or URL-safe Base64, padding optional."""
    padded = value + "=" * (-len(value) % 4)
    for decoder in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return decoder(padded, validate=True) if decoder is base64.b64decode else decoder(padded)
        except (binascii.Error, ValueError):
            continue
    raise DeepLinkError("config is not Base64")


def parse(url: str) -> dict:
    parts = urlsplit(url)
    if parts.scheme != "ccswitch":
        raise DeepLinkError("scheme must be ccswitch")
    if parts.netloc != "v1":
        raise DeepLinkError("version must be v1")
    if parts.path != "/import":
        raise DeepLinkError("path must be /import")
    params = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True))
    if params.get("resource") != "provider":
        raise DeepLinkError("resource must be provider here")
    if params.get("app") not in APPS:
        raise DeepLinkError("unknown app")
    if not params.get("name"):
        raise DeepLinkError("name is required")
    return params


def import_provider(params: dict) -> dict:
    """What CC Switch would store for the provider: the app's native config with URL params winning."""
    fmt = params.get("configFormat", "json")
    if fmt not in ("json", "toml"):
        raise DeepLinkError("configFormat must be json or toml")
    config = {}
    if params.get("config"):
        raw = decode_b64(params["config"]).decode()
        config = json.loads(raw) if fmt == "json" else {"config": raw}
    endpoints = [e.strip() for e in params.get("endpoint", "").split(",") if e.strip()]
    app = params["app"]
    if app == "claude":
        env = dict(config.get("env", {}))
        endpoint = endpoints[0] if endpoints else env.get("ANTHROPIC_BASE_URL", "")
        key = params.get("apiKey") or env.get("ANTHROPIC_AUTH_TOKEN", "")
        env.update(ANTHROPIC_AUTH_TOKEN=key, ANTHROPIC_BASE_URL=endpoint)
        for param, var in (
            ("model", "ANTHROPIC_MODEL"),
            ("haikuModel", "ANTHROPIC_DEFAULT_HAIKU_MODEL"),
            ("sonnetModel", "ANTHROPIC_DEFAULT_SONNET_MODEL"),
            ("opusModel", "ANTHROPIC_DEFAULT_OPUS_MODEL"),
        ):
            if params.get(param):
                env[var] = params[param]
        result = {"env": env}
    elif app == "codex":
        toml = tomllib.loads(config.get("config", ""))
        key = params.get("apiKey") or config.get("auth", {}).get("OPENAI_API_KEY", "")
        provider_id = toml.get("model_provider", "custom")
        provider = toml.setdefault("model_providers", {}).setdefault(provider_id, {})
        endpoint = endpoints[0] if endpoints else provider.get("base_url", "")
        provider["base_url"] = endpoint.rstrip("/")
        provider.setdefault("wire_api", "responses")
        if params.get("model"):
            toml["model"] = params["model"]
        result = {"auth": {"OPENAI_API_KEY": key}, "config": toml}
    elif app == "opencode":
        entry = dict(config)
        options = dict(entry.get("options", {}))
        endpoint = endpoints[0] if endpoints else options.get("baseURL", "")
        key = params.get("apiKey") or options.get("apiKey", "")
        options.update(baseURL=endpoint, apiKey=key)
        entry["options"] = options
        entry.setdefault("npm", "@ai-sdk/openai-compatible")
        if params.get("model"):
            entry.setdefault("models", {}).setdefault(params["model"], {"name": params["model"]})
        result = entry
    else:
        raise DeepLinkError("app not covered by this parser")
    if not endpoint or urlsplit(endpoint).scheme not in ("http", "https"):
        raise DeepLinkError("endpoint must be an http(s) URL")
    if not key:
        raise DeepLinkError("apiKey is required")
    return result


def links(api_key=SAMPLE_KEY) -> dict[str, str]:
    return {link.label: link.url for link in ccswitch.render(sample_input(api_key)).links}


def test_links_round_trip_their_parameters():
    inp = sample_input(SAMPLE_KEY)
    for url in links().values():
        params = parse(url)
        assert ccswitch.deep_link(params) == url
        assert params["apiKey"] == SAMPLE_KEY
        assert params["model"] == "qwen3-32b"
        assert params["name"] == "Team Gateway"
        assert inp.version in decode_b64(params["config"]).decode()


def test_claude_link_uses_the_root_endpoint_and_fills_every_model_field():
    imported = import_provider(parse(links()["Claude Code"]))
    env = imported["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://llm.example.com"
    assert env["ANTHROPIC_AUTH_TOKEN"] == SAMPLE_KEY
    assert env["ANTHROPIC_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "qwen3-32b"
    assert env["ANTHROPIC_DEFAULT_SONNET_MODEL"] == env["ANTHROPIC_DEFAULT_OPUS_MODEL"] == "qwen3-32b"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert "ANTHROPIC_API_KEY" not in env


def test_codex_link_uses_v1_and_a_custom_responses_provider():
    imported = import_provider(parse(links()["Codex"]))
    config = imported["config"]
    assert imported["auth"]["OPENAI_API_KEY"] == SAMPLE_KEY
    assert "openai" not in config["model_providers"]
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"] == "https://llm.example.com/v1"
    assert provider["wire_api"] == "responses"
    assert provider["requires_openai_auth"] is True
    assert config["model"] == "qwen3-32b"
    assert config["model_context_window"] == 32768


def test_opencode_link_uses_v1_and_carries_model_limits():
    imported = import_provider(parse(links()["OpenCode"]))
    assert imported["options"]["baseURL"] == "https://llm.example.com/v1"
    assert imported["options"]["apiKey"] == SAMPLE_KEY
    assert imported["models"]["qwen3-32b"]["limit"] == {"context": 32768, "output": 8192}


def test_placeholder_links_still_import_with_the_placeholder_key():
    for url in links(None).values():
        assert import_provider(parse(url))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ccswitch://v2/import?resource=provider&app=claude&name=x&endpoint=https://a&apiKey=k", "version"),
        ("ccswitch://v1/import?resource=provider&app=claude&name=x&endpoint=https://a", "apiKey"),
        ("ccswitch://v1/import?resource=provider&app=claude&name=x&endpoint=ftp://a&apiKey=k", "endpoint"),
        ("https://v1/import?resource=provider&app=claude&name=x", "scheme"),
        ("ccswitch://v1/import?resource=provider&app=pi&name=x", "app"),
    ],
)
def test_the_parser_rejects_what_cc_switch_rejects(url, message):
    with pytest.raises(DeepLinkError, match=message):
        import_provider(parse(url))
