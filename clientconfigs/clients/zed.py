"""Zed: `language_models.openai_compatible` in ~/.config/zed/settings.json (macOS the same path,
Windows %APPDATA%\\Zed\\settings.json).

Per model, `max_tokens` is the context window and `max_output_tokens` the output cap sent with
requests. The key is never in settings.json: Zed reads `<PROVIDER_ID>_API_KEY` in upper snake case
(TEAMGW_API_KEY) from the environment, else the key saved in its Agent settings (OS keychain).
`agent.default_model` selects the default. Zed's own settings.json usually has comments and
trailing commas (JSONC): the installer edits it in place, writing only our members, and uninstall
gives the file back byte for byte. Not run here (a GUI).

The team's MCP servers are `context_servers` entries named `teamgw-<slug>` in the same file, in
Zed's remote form `{"url", "headers"}` (settings_content's ContextServerSettingsContent::Http, which
serde picks for an entry with a `url` and no `command`). Zed sends the headers as written, with no
variable expansion (context_server's HttpTransport), so the file holds the key itself and is written
with mode 0600 when it does; the user's own servers in it stay.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    MCP_PREFIX,
    PROVIDER_ID,
    VERSION_HEADER,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
)

SLUG = "zed"
LABEL = "Zed"
ENV_INDIRECTION = True
PATH = "~/.config/zed/settings.json"
WINDOWS_PATH = "%APPDATA%\\Zed\\settings.json"
ENV_FILE = "~/.config/team-gateway/env"
KEY_VAR = f"{PROVIDER_ID.upper()}_API_KEY"
PROMPT_TOKENS = 0  # not measured: Zed is a GUI
FALLBACK_CONTEXT = 8192  # Zed needs a window per model; the small side is the safe one
CAPABILITIES = {"tools": True, "images": False, "parallel_tool_calls": False, "prompt_cache_key": False}


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    models = []
    for m in inp.ordered:
        entry: dict[str, Any] = {"name": m.name, "display_name": f"{m.label} (team gateway)"}
        entry["max_tokens"] = m.context_window or FALLBACK_CONTEXT
        if m.max_output_tokens:
            entry["max_output_tokens"] = m.max_output_tokens
        entry["capabilities"] = {
            "tools": True,
            "images": False,
            "parallel_tool_calls": False,
            "prompt_cache_key": False,
        }
        models.append(entry)
    data: dict[str, Any] = {
        "language_models": {"openai_compatible": {PROVIDER_ID: {"api_url": inp.api_base, "available_models": models}}}
    }
    if primary:
        data["agent"] = {"default_model": {"provider": PROVIDER_ID, "model": primary.name}}
    data["telemetry"] = {"diagnostics": False, "metrics": False}
    notes = [
        _("Zed reads the key from %(var)s or from its Agent settings; never from settings.json.") % {"var": KEY_VAR}
    ]
    if inp.mcp_servers:
        auth = {"Authorization": f"Bearer {inp.key_or_placeholder}", VERSION_HEADER: inp.version}
        data["context_servers"] = {s.entry: {"url": inp.mcp_url(s), "headers": auth} for s in inp.mcp_servers}
        notes = [
            _(
                "Zed reads the models' key from %(var)s or from its Agent settings, but sends an MCP server's "
                "headers as written: the team's servers (teamgw-…) carry the key in settings.json, so keep that "
                "file out of a shared dotfiles repository."
            )
            % {"var": KEY_VAR}
        ]
        if not inp.api_key:
            notes.append(_("In settings.json, replace the placeholder after Bearer with your key (once per server)."))
    files = [
        ConfigFile(
            "settings.json",
            PATH,
            dump_json(data),
            "jsonc",
            secret=bool(inp.api_key and inp.mcp_servers),
            windows_path=WINDOWS_PATH,
            replace=(f"language_models.openai_compatible.{PROVIDER_ID}",),
            owned=(f"context_servers.{MCP_PREFIX}",),
            note=_(
                "The installer keeps your settings.json as it is, comments included (Zed's default one has "
                "them): it adds or replaces only the team's entries, and uninstall takes them out again."
            ),
        )
    ]
    commands = []
    if inp.api_key:
        files.append(
            ConfigFile(
                "env",
                ENV_FILE,
                f"# {inp.stamp}\nexport {KEY_VAR}='{inp.api_key}'\n",
                "dotenv",
                merge="dotenv",
                secret=True,
                note=_(
                    "Load it from your shell profile (`. %(file)s`) and start Zed from that shell, or paste "
                    "the key in Zed's Agent settings (it keeps it in the keychain)."
                )
                % {"file": ENV_FILE},
            )
        )
    else:
        commands.append(before_starting("zed", f"export {KEY_VAR}=<your key>"))
    return Rendered(
        files=files,
        commands=commands,
        notes=notes,
        probes=[
            Probe(
                file=PATH,
                windows_file=WINDOWS_PATH,
                format="json",
                base_url=f"language_models.openai_compatible.{PROVIDER_ID}.api_url",
                base_shape="v1",
                key_var=KEY_VAR,
                key_file=ENV_FILE,
                models=f"language_models.openai_compatible.{PROVIDER_ID}.available_models.*",
                model_name="name",
                model_context="max_tokens",
                model_output="max_output_tokens",
                mcp="context_servers",
                client=LABEL,
            )
        ],
    )
