"""Roo Code: an auto-import JSON file plus the VS Code setting that points at it.

Roo keeps provider profiles in VS Code's SecretStorage, not in a file; the supported path is
`roo-cline.autoImportSettingsPath` in the VS Code user settings: on every start Roo imports the file,
merging the profiles into the existing ones. One profile per model, because a Roo profile has one model.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import PROVIDER_NAME, VERSION_HEADER, ConfigFile, Probe, Rendered, RenderInput, dump_json

SLUG = "roo"
LABEL = "Roo Code"
ENV_INDIRECTION = False
PATH = "~/.config/team-gateway/roo-settings.json"
# Roo requires a context window; when the server does not know one, a small value is the safe side
# (Roo condenses earlier instead of overflowing the upstream).
FALLBACK_CONTEXT = 8192


def profile_name(model_label: str) -> str:
    return f"{PROVIDER_NAME} · {model_label}"


def render(inp: RenderInput) -> Rendered:
    configs: dict[str, Any] = {}
    for m in inp.models:
        info: dict[str, Any] = {
            "contextWindow": m.context_window or FALLBACK_CONTEXT,
            "supportsImages": False,
            "supportsPromptCache": False,
        }
        if m.max_output_tokens:
            info["maxTokens"] = m.max_output_tokens
        configs[profile_name(m.label)] = {
            "apiProvider": "openai",
            "openAiBaseUrl": inp.api_base,
            "openAiApiKey": inp.key_or_placeholder,
            "openAiModelId": m.name,
            "openAiCustomModelInfo": info,
            "openAiHeaders": {VERSION_HEADER: inp.version},
            "openAiStreamingEnabled": True,
        }
    profiles: dict[str, Any] = {"apiConfigs": configs}
    if inp.primary:
        profiles = {"currentApiConfigName": profile_name(inp.primary.label), **profiles}
    vscode = {"roo-cline.autoImportSettingsPath": PATH}
    notes = [_("Restart VS Code after installing: Roo imports the file when it starts.")]
    if not inp.api_key:
        notes.append(
            _("Roo cannot read the key from the environment: replace %(placeholder)s in the file.")
            % {"placeholder": inp.key_or_placeholder}
        )
    return Rendered(
        files=[
            ConfigFile(
                "roo-settings.json",
                PATH,
                dump_json({"providerProfiles": profiles}),
                "json",
                secret=bool(inp.api_key),
                replace=("providerProfiles.apiConfigs",),  # the whole file is ours: no stale profiles
            ),
            ConfigFile(
                "VS Code settings.json",
                "~/.config/Code/User/settings.json",
                dump_json(vscode),
                "jsonc",
                macos_path="~/Library/Application Support/Code/User/settings.json",
                windows_path="%APPDATA%\\Code\\User\\settings.json",
                note=_(
                    "Only this one line is added; if your settings.json has comments the installer leaves it "
                    "alone and tells you to add the line yourself."
                ),
            ),
        ],
        notes=notes,
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="providerProfiles.apiConfigs.*.openAiBaseUrl",
                base_shape="v1",
                key="providerProfiles.apiConfigs.*.openAiApiKey",
                models="providerProfiles.apiConfigs.*",
                model_name="openAiModelId",
                model_context="openAiCustomModelInfo.contextWindow",
                model_output="openAiCustomModelInfo.maxTokens",
                client=LABEL,
            )
        ],
    )
