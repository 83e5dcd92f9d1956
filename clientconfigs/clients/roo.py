"""Roo Code: an auto-import JSON file plus the VS Code setting that points at it.

Roo keeps provider profiles in VS Code's SecretStorage, not in a file; the supported path is
`roo-cline.autoImportSettingsPath` in the VS Code user settings: on every start Roo imports the file,
merging the profiles into the existing ones. One profile per model, because a Roo profile has one model.

The team's MCP servers go in Roo's global MCP file, settings/mcp_settings.json in its VS Code global
storage (McpHub.getMcpSettingsFilePath), as `streamable-http` entries named `teamgw-<slug>` with the
key in an Authorization header; the user's servers in it stay. Roo would expand `${env:VAR}` there,
but VS Code started from the desktop does not see the shell's variables, so the file holds the key
(mode 0600), like the import file. A `roo-cline.customStoragePath` moves the file: not followed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.utils.translation import gettext as _

from .base import (
    PROVIDER_NAME,
    VERSION_HEADER,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
    mcp_servers_file,
)

SLUG = "roo"
LABEL = "Roo Code"
ENV_INDIRECTION = False
PATH = "~/.config/team-gateway/roo-settings.json"
# VS Code's user-data folder on Linux, macOS and Windows; Roo's storage is under globalStorage/.
VSCODE_USER = ("~/.config/Code/User", "~/Library/Application Support/Code/User", "%APPDATA%\\Code\\User")
STORAGE = "globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json"
MCP_PATH = f"{VSCODE_USER[0]}/{STORAGE}"
MCP_MACOS = f"{VSCODE_USER[1]}/{STORAGE}"
MCP_WINDOWS = VSCODE_USER[2] + "\\" + STORAGE.replace("/", "\\")
# Roo requires a context window; when the server does not know one, a small value is the safe side
# (Roo condenses earlier instead of overflowing the upstream).
FALLBACK_CONTEXT = 8192


def profile_name(model_label: str) -> str:
    return f"{PROVIDER_NAME} · {model_label}"


def mcp_file(inp: RenderInput) -> ConfigFile:
    """Roo's global mcp_settings.json under the VS Code user-data folder of each system."""
    f = mcp_servers_file("mcp_settings.json", MCP_PATH, inp, "streamable-http", inp.key_or_placeholder)
    return replace(f, macos_path=MCP_MACOS, windows_path=MCP_WINDOWS, windows_unconfirmed=False)


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
    files = [
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
            f"{VSCODE_USER[0]}/settings.json",
            dump_json(vscode),
            "jsonc",
            macos_path=f"{VSCODE_USER[1]}/settings.json",
            windows_path=f"{VSCODE_USER[2]}\\settings.json",
            note=_("Only this one line is added; your comments and other settings stay as they are."),
        ),
    ]
    if inp.mcp_servers:
        files.append(mcp_file(inp))
        if not inp.api_key:
            notes.append(_("In mcp_settings.json too, replace the placeholder after Bearer with your key."))
    return Rendered(
        files=files,
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
            ),
            Probe(
                file=MCP_PATH,
                macos_file=MCP_MACOS,
                windows_file=MCP_WINDOWS,
                format="json",
                base_url="",
                base_shape="root",
                mcp="mcpServers",
                client=LABEL,
            ),
        ],
    )
