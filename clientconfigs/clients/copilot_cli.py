"""GitHub Copilot CLI (npm `@github/copilot` 1.0.x): its bring-your-own-key provider, from the environment.

Copilot CLI has no provider file: `copilot help providers` lists the variables it reads at start.
`COPILOT_PROVIDER_BASE_URL` (with /v1: it posts to /chat/completions, the default wire API) turns
on BYOK, and then no GitHub sign-in is needed; `COPILOT_MODEL` names the model;
`COPILOT_PROVIDER_MAX_PROMPT_TOKENS` and `COPILOT_PROVIDER_MAX_OUTPUT_TOKENS` replace its built-in
catalogue's limits (which do not know our models); `COPILOT_PROVIDER_HEADERS` takes "Name: Value"
lines. They are one set for the shell, so one model at a time: the default's, in the shared
environment file that Codex and Goose use too (the Windows installer sets them for the user).

The team's MCP servers go where `copilot mcp add --transport http --header …` puts them (1.0.102,
run here): `mcpServers` of ~/.copilot/mcp-config.json, entries `{"type": "http", "url", "headers",
"tools": ["*"]}`. Copilot expands `${VAR}` in header values (checked: a header
`Bearer ${TEAM_GATEWAY_API_KEY}` reached a local server as the variable's value), but not
`${COPILOT_PROVIDER_API_KEY}`, which it takes out of its environment once read (the header went out
literally). So the bearer is `${TEAM_GATEWAY_API_KEY}`, set beside the provider's variables in the
environment file: mcp-config.json holds no key.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from .base import (
    ENV_FILE,
    ENV_VAR,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    env_file,
    mcp_servers_file,
)

SLUG = "copilot-cli"
LABEL = "GitHub Copilot CLI"
ENV_INDIRECTION = False  # the key is a value of its own variable, not a reference
MCP_PATH = "~/.copilot/mcp-config.json"
KEY_VAR = "COPILOT_PROVIDER_API_KEY"


def variables(inp: RenderInput) -> dict[str, str]:
    out = {"COPILOT_PROVIDER_BASE_URL": inp.api_base, "COPILOT_PROVIDER_TYPE": "openai"}
    if inp.api_key:
        out[KEY_VAR] = inp.api_key
        if inp.mcp_servers:
            out[ENV_VAR] = inp.api_key  # for the MCP entries' bearer: Copilot hides its own variable
    primary = inp.primary
    if primary:
        output = inp.output_of(primary)
        out["COPILOT_MODEL"] = primary.name
        # The prompt budget is what the window leaves after the answer's room.
        out["COPILOT_PROVIDER_MAX_PROMPT_TOKENS"] = str(max(1, inp.window_of(primary) - output))
        out["COPILOT_PROVIDER_MAX_OUTPUT_TOKENS"] = str(output)
    out["COPILOT_PROVIDER_HEADERS"] = f"{VERSION_HEADER}: {inp.version}"
    return out


def mcp_file(inp: RenderInput) -> ConfigFile:
    """User-level MCP servers: one `teamgw-<slug>` entry per server this key may use."""
    return mcp_servers_file("mcp-config.json", MCP_PATH, inp, "http", "${%s}" % ENV_VAR, env_ref=True, tools=["*"])  # noqa: UP031 - Copilot's own syntax


def render(inp: RenderInput) -> Rendered:
    commands = [Command(_("Load the settings in this shell"), f". {ENV_FILE}")]
    if not inp.api_key:
        commands.append(before_starting("copilot", f"export {KEY_VAR}=<your key>"))
        if inp.mcp_servers:
            commands.append(Command(_("For the team's MCP servers"), f"export {ENV_VAR}=<your key>"))
    commands.append(Command(_("Try it"), 'copilot -p "Reply with the word pong." --allow-all-tools'))
    notes = [
        _(
            "Copilot CLI reads its provider from environment variables only: load the file from your shell "
            "profile. With them set it needs no GitHub sign-in."
        ),
        _(
            "The variables hold one model at a time, the default one, with its window: to switch, pick another "
            "default here and install again (or export COPILOT_MODEL and its two token limits yourself)."
        ),
    ]
    files = [env_file(inp, variables(inp))]
    if inp.mcp_servers:
        files.append(mcp_file(inp))
    return Rendered(
        files=files,
        commands=commands,
        notes=notes,
        probes=[
            Probe(
                file=ENV_FILE,
                format="dotenv",
                base_url="COPILOT_PROVIDER_BASE_URL",
                base_shape="v1",
                key=KEY_VAR,
                models=".",
                model_name="COPILOT_MODEL",
                model_output="COPILOT_PROVIDER_MAX_OUTPUT_TOKENS",
                client=LABEL,
            ),
            Probe(file=MCP_PATH, format="json", base_url="", base_shape="root", mcp="mcpServers", client=LABEL),
        ],
    )
