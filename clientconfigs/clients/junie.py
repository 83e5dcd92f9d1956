"""JetBrains: Junie's custom model profile (files only) and AI Assistant's OpenAI-compatible provider.

Junie (the JetBrains agent, CLI and IDE) loads every `~/.junie/models/*.json` as a model profile
named after the file (`custom:teamgw`): `id` (the model sent), `displayName`, `providerName`,
`baseUrl` (the full endpoint: Junie appends nothing), `apiType` ("OpenAICompletion": Chat
Completions), `apiKey` (`${VAR}` is read from the environment; an unset one stops the profile
from loading), `maxContextLength`. One profile is one model: ours is the default's. Junie's CLI
is installed from JetBrains' own site and AI Assistant is an IDE plugin, so neither runs here; the
format is JetBrains' junie-local model files and Junie's documentation. AI Assistant keeps its
providers in the IDE's settings and its keys in the IDE's password safe: there is no file to
write, so the page lists what to enter under Settings | Tools | AI Assistant | Providers & API keys.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    PROVIDER_ID,
    PROVIDER_NAME,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
)

SLUG = "jetbrains"
LABEL = "JetBrains (Junie, AI Assistant)"
ENV_INDIRECTION = True
PATH = f"~/.junie/models/{PROVIDER_ID}.json"


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    profile: dict[str, Any] = {}
    if primary:
        profile = {"id": primary.name, "displayName": f"{primary.label} ({PROVIDER_NAME})"}
    profile |= {
        "providerName": PROVIDER_NAME,
        "baseUrl": inp.api_base + "/chat/completions",
        "apiType": "OpenAICompletion",
        "apiKey": inp.api_key or "${%s}" % ENV_VAR,  # noqa: UP031 - Junie's own syntax
    }
    if primary:
        profile["maxContextLength"] = inp.window_of(primary)
    files = [
        ConfigFile(
            f"{PROVIDER_ID}.json",
            PATH,
            dump_json(profile),
            "json",
            secret=bool(inp.api_key),
            windows_unconfirmed=True,
            note=_("Junie lists it as %(profile)s; a profile is one model, the default one.")
            % {"profile": f"custom:{PROVIDER_ID}"},
        )
    ]
    commands = [] if inp.api_key else [before_starting("junie", f"export {ENV_VAR}=<your key>")]
    if primary:
        commands.append(Command(_("Try it"), f"junie --model custom:{PROVIDER_ID}"))
    notes = [
        _(
            "JetBrains AI Assistant: in Settings | Tools | AI Assistant | Providers & API keys add an "
            "OpenAI-compatible provider with the URL %(url)s, your key, and the model %(model)s."
        )
        % {"url": inp.api_base, "model": primary.name if primary else "-"},
    ]
    return Rendered(
        files=files,
        commands=commands,
        notes=notes,
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="baseUrl",
                base_shape="chat",
                key="apiKey",
                models=".",
                model_name="id",
                model_context="maxContextLength",
                client=LABEL,
            )
        ],
    )
