"""Kilo Code (CLI `@kilocode/cli` 7.x and the current VS Code extension): ~/.config/kilo/kilo.json.

Kilo 7 is an OpenCode fork with OpenCode's config shape: a custom `@ai-sdk/openai-compatible`
provider whose models carry `limit.context` and `limit.output` (sent as max_tokens), and
`model`/`small_model` as `provider/model`. Kilo skips a file that fails its schema silently (exit 0,
only the log says ConfigInvalidError), so the check command asks for the log. 7.8.1's Linux binary
package is missing from npm; 7.7.7 is what was run.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    PROVIDER_ID,
    Command,
    ConfigFile,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    window_warnings,
)
from .opencode import MCP_OWNED, mcp_entries, provider_entry, provider_probe

SLUG = "kilo"
LABEL = "Kilo Code"
ENV_INDIRECTION = True
PATH = "~/.config/kilo/kilo.json"
PROMPT_TOKENS = 12700  # measured with kilo 7.7.7 (16 tools) for a one-line request
OPT_OUT = "KILO_TELEMETRY_LEVEL=off KILO_DISABLE_AUTOUPDATE=1 KILO_DISABLE_MODELS_FETCH=1 KILO_DISABLE_SHARE=1"


def render(inp: RenderInput) -> Rendered:
    api_key = inp.api_key or "{env:%s}" % ENV_VAR  # noqa: UP031 - Kilo's (OpenCode's) own syntax
    data: dict[str, Any] = {
        "$schema": "https://app.kilo.ai/config.json",
        "provider": {PROVIDER_ID: provider_entry(inp, api_key)},
    }
    primary = inp.primary
    if primary:
        data["model"] = f"{PROVIDER_ID}/{primary.name}"
        data["small_model"] = f"{PROVIDER_ID}/{primary.name}"
    if inp.mcp_servers:
        data["mcp"] = mcp_entries(inp, api_key)
    data["autoupdate"] = False
    data["share"] = "disabled"
    commands = []
    if not inp.api_key:
        commands.append(before_starting("kilo", f"export {ENV_VAR}=<your key>"))
    commands += [
        Command(_("Telemetry and update opt-outs (add to your shell profile)"), f"export {OPT_OUT}"),
        Command(
            _("Check the config (Kilo skips a bad file silently)"),
            "kilo debug config --print-logs --log-level WARN 2>&1 | grep -i ConfigInvalid || echo config ok",
        ),
    ]
    return Rendered(
        files=[
            ConfigFile(
                "kilo.json",
                PATH,
                dump_json(data),
                "json",
                secret=bool(inp.api_key),
                windows_unconfirmed=True,
                replace=(f"provider.{PROVIDER_ID}.models",),
                owned=MCP_OWNED,
                note=_("If you keep a kilo.jsonc instead, copy the provider block into it by hand."),
            )
        ],
        commands=commands,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models),
        probes=[provider_probe(PATH, PROVIDER_ID, LABEL, PROMPT_TOKENS)],
    )
