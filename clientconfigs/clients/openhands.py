"""OpenHands CLI (PyPI `openhands` 1.16): the agent's LLM in ~/.openhands/agent_settings.json.

The CLI keeps its whole agent as one JSON file (the SDK's `Agent`, read with
`Agent.model_validate_json`: omitted fields take their defaults). Ours sets the agent's and its
condenser's `llm`: `model` "openai/<name>" (LiteLLM's OpenAI-compatible route), `base_url` with
/v1, `api_key` (the file has no reference to the environment: without a minted key it holds a
placeholder), `max_input_tokens` (what the window leaves after the answer) and `max_output_tokens`,
`extra_headers`; and the CLI's default tools, which a fresh file needs. One model at a time.

The team's MCP servers go where `openhands mcp add --transport http --header …` puts them
(openhands_cli/mcp/mcp_utils.py): `mcpServers` of ~/.openhands/mcp.json, fastmcp's MCPConfig, entries
`{"transport": "http", "url", "headers", "enabled"}`; the CLI hands the enabled ones to the agent at
each start (the agent file's own `mcp_config` is replaced then). Neither the CLI nor fastmcp expands
variables in a header, so the file holds the key itself and is written with mode 0600.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    VERSION_HEADER,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
    mcp_servers_file,
)

SLUG = "openhands"
LABEL = "OpenHands CLI"
ENV_INDIRECTION = False
PATH = "~/.openhands/agent_settings.json"
MCP_PATH = "~/.openhands/mcp.json"
PREFIX = "openai/"
TOOLS = ("terminal", "file_editor", "task_tracker", "task_tool_set")  # openhands_cli's defaults


def llm(inp: RenderInput, usage: str) -> dict[str, Any]:
    primary = inp.primary
    data: dict[str, Any] = {"model": PREFIX + primary.name if primary else "", "api_key": inp.key_or_placeholder}
    data["base_url"] = inp.api_base
    if primary:
        output = inp.output_of(primary)
        data["max_input_tokens"] = max(1, inp.window_of(primary) - output)
        data["max_output_tokens"] = output
    data["extra_headers"] = {VERSION_HEADER: inp.version}
    data["usage_id"] = usage
    return data


def render(inp: RenderInput) -> Rendered:
    agent = {
        "kind": "Agent",
        "llm": llm(inp, "agent"),
        "tools": [{"name": t, "params": {}} for t in TOOLS],
        "condenser": {"kind": "LLMSummarizingCondenser", "llm": llm(inp, "condenser")},
    }
    notes = [
        _(
            "OpenHands runs one model at a time, the default one: to switch, pick another default here and "
            "install again (or use /settings in openhands)."
        )
    ]
    if not inp.api_key:
        notes.append(_("No key is written: replace the placeholder api_key in the file (twice) with your key."))
    files = [
        ConfigFile(
            "agent_settings.json",
            PATH,
            dump_json(agent),
            "json",
            secret=bool(inp.api_key),
            replace=("llm", "condenser.llm", "tools"),
            windows_unconfirmed=True,
            note=_("Your MCP servers and other agent settings stay; the model settings are replaced."),
        )
    ]
    if inp.mcp_servers:
        files.append(
            mcp_servers_file(
                "mcp.json", MCP_PATH, inp, "http", inp.key_or_placeholder, kind_key="transport", enabled=True
            )
        )
        if not inp.api_key:
            notes.append(_("In mcp.json too, replace the placeholder after Bearer with your key."))
    return Rendered(
        files=files,
        notes=notes,
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="llm.base_url",
                base_shape="v1",
                key="llm.api_key",
                models="llm",
                model_name="model",
                name_prefix=PREFIX,
                model_output="max_output_tokens",
                client=LABEL,
            ),
            Probe(file=MCP_PATH, format="json", base_url="", base_shape="root", mcp="mcpServers", client=LABEL),
        ],
    )
