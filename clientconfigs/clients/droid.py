"""Factory Droid (npm `@factory/cli` 0.225): custom models in ~/.factory/settings.json.

`customModels` entries (the zod schema in the droid binary): `model` (sent to the API),
`displayName`, `baseUrl` (with /v1), `apiKey` (`${VAR}` is read from the environment in
settings.json), `provider` ("generic-chat-completion-api": Chat Completions), `maxContextLimit`,
`maxOutputTokens`, `extraHeaders`, `noImageSupport`. Droid names each entry
`custom:<displayName with spaces as dashes>-<n>`, n counting earlier entries of the same display
name; `sessionDefaultSettings.model` takes that id. Our entries replace the ones with our display
names or our base URL; the user's own stay.

The team's MCP servers go where `droid mcp add --type http --header … --no-oauth` puts them (0.225,
run here): `mcpServers` of ~/.factory/mcp.json, entries `{"type": "http", "url", "headers",
"oauth": false, "disabled": false}`. Droid expands `${VAR}` in header values (checked: a header
`Bearer ${TEAM_GATEWAY_API_KEY}` reached a local server as the variable's value), so the bearer is
`${TEAM_GATEWAY_API_KEY}` and a minted key goes in the shared environment file, never in mcp.json.
"""

from __future__ import annotations

import re
from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_FILE,
    ENV_VAR,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    env_file,
    mcp_servers_file,
)

SLUG = "factory-droid"
LABEL = "Factory Droid"
ENV_INDIRECTION = True
PATH = "~/.factory/settings.json"
MCP_PATH = "~/.factory/mcp.json"


def display_name(label: str) -> str:
    return f"{label} [{PROVIDER_NAME}]"


def model_id(label: str) -> str:
    """The id Droid gives the first entry with this display name (its customModels code)."""
    return "custom:" + re.sub(r"\s+", "-", display_name(label).strip()) + "-0"


def mcp_files(inp: RenderInput) -> list[ConfigFile]:
    """mcp.json with one `teamgw-<slug>` entry per server this key may use, and the environment
    file its `${TEAM_GATEWAY_API_KEY}` bearer reads a minted key from."""
    if not inp.mcp_servers:
        return []
    ref = "${%s}" % ENV_VAR  # noqa: UP031 - Droid's own syntax
    files = [mcp_servers_file("mcp.json", MCP_PATH, inp, "http", ref, env_ref=True, oauth=False, disabled=False)]
    if inp.api_key:
        files.append(env_file(inp, {ENV_VAR: inp.api_key}))
    return files


def render(inp: RenderInput) -> Rendered:
    entries = [
        {
            "model": m.name,
            "displayName": display_name(m.label),
            "baseUrl": inp.api_base,
            "apiKey": inp.api_key or "${%s}" % ENV_VAR,  # noqa: UP031 - Droid's own syntax
            "provider": "generic-chat-completion-api",
            "maxContextLimit": inp.window_of(m),
            "maxOutputTokens": inp.output_of(m),
            "extraHeaders": {VERSION_HEADER: inp.version},
            "noImageSupport": True,
        }
        for m in inp.ordered
    ]
    data: dict[str, Any] = {"customModels": entries}
    primary = inp.primary
    if primary:
        data["sessionDefaultSettings"] = {"model": model_id(primary.label)}
    commands = [] if inp.api_key else [before_starting("droid", f"export {ENV_VAR}=<your key>")]
    if inp.api_key and inp.mcp_servers:
        commands.append(Command(_("Load the key for the team's MCP servers in this shell"), f". {ENV_FILE}"))
    if primary:
        commands.append(Command(_("Try it"), f'droid exec -m "{model_id(primary.label)}" "Reply with the word pong."'))
    return Rendered(
        files=[
            ConfigFile(
                "settings.json",
                PATH,
                dump_json(data),
                "json",
                secret=bool(inp.api_key),
                lists=("customModels:displayName:baseUrl",),
                windows_unconfirmed=True,
                note=_("Your own custom models and settings stay; ours are the ones named [%(name)s].")
                % {"name": PROVIDER_NAME},
            ),
            *mcp_files(inp),
        ],
        commands=commands,
        notes=[_("Every model carries its own window and output limit; switch with /model.")],
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="customModels.*.baseUrl",
                base_shape="v1",
                key="customModels.*.apiKey",
                models="customModels.*",
                model_name="model",
                model_base="baseUrl",
                model_context="maxContextLimit",
                model_output="maxOutputTokens",
                client=LABEL,
            ),
            Probe(file=MCP_PATH, format="json", base_url="", base_shape="root", mcp="mcpServers", client=LABEL),
        ],
    )
