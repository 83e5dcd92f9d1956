"""Qwen Code (npm `@qwen-code/qwen-code` 0.24.x): ~/.qwen/settings.json, settings schema `$version` 4.

One `modelProviders.openai` entry per model, each with its own window and output cap
(`generationConfig` of a provider entry is "impermeable": top-level generation settings do not
apply to it). The key stays out of the file: `envKey` names the variable, which Qwen Code reads
from ~/.qwen/.env. `model.name` with `security.auth.selectedType` is the selected model. The
list is shared with the user's own providers: the installer replaces only entries with our ids or
our base URL. Qwen Code clamps the output cap to what the window leaves
(`min(cap, max(4000, window - prompt - max(10000, 5 % of window)))`), hence its 4000-token floor.
The team's MCP servers are `mcpServers.teamgw-<slug>` entries with `httpUrl` (Streamable HTTP; `url`
would mean SSE) and the key in an Authorization header: written literally when one was minted (the
file is then 0600), else `$TEAM_GATEWAY_API_KEY`, which Qwen Code expands from the environment.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    MCP_PREFIX,
    VERSION_HEADER,
    Command,
    ConfigFile,
    ModelSpec,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    window_need,
    window_warnings,
)

SLUG = "qwen-code"
LABEL = "Qwen Code"
ENV_INDIRECTION = True
PATH = "~/.qwen/settings.json"
ENV_FILE = "~/.qwen/.env"
PROMPT_TOKENS = 19400  # measured: 14 tools, plus a ~10.9k background request after the answer
ANSWER_FLOOR = 4000  # the smallest output cap Qwen Code sends


def provider(m: ModelSpec, inp: RenderInput) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": m.name,
        "name": f"{m.label} (team gateway)",
        "envKey": ENV_VAR,
        "baseUrl": inp.api_base,
    }
    generation: dict[str, Any] = {"customHeaders": {VERSION_HEADER: inp.version}}
    if m.context_window:
        generation["contextWindowSize"] = m.context_window
    if m.max_output_tokens:
        generation["samplingParams"] = {"max_tokens": m.max_output_tokens}
    entry["generationConfig"] = generation
    return entry


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    data: dict[str, Any] = {
        "$version": 4,
        "modelProviders": {"openai": [provider(m, inp) for m in inp.ordered]},
        "security": {"auth": {"selectedType": "openai"}},
    }
    if primary:
        data["model"] = {"name": primary.name}
    if inp.mcp_servers:
        auth = "Bearer " + (inp.api_key or f"${ENV_VAR}")
        data["mcpServers"] = {
            s.entry: {"httpUrl": inp.mcp_url(s), "headers": {"Authorization": auth}} for s in inp.mcp_servers
        }
    data["privacy"] = {"usageStatisticsEnabled": False}
    data["telemetry"] = {"enabled": False}
    data["general"] = {"enableAutoUpdate": False}
    files = [
        ConfigFile(
            "settings.json",
            PATH,
            dump_json(data),
            "json",
            lists=("modelProviders.openai:id:baseUrl",),
            owned=(f"mcpServers.{MCP_PREFIX}",),
            secret=bool(inp.api_key and inp.mcp_servers),
            note=_("Your other settings and providers stay; our models replace the ones written before."),
        )
    ]
    commands = []
    if inp.api_key:
        files.append(
            ConfigFile(
                ".env", ENV_FILE, f"# {inp.stamp}\n{ENV_VAR}={inp.api_key}\n", "dotenv", merge="dotenv", secret=True
            )
        )
    else:
        commands.append(before_starting("qwen", f"echo '{ENV_VAR}=<your key>' >> {ENV_FILE}"))
    commands.append(Command(_("Try it"), 'qwen -p "Reply with the word pong."'))
    return Rendered(
        files=files,
        commands=commands,
        notes=[
            _(
                "Qwen Code shrinks the output cap to what the window leaves after its own prompt "
                "(at least 4000 tokens)."
            ),
            _("Project settings (.qwen/settings.json in a repository) replace these providers as a whole."),
        ],
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models, ANSWER_FLOOR),
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="modelProviders.openai.*.baseUrl",
                base_shape="v1",
                key_env="modelProviders.openai.0.envKey",
                key_file=ENV_FILE,
                models="modelProviders.openai.*",
                model_name="id",
                model_context="generationConfig.contextWindowSize",
                model_output="generationConfig.samplingParams.max_tokens",
                model_base="baseUrl",
                mcp="mcpServers",
                mcp_url="httpUrl",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS, ANSWER_FLOOR),
            )
        ],
    )
