"""Crush (npm `@charmland/crush`): ~/.config/crush/crush.json (Windows: the same path under the profile).

An `openai-compat` provider with every model listed (`context_window`, `default_max_tokens`, the
other fields the schema requires), `discover_models: false` so the list is exactly ours, and
`models.large`/`models.small` for the default. `api_key` accepts `$VAR`. Read from the source
(charmbracelet/crush `internal/config`, `schema.json`); the npm package downloads its binary from
GitHub at install time, which a registry-only machine cannot reach, so it has not been run here.
The team's MCP servers are `mcp.teamgw-<slug>` entries of type `http` (its MCPConfig: `url`,
`headers`, whose values expand `$VAR` like `api_key`).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    MCP_PREFIX,
    PROVIDER_ID,
    PROVIDER_NAME,
    Command,
    ConfigFile,
    ModelSpec,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
)

SLUG = "crush"
LABEL = "Crush"
ENV_INDIRECTION = True
PATH = "~/.config/crush/crush.json"
PROMPT_TOKENS = 0  # not measured: the binary cannot be installed here
# Crush needs a window for every model; when the server knows none, the small side is the safe one.
FALLBACK_CONTEXT = 8192
FALLBACK_OUTPUT = 2048


def model_entry(m: ModelSpec) -> dict[str, Any]:
    return {
        "id": m.name,
        "name": m.label,
        "context_window": m.context_window or FALLBACK_CONTEXT,
        "default_max_tokens": m.max_output_tokens or FALLBACK_OUTPUT,
        "cost_per_1m_in": 0,
        "cost_per_1m_out": 0,
        "cost_per_1m_in_cached": 0,
        "cost_per_1m_out_cached": 0,
        "can_reason": False,
        "supports_attachments": False,
    }


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    data: dict[str, Any] = {
        "$schema": "https://charm.land/crush.json",
        "providers": {
            PROVIDER_ID: {
                "name": PROVIDER_NAME,
                "type": "openai-compat",
                "base_url": inp.api_base,
                "api_key": inp.api_key or f"${ENV_VAR}",
                "discover_models": False,
                "models": [model_entry(m) for m in inp.ordered],
            }
        },
    }
    if primary:
        role = {
            "model": primary.name,
            "provider": PROVIDER_ID,
            "max_tokens": primary.max_output_tokens or FALLBACK_OUTPUT,
        }
        data["models"] = {"large": role, "small": dict(role)}
    if inp.mcp_servers:
        auth = "Bearer " + (inp.api_key or f"${ENV_VAR}")
        data["mcp"] = {
            s.entry: {"type": "http", "url": inp.mcp_url(s), "headers": {"Authorization": auth}}
            for s in inp.mcp_servers
        }
    data["options"] = {"disable_provider_auto_update": True, "disable_metrics": True}
    commands = [] if inp.api_key else [before_starting("crush", f"export {ENV_VAR}=<your key>")]
    commands.append(Command(_("Try it"), 'crush run -q "Reply with the word pong."'))
    return Rendered(
        files=[
            ConfigFile(
                "crush.json",
                PATH,
                dump_json(data),
                "json",
                secret=bool(inp.api_key),
                windows_unconfirmed=True,
                replace=(f"providers.{PROVIDER_ID}.models", "models.large", "models.small"),
                owned=(f"mcp.{MCP_PREFIX}",),
            )
        ],
        commands=commands,
        notes=[
            _(
                "Crush has not been run by us (its npm package downloads the binary from GitHub); the file follows "
                "its source and schema."
            )
        ],
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url=f"providers.{PROVIDER_ID}.base_url",
                base_shape="v1",
                key=f"providers.{PROVIDER_ID}.api_key",
                models=f"providers.{PROVIDER_ID}.models.*",
                model_name="id",
                model_context="context_window",
                model_output="default_max_tokens",
                mcp="mcp",
                client=LABEL,
            )
        ],
    )
