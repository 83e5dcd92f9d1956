"""Cline: both file-backed storage generations and the `cline auth` one-liner.

The SDK bundle (Cline 4.x SDK half, Cline CLI 3.x) reads ~/.cline/data/settings/providers.json and
models.json; the legacy bundle (3.66 to 3.89, the other half of 4.1.x) reads globalState.json and
secrets.json and migrates them, but never overwrites a provider already in providers.json, so both
are written. Cline reads nothing from VS Code settings.json: no keys are generated there.
"""

from __future__ import annotations

import shlex

from .base import (
    ENV_VAR,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
)

SLUG = "cline"
LABEL = "Cline"
ENV_INDIRECTION = False
PROVIDER = "openai-compatible"
SETTINGS = "~/.cline/data/settings"
LEGACY = "~/.cline/data"


def _model_info(m) -> dict:
    info: dict = {}
    if m.context_window:
        info["contextWindow"] = m.context_window
    if m.max_output_tokens:
        info["maxTokens"] = m.max_output_tokens
    info["supportsImages"] = False
    info["supportsPromptCache"] = False
    return info


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    key = inp.key_or_placeholder
    headers = {VERSION_HEADER: inp.version}
    settings: dict = {"provider": PROVIDER, "apiKey": key, "baseUrl": inp.api_base}
    if primary:
        settings["model"] = primary.name
        if primary.max_output_tokens:
            settings["maxTokens"] = primary.max_output_tokens
        if primary.context_window:
            settings["contextWindow"] = primary.context_window
    settings["headers"] = headers
    settings["capabilities"] = ["tools", "streaming"]
    providers = {
        "version": 1,
        "lastUsedProvider": PROVIDER,
        "modes": {},
        "providers": {PROVIDER: {"settings": settings, "updatedAt": inp.generated_at, "tokenSource": "manual"}},
    }
    catalog: dict = {}
    for m in inp.models:
        entry: dict = {"id": m.name, "name": m.label}
        if m.context_window:
            entry["contextWindow"] = m.context_window
            entry["maxInputTokens"] = m.context_window
        if m.max_output_tokens:
            entry["maxTokens"] = m.max_output_tokens
        entry["capabilities"] = ["streaming", "tools"]
        catalog[m.name] = entry
    provider_meta: dict = {"name": f"{PROVIDER_NAME} (config {inp.version})", "baseUrl": inp.api_base}
    if primary:
        provider_meta["defaultModelId"] = primary.name
    models = {"version": 1, "providers": {PROVIDER: {"provider": provider_meta, "models": catalog}}}

    state: dict = {
        "planModeApiProvider": "openai",
        "actModeApiProvider": "openai",
        "openAiBaseUrl": inp.api_base,
        "openAiHeaders": headers,
    }
    if primary:
        for mode in ("planMode", "actMode"):
            state[f"{mode}OpenAiModelId"] = primary.name
            state[f"{mode}OpenAiModelInfo"] = _model_info(primary)

    key_arg = shlex.quote(inp.api_key) if inp.api_key else f'"${ENV_VAR}"'
    auth = (
        f"cline auth -p {PROVIDER} -k {key_arg} -m {shlex.quote(primary.name if primary else '')} "
        f"-b {shlex.quote(inp.api_base)}"
    )
    notes = [
        "Quit VS Code (or the Cline CLI) before installing: Cline keeps these files in memory and "
        "rewrites them whole on every change.",
        "Cline has no settings.json keys for providers; anything that tells you to set "
        "cline.openaiBaseUrl in VS Code settings is wrong.",
    ]
    if not inp.api_key:
        notes.append(
            f"Cline cannot read the key from an environment variable: replace {inp.key_or_placeholder} "
            f"in providers.json and secrets.json, or run the cline auth line with {ENV_VAR} exported."
        )
    return Rendered(
        files=[
            ConfigFile(
                "providers.json",
                f"{SETTINGS}/providers.json",
                dump_json(providers),
                "json",
                secret=True,
                windows_unconfirmed=True,
            ),
            ConfigFile("models.json", f"{SETTINGS}/models.json", dump_json(models), "json"),
            ConfigFile(
                "globalState.json",
                f"{LEGACY}/globalState.json",
                dump_json(state),
                "json",
                note="Legacy bundle (Cline 3.66 to 3.89 and half of 4.1.x).",
            ),
            ConfigFile(
                "secrets.json",
                f"{LEGACY}/secrets.json",
                dump_json({"openAiApiKey": key}),
                "json",
                secret=True,
                note="Legacy bundle: the key for globalState.json.",
            ),
        ],
        commands=[Command("Cline CLI (writes providers.json)", auth, secret=bool(inp.api_key))],
        notes=notes,
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
            ),
            Probe(
                file=f"{LEGACY}/globalState.json",
                format="json",
                base_url="openAiBaseUrl",
                base_shape="v1",
            ),
        ],
    )
