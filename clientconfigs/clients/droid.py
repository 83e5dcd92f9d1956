"""Factory Droid (npm `@factory/cli` 0.225): custom models in ~/.factory/settings.json.

`customModels` entries (the zod schema in the droid binary): `model` (sent to the API),
`displayName`, `baseUrl` (with /v1), `apiKey` (`${VAR}` is read from the environment in
settings.json), `provider` ("generic-chat-completion-api": Chat Completions), `maxContextLimit`,
`maxOutputTokens`, `extraHeaders`, `noImageSupport`. Droid names each entry
`custom:<displayName with spaces as dashes>-<n>`, n counting earlier entries of the same display
name; `sessionDefaultSettings.model` takes that id. Our entries replace the ones with our display
names or our base URL; the user's own stay.
"""

from __future__ import annotations

import re

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
)

SLUG = "factory-droid"
LABEL = "Factory Droid"
ENV_INDIRECTION = True
PATH = "~/.factory/settings.json"


def display_name(label: str) -> str:
    return f"{label} [{PROVIDER_NAME}]"


def model_id(label: str) -> str:
    """The id Droid gives the first entry with this display name (its customModels code)."""
    return "custom:" + re.sub(r"\s+", "-", display_name(label).strip()) + "-0"


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
    data: dict = {"customModels": entries}
    primary = inp.primary
    if primary:
        data["sessionDefaultSettings"] = {"model": model_id(primary.label)}
    commands = [] if inp.api_key else [Command("Before starting droid", f"export {ENV_VAR}=<your key>")]
    if primary:
        commands.append(Command("Try it", f'droid exec -m "{model_id(primary.label)}" "Reply with the word pong."'))
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
            )
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
            )
        ],
    )
