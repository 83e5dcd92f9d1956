"""pi (npm `@mariozechner/pi-coding-agent` 0.73, Mario Zechner's pi-mono): a provider in models.json.

`~/.pi/agent/models.json` holds `providers.<id>` with `baseUrl` (with /v1), `api`
("openai-completions": Chat Completions), `apiKey` and `headers`, and per model `id`, `name`,
`contextWindow` and `maxTokens` (docs/models.md; its ModelRegistry validates the file with a schema
and ignores the whole file on an error). `apiKey` is read as an environment variable's name first,
else taken literally, so without a minted key it names ours. `compat` turns off the `developer`
role and `reasoning_effort`, which OpenAI-compatible servers such as vLLM may not take.
`~/.pi/agent/settings.json` picks the default (`defaultProvider`, `defaultModel`).
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    PROVIDER_ID,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
)

SLUG = "pi"
LABEL = "pi"
ENV_INDIRECTION = True
MODELS = "~/.pi/agent/models.json"
SETTINGS = "~/.pi/agent/settings.json"


def provider(inp: RenderInput) -> dict[str, Any]:
    return {
        "baseUrl": inp.api_base,
        "api": "openai-completions",
        "apiKey": inp.api_key or ENV_VAR,
        "headers": {VERSION_HEADER: inp.version},
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [
            {
                "id": m.name,
                "name": m.label,
                "input": ["text"],
                "contextWindow": inp.window_of(m),
                "maxTokens": inp.output_of(m),
            }
            for m in inp.ordered
        ],
    }


def render(inp: RenderInput) -> Rendered:
    files = [
        ConfigFile(
            "models.json",
            MODELS,
            dump_json({"providers": {PROVIDER_ID: provider(inp)}}),
            "json",
            secret=bool(inp.api_key),
            replace=(f"providers.{PROVIDER_ID}",),
            note=_("Your other providers stay; ours (%(provider)s) is replaced whole.") % {"provider": PROVIDER_ID},
        )
    ]
    primary = inp.primary
    if primary:
        files.append(
            ConfigFile(
                "settings.json",
                SETTINGS,
                dump_json({"defaultProvider": PROVIDER_ID, "defaultModel": primary.name}),
                "json",
                note=_("Makes our default model pi's default; your other settings stay."),
            )
        )
    commands = [] if inp.api_key else [before_starting("pi", f"export {ENV_VAR}=<your key>")]
    commands.append(Command(_("Try it"), 'pi -p "Reply with the word pong."'))
    return Rendered(
        files=files,
        commands=commands,
        notes=[_("Every model carries its own window and output limit; switch with /model or `pi --model <name>`.")],
        probes=[
            Probe(
                file=MODELS,
                format="json",
                base_url=f"providers.{PROVIDER_ID}.baseUrl",
                base_shape="v1",
                key=f"providers.{PROVIDER_ID}.apiKey",
                models=f"providers.{PROVIDER_ID}.models.*",
                model_name="id",
                model_context="contextWindow",
                model_output="maxTokens",
                client=LABEL,
            )
        ],
    )
