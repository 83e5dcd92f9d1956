"""OpenHands CLI (PyPI `openhands` 1.16): the agent's LLM in ~/.openhands/agent_settings.json.

The CLI keeps its whole agent as one JSON file (the SDK's `Agent`, read with
`Agent.model_validate_json`: omitted fields take their defaults). Ours sets the agent's and its
condenser's `llm`: `model` "openai/<name>" (LiteLLM's OpenAI-compatible route), `base_url` with
/v1, `api_key` (the file has no reference to the environment: without a minted key it holds a
placeholder), `max_input_tokens` (what the window leaves after the answer) and `max_output_tokens`,
`extra_headers`; and the CLI's default tools, which a fresh file needs. One model at a time.
"""

from __future__ import annotations

from django.utils.translation import gettext as _

from .base import (
    VERSION_HEADER,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
)

SLUG = "openhands"
LABEL = "OpenHands CLI"
ENV_INDIRECTION = False
PATH = "~/.openhands/agent_settings.json"
PREFIX = "openai/"
TOOLS = ("terminal", "file_editor", "task_tracker", "task_tool_set")  # openhands_cli's defaults


def llm(inp: RenderInput, usage: str) -> dict:
    primary = inp.primary
    data: dict = {"model": PREFIX + primary.name if primary else "", "api_key": inp.key_or_placeholder}
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
    return Rendered(
        files=[
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
        ],
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
            )
        ],
    )
