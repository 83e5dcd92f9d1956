"""CC Switch: the team's provider for Claude Code, Codex and OpenCode, in CC Switch's own database.

CC Switch (farion1231/cc-switch) keeps providers in `~/.cc-switch/cc-switch.db` (SQLite, table
`providers`, primary key (id, app_type)) and writes the app's own files when a provider is switched
on. The installer upserts one row per app under our fixed id, so a second run updates the same
provider (a deep-link import would add another: it names each import `<name>-<timestamp>`), keeps
whether it is the current one, and never touches the user's other providers. `settings_config` is
exactly what CC Switch's deep-link import builds (src-tauri/src/deeplink/provider.rs).

Where CC Switch has no database yet, the installer opens (or prints) the `ccswitch://v1/import`
deep links instead: they carry the key, so it is never lost. The endpoint follows the target app's
convention: root for Claude Code, /v1 for Codex and OpenCode. Extra settings (context window,
version header) travel in `config`, URL-safe Base64 of the app's native config.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote, urlencode

import tomli_w
from django.utils.translation import gettext as _

from . import claude_code, codex, opencode
from .base import PROVIDER_ID, PROVIDER_NAME, Link, Probe, Rendered, RenderInput

SLUG = "cc-switch"
LABEL = "CC Switch"
ENV_INDIRECTION = False
DB_PATH = "~/.cc-switch/cc-switch.db"


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def deep_link(params: dict[str, str]) -> str:
    return "ccswitch://v1/import?" + urlencode(params, quote_via=quote)


def claude_env(inp: RenderInput) -> dict[str, str]:
    """The env block CC Switch writes to ~/.claude/settings.json: our extra settings, then the
    standard fields (the import's URL parameters, which win)."""
    env = claude_code.env_block(inp)
    out = {k: v for k, v in env.items() if k.startswith(("CLAUDE_CODE_", "ANTHROPIC_CUSTOM_HEADERS"))}
    out.update(ANTHROPIC_AUTH_TOKEN=inp.key_or_placeholder, ANTHROPIC_BASE_URL=inp.gateway_url)
    if inp.primary:
        model = inp.primary.name
        out.update(
            ANTHROPIC_MODEL=model,
            ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
            ANTHROPIC_DEFAULT_SONNET_MODEL=model,
            ANTHROPIC_DEFAULT_OPUS_MODEL=model,
        )
    return out


def codex_config(inp: RenderInput) -> dict[str, Any]:
    # CC Switch manages MCP servers on its own (its mcp table, synced into each app): the team's go
    # into Codex's config.toml through our installer, not into a provider CC Switch may switch away.
    cfg = {k: v for k, v in codex.config(inp).items() if k != "mcp_servers"}
    provider = cfg["model_providers"][PROVIDER_ID]
    # CC Switch writes the key to Codex's auth.json and marks the provider requires_openai_auth.
    provider = {k: v for k, v in provider.items() if k != "env_key"} | {"requires_openai_auth": True}
    return {**cfg, "model_providers": {PROVIDER_ID: provider}}


def providers(inp: RenderInput) -> list[dict[str, Any]]:
    """One row's `settings_config` per app, as CC Switch's own import would store it."""
    key = inp.key_or_placeholder
    return [
        {"app_type": "claude", "settings_config": {"env": claude_env(inp)}},
        {
            "app_type": "codex",
            "settings_config": {"auth": {"OPENAI_API_KEY": key}, "config": tomli_w.dumps(codex_config(inp))},
        },
        {"app_type": "opencode", "settings_config": opencode.provider_entry(inp, key)},
    ]


def links(inp: RenderInput) -> list[Link]:
    key = inp.key_or_placeholder
    primary = inp.primary
    model = primary.name if primary else ""
    out = []

    env = claude_env(inp)
    extra = {k: v for k, v in env.items() if k.startswith(("CLAUDE_CODE_", "ANTHROPIC_CUSTOM_HEADERS"))}
    claude = {
        "resource": "provider",
        "app": "claude",
        "name": PROVIDER_NAME,
        "endpoint": inp.gateway_url,
        "apiKey": key,
    }
    if model:
        claude.update(model=model, haikuModel=model, sonnetModel=model, opusModel=model)
    claude.update(config=b64(json.dumps({"env": extra}, separators=(",", ":"))), configFormat="json")
    out.append(Link("Claude Code", deep_link(claude)))

    codex_params = {
        "resource": "provider",
        "app": "codex",
        "name": PROVIDER_NAME,
        "endpoint": inp.api_base,
        "apiKey": key,
    }
    if model:
        codex_params["model"] = model
    config = {"auth": {"OPENAI_API_KEY": key}, "config": tomli_w.dumps(codex_config(inp))}
    codex_params.update(config=b64(json.dumps(config, separators=(",", ":"))), configFormat="json")
    out.append(Link("Codex", deep_link(codex_params)))

    oc = {"resource": "provider", "app": "opencode", "name": PROVIDER_NAME, "endpoint": inp.api_base, "apiKey": key}
    if model:
        oc["model"] = model
    oc.update(config=b64(json.dumps(opencode.provider_entry(inp, key), separators=(",", ":"))), configFormat="json")
    out.append(Link("OpenCode", deep_link(oc)))
    return out


def probes() -> list[Probe]:
    """The doctor reads our rows back from CC Switch's database (`format: ccswitch`): one probe per app."""
    return [
        Probe(
            file=DB_PATH,
            format="ccswitch",
            client=LABEL,
            base_url="claude.env.ANTHROPIC_BASE_URL",
            base_shape="root",
            key="claude.env.ANTHROPIC_AUTH_TOKEN",
            models="claude.env",
            model_name="ANTHROPIC_MODEL",
        ),
        Probe(
            file=DB_PATH,
            format="ccswitch",
            client=LABEL,
            base_url=f"codex.config.model_providers.{PROVIDER_ID}.base_url",
            base_shape="v1",
            key="codex.auth.OPENAI_API_KEY",
            models="codex.config",
            model_name="model",
        ),
        Probe(
            file=DB_PATH,
            format="ccswitch",
            client=LABEL,
            base_url="opencode.options.baseURL",
            base_shape="v1",
            key="opencode.options.apiKey",
            models="opencode.models.*",
            model_name="$key",
            model_context="limit.context",
            model_output="limit.output",
        ),
    ]


def render(inp: RenderInput) -> Rendered:
    notes = [
        _(
            'The installer writes the provider "%(provider)s" for Claude Code, Codex and OpenCode into '
            "CC Switch's database (%(db)s, a backup first); switch to it in CC Switch. Without CC Switch's "
            "database it opens these import links instead (CC Switch 3.16 or newer)."
        )
        % {"provider": PROVIDER_NAME, "db": DB_PATH},
    ]
    if not inp.api_key:
        notes.append(
            _(
                "CC Switch needs a key in the link: these links carry %(placeholder)s; edit the provider's "
                "key in CC Switch after importing, or mint a key for this download."
            )
            % {"placeholder": inp.key_or_placeholder}
        )
    return Rendered(links=links(inp), notes=notes, probes=probes(), db_providers=providers(inp))
