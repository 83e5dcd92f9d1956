"""Cline: both file-backed storage generations and the `cline auth` one-liner.

The SDK bundle (Cline 4.x SDK half, Cline CLI 3.x) reads ~/.cline/data/settings/providers.json and
models.json; the legacy bundle (3.66 to 3.89, the other half of 4.1.x) reads globalState.json and
secrets.json and migrates them, but never overwrites a provider already in providers.json, so both
are written. Cline reads nothing from VS Code settings.json: no keys are generated there.

Per-model limits: the SDK takes a provider-level `contextWindow`/`maxTokens` in providers.json
over every model's own (`@cline/core` 0.0.86 passes `settings.contextWindow` as the provider's
`maxInputTokens`, which wins over the model catalogue), so providers.json carries none and each
model's window and output cap live in models.json. The legacy bundle has one model per mode: its
`*OpenAiModelInfo` is the default model's own.

The team's MCP servers go in Cline's own MCP file, settings/cline_mcp_settings.json beside
providers.json (McpHub's GlobalFileNames.mcpSettings), as `streamableHttp` entries named
`teamgw-<slug>` with the key in an Authorization header; the user's servers in it stay.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    PROVIDER_NAME,
    VERSION_HEADER,
    ConfigFile,
    ModelSpec,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
    mcp_servers_file,
    window_need,
    window_warnings,
)

SLUG = "cline"
LABEL = "Cline"
ENV_INDIRECTION = False
PROVIDER = "openai-compatible"
SETTINGS = "~/.cline/data/settings"
LEGACY = "~/.cline/data"
MCP_PATH = f"{SETTINGS}/cline_mcp_settings.json"
PROMPT_TOKENS = 5600  # measured: 2.6-5.6k (25 tools) with the Cline CLI for a one-line request


def _model_info(m: ModelSpec) -> dict[str, Any]:
    info: dict[str, Any] = {}
    if m.context_window:
        info["contextWindow"] = m.context_window
    if m.max_output_tokens:
        info["maxTokens"] = m.max_output_tokens
    info["supportsImages"] = False
    info["supportsPromptCache"] = False
    return info


def mcp_file(inp: RenderInput) -> ConfigFile:
    return mcp_servers_file(
        "cline_mcp_settings.json", MCP_PATH, inp, "streamableHttp", inp.key_or_placeholder, disabled=False
    )


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    key = inp.key_or_placeholder
    headers = {VERSION_HEADER: inp.version}
    settings: dict[str, Any] = {"provider": PROVIDER, "apiKey": key, "baseUrl": inp.api_base}
    if primary:
        settings["model"] = primary.name
    settings["headers"] = headers
    settings["capabilities"] = ["tools", "streaming"]
    providers = {
        "version": 1,
        "lastUsedProvider": PROVIDER,
        "modes": {},
        "providers": {PROVIDER: {"settings": settings, "updatedAt": inp.generated_at, "tokenSource": "manual"}},
    }
    catalog: dict[str, Any] = {}
    for m in inp.ordered:
        entry: dict[str, Any] = {"id": m.name, "name": m.label}
        if m.context_window:
            entry["contextWindow"] = m.context_window
            entry["maxInputTokens"] = m.context_window
        if m.max_output_tokens:
            entry["maxTokens"] = m.max_output_tokens
        entry["capabilities"] = ["streaming", "tools"]
        catalog[m.name] = entry
    provider_meta: dict[str, Any] = {"name": f"{PROVIDER_NAME} (config {inp.version})", "baseUrl": inp.api_base}
    if primary:
        provider_meta["defaultModelId"] = primary.name
    models = {"version": 1, "providers": {PROVIDER: {"provider": provider_meta, "models": catalog}}}

    state: dict[str, Any] = {
        "planModeApiProvider": "openai",
        "actModeApiProvider": "openai",
        "openAiBaseUrl": inp.api_base,
        "openAiHeaders": headers,
    }
    if primary:
        for mode in ("planMode", "actMode"):
            state[f"{mode}OpenAiModelId"] = primary.name
            state[f"{mode}OpenAiModelInfo"] = _model_info(primary)

    notes = [
        _(
            "Quit VS Code (or the Cline CLI) before installing: Cline keeps these files in memory and "
            "rewrites them whole on every change."
        ),
        _(
            "Cline has no settings.json keys for providers; anything that tells you to set "
            "cline.openaiBaseUrl in VS Code settings is wrong."
        ),
    ]
    if not inp.api_key:
        notes.append(
            _(
                "Cline cannot read the key from an environment variable: replace %(placeholder)s "
                "in providers.json and secrets.json (a key given to `cline auth -k` would sit in your shell "
                "history and in the process list)."
            )
            % {"placeholder": inp.key_or_placeholder}
        )
    files = [
        ConfigFile(
            "providers.json",
            f"{SETTINGS}/providers.json",
            dump_json(providers),
            "json",
            secret=True,
            windows_unconfirmed=True,
            # A provider-wide window from an earlier install would override every model's own.
            remove=(f"providers.{PROVIDER}.settings.contextWindow", f"providers.{PROVIDER}.settings.maxTokens"),
        ),
        ConfigFile(
            "models.json",
            f"{SETTINGS}/models.json",
            dump_json(models),
            "json",
            replace=(f"providers.{PROVIDER}.models",),
        ),
        ConfigFile(
            "globalState.json",
            f"{LEGACY}/globalState.json",
            dump_json(state),
            "json",
            note=_("Legacy bundle (Cline 3.66 to 3.89 and half of 4.1.x)."),
            replace=("planModeOpenAiModelInfo", "actModeOpenAiModelInfo"),
        ),
        ConfigFile(
            "secrets.json",
            f"{LEGACY}/secrets.json",
            dump_json({"openAiApiKey": key}),
            "json",
            secret=True,
            note=_("Legacy bundle: the key for globalState.json."),
        ),
    ]
    if inp.mcp_servers:
        files.append(mcp_file(inp))
    return Rendered(
        files=files,
        notes=notes,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models),
        probes=[
            Probe(
                file=f"{SETTINGS}/providers.json",
                format="json",
                base_url=f"providers.{PROVIDER}.settings.baseUrl",
                base_shape="v1",
                key=f"providers.{PROVIDER}.settings.apiKey",
            ),
            Probe(
                file=f"{SETTINGS}/models.json",
                format="json",
                base_url=f"providers.{PROVIDER}.provider.baseUrl",
                base_shape="v1",
                models=f"providers.{PROVIDER}.models.*",
                model_name="id",
                model_context="contextWindow",
                model_output="maxTokens",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS),
            ),
            Probe(
                file=f"{LEGACY}/globalState.json",
                format="json",
                base_url="openAiBaseUrl",
                base_shape="v1",
            ),
            Probe(file=MCP_PATH, format="json", base_url="", base_shape="v1", mcp="mcpServers", client=LABEL),
        ],
    )
