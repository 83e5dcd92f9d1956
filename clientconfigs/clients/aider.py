"""Aider (PyPI `aider-chat` 0.86.x): ~/.aider.conf.yml and ~/.aider.model.metadata.json.

The `openai/` prefix routes a model through litellm's OpenAI client to `openai-api-base`. The
window and output cap live in the litellm-format metadata file beside the config (Aider reads it
from the home directory, the git root and the cwd); without it Aider asks GitHub for litellm's
price map and warns about an unknown model. `analytics-disable` matters: without it a new user is
asked to opt in, and `--yes-always` answers yes. Aider has one main model per run; the weak and
editor models are the default too.
"""

from __future__ import annotations

import json
from typing import Any

from django.utils.translation import gettext as _

from .base import (
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    window_need,
    window_warnings,
)

SLUG = "aider"
LABEL = "Aider"
ENV_INDIRECTION = False
CONF = "~/.aider.conf.yml"
METADATA = "~/.aider.model.metadata.json"
PREFIX = "openai/"
PROMPT_TOKENS = 600  # measured with 0.86.2, no files added (the repo map and files come on top)
PLACEHOLDER_NOTE = "export OPENAI_API_KEY=<your key>"


def _q(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML scalar


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    lines = [f"# {inp.stamp}"]
    if primary:
        for key in ("model", "weak-model", "editor-model"):
            lines.append(f"{key}: {_q(PREFIX + primary.name)}")
    lines.append(f"openai-api-base: {_q(inp.api_base)}")
    if inp.api_key:
        lines.append(f"openai-api-key: {_q(inp.api_key)}")
    lines += ["analytics-disable: true", "check-update: false", "show-release-notes: false"]
    metadata: dict[str, Any] = {}
    for m in inp.ordered:
        entry: dict[str, Any] = {}
        if m.context_window:
            entry["max_input_tokens"] = m.context_window
        if m.max_output_tokens:
            entry["max_tokens"] = m.max_output_tokens
            entry["max_output_tokens"] = m.max_output_tokens
        entry.update(input_cost_per_token=0, output_cost_per_token=0, litellm_provider="openai", mode="chat")
        metadata[PREFIX + m.name] = entry
    commands = []
    if not inp.api_key:
        commands.append(before_starting("aider", PLACEHOLDER_NOTE))
    try_it = 'LITELLM_LOCAL_MODEL_COST_MAP=True aider --message "pong?" --no-git'
    commands.append(Command(_("Try it (no price-map download)"), try_it))
    return Rendered(
        files=[
            ConfigFile(
                ".aider.conf.yml",
                CONF,
                "\n".join(lines) + "\n",
                "yaml",
                merge="yaml-keys",
                secret=bool(inp.api_key),
                windows_unconfirmed=True,
                note=_("Your other options stay; ours replace the same keys."),
            ),
            ConfigFile(".aider.model.metadata.json", METADATA, dump_json(metadata), "json", windows_unconfirmed=True),
        ],
        commands=commands,
        notes=[_("Aider uses one model per run (`--model openai/<name>` picks another listed here).")],
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models),
        probes=[
            Probe(
                file=CONF,
                format="yaml-flat",
                base_url="openai-api-base",
                base_shape="v1",
                key="openai-api-key",
                key_var="OPENAI_API_KEY",
            ),
            Probe(
                file=METADATA,
                format="json",
                base_url="",
                base_shape="v1",
                models="*",
                model_name="$key",
                name_prefix=PREFIX,
                model_context="max_input_tokens",
                model_output="max_output_tokens",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS),
            ),
        ],
    )
