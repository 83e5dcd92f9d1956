"""CC Switch: `ccswitch://v1/import?resource=provider&…` deep links, one per app it manages.

CC Switch writes the app's own files when the provider is switched on. The endpoint follows the
target app's convention: root for Claude Code, /v1 for Codex and OpenCode. Extra settings (context
window, version header) travel in `config`, URL-safe Base64 of the app's native config; URL
parameters win over it. No files: the links are the whole import.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import quote, urlencode

import tomli_w

from . import claude_code, codex, opencode
from .base import PROVIDER_ID, PROVIDER_NAME, Link, Rendered, RenderInput

SLUG = "cc-switch"
LABEL = "CC Switch"
ENV_INDIRECTION = False


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def deep_link(params: dict[str, str]) -> str:
    return "ccswitch://v1/import?" + urlencode(params, quote_via=quote)


def links(inp: RenderInput) -> list[Link]:
    key = inp.key_or_placeholder
    primary = inp.primary
    model = primary.name if primary else ""
    out = []

    env = claude_code.env_block(inp)
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

    cfg = codex.config(inp)
    provider = cfg["model_providers"][PROVIDER_ID]
    # CC Switch writes the key to Codex's auth.json and marks the provider requires_openai_auth.
    provider = {k: v for k, v in provider.items() if k != "env_key"} | {"requires_openai_auth": True}
    cfg = {**cfg, "model_providers": {PROVIDER_ID: provider}}
    codex_params = {
        "resource": "provider",
        "app": "codex",
        "name": PROVIDER_NAME,
        "endpoint": inp.api_base,
        "apiKey": key,
    }
    if model:
        codex_params["model"] = model
    codex_params.update(
        config=b64(json.dumps({"auth": {"OPENAI_API_KEY": key}, "config": tomli_w.dumps(cfg)}, separators=(",", ":"))),
        configFormat="json",
    )
    out.append(Link("Codex", deep_link(codex_params)))

    oc = {"resource": "provider", "app": "opencode", "name": PROVIDER_NAME, "endpoint": inp.api_base, "apiKey": key}
    if model:
        oc["model"] = model
    oc.update(config=b64(json.dumps(opencode.provider_entry(inp, key), separators=(",", ":"))), configFormat="json")
    out.append(Link("OpenCode", deep_link(oc)))
    return out


def render(inp: RenderInput) -> Rendered:
    notes = [
        "Needs CC Switch 3.16 or newer (custom env fields kept on import). CC Switch shows the full "
        "provider before importing; switch to it there.",
    ]
    if not inp.api_key:
        notes.append(
            f"CC Switch needs a key in the link: these links carry {inp.key_or_placeholder}; edit the provider's "
            "key in CC Switch after importing, or mint a key for this download."
        )
    return Rendered(links=links(inp), notes=notes)
