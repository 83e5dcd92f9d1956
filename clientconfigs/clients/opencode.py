"""OpenCode: a custom provider in ~/.config/opencode/opencode.json (merged with other configs).

`@ai-sdk/openai-compatible` speaks Chat Completions to `{baseURL}/chat/completions`; the key can stay
in the environment with `{env:VAR}`. `limit.output` becomes the request's max_tokens. The team's
MCP servers are `mcp.teamgw-<slug>` entries of type `remote` with the key as a bearer header
(`{env:VAR}` too when no key was minted); Kilo, a fork, reads the same.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    MCP_PREFIX,
    PROVIDER_ID,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    window_need,
    window_warnings,
)

SLUG = "opencode"
LABEL = "OpenCode"
ENV_INDIRECTION = True
PATH = "~/.config/opencode/opencode.json"
PROMPT_TOKENS = 7700  # measured: 6.1-7.7k for a one-line request


def provider_entry(inp: RenderInput, api_key: str) -> dict[str, Any]:
    models: dict[str, Any] = {}
    for m in inp.models:
        entry: dict[str, Any] = {"name": m.label}
        if m.context_window and m.max_output_tokens:
            entry["limit"] = {"context": m.context_window, "output": m.max_output_tokens}
        entry["tool_call"] = True
        models[m.name] = entry
    return {
        "npm": "@ai-sdk/openai-compatible",
        "name": PROVIDER_NAME,
        "options": {"baseURL": inp.api_base, "apiKey": api_key, "headers": {VERSION_HEADER: inp.version}},
        "models": models,
    }


def mcp_entries(inp: RenderInput, api_key: str) -> dict[str, Any]:
    """OpenCode's (and Kilo's) remote MCP servers: one `teamgw-<slug>` entry per allowed server."""
    return {
        s.entry: {
            "type": "remote",
            "url": inp.mcp_url(s),
            "headers": {"Authorization": f"Bearer {api_key}"},
            "enabled": True,
        }
        for s in inp.mcp_servers
    }


MCP_OWNED = (f"mcp.{MCP_PREFIX}",)


def render(inp: RenderInput) -> Rendered:
    api_key = inp.api_key or "{env:%s}" % ENV_VAR  # noqa: UP031 - OpenCode's own syntax
    data: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {PROVIDER_ID: provider_entry(inp, api_key)},
    }
    primary = inp.primary
    if primary:
        data["model"] = f"{PROVIDER_ID}/{primary.name}"
        data["small_model"] = f"{PROVIDER_ID}/{primary.name}"
    if inp.mcp_servers:
        data["mcp"] = mcp_entries(inp, api_key)
    commands = [Command(_("Check the config"), "opencode debug config > /dev/null && echo config ok")]
    if not inp.api_key:
        commands.insert(0, before_starting("opencode", f"export {ENV_VAR}=<your key>"))
    return Rendered(
        files=[
            ConfigFile(
                "opencode.json",
                PATH,
                dump_json(data),
                "json",
                secret=bool(inp.api_key),
                windows_unconfirmed=True,
                note=_("If you keep an opencode.jsonc instead, copy the provider block into it by hand."),
                replace=(f"provider.{PROVIDER_ID}.models",),
                owned=MCP_OWNED,
            )
        ],
        commands=commands,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models),
        probes=[provider_probe(PATH, PROVIDER_ID, LABEL, PROMPT_TOKENS)],
    )


def provider_probe(path: str, provider_id: str, label: str, prompt_tokens: int) -> Probe:
    """What the doctor checks in an OpenCode-shaped file (Kilo CLI is a fork and reads the same)."""
    return Probe(
        file=path,
        format="json",
        base_url=f"provider.{provider_id}.options.baseURL",
        base_shape="v1",
        key=f"provider.{provider_id}.options.apiKey",
        models=f"provider.{provider_id}.models.*",
        model_name="$key",
        model_context="limit.context",
        model_output="limit.output",
        mcp="mcp",
        client=label,
        needs=window_need(prompt_tokens),
    )
