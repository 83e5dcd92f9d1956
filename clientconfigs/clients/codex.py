"""Codex CLI: ~/.codex/config.toml with our own provider entry.

Never the built-in `openai` id (Codex refuses to redefine it, and pointing it at a gateway makes
Codex try Responses over WebSocket first). `wire_api = "responses"` is the only wire Codex speaks
now; base_url carries /v1 because Codex appends /responses. The key comes from an environment
variable (`env_key`), so auth.json, which may hold the developer's ChatGPT login, is left alone.

Codex runs one model at a time (`model`), so its one `model_context_window` is that model's; every
model also gets a profile, `~/.codex/teamgw-<model>.config.toml` (`codex --profile teamgw-<model>`),
which layers that model and its own window over config.toml.
`[analytics] enabled = false` is Codex's documented metrics opt-out. The installer replaces our
`# Team gateway` comment lines on every install instead of keeping the old ones.

The team's MCP servers are `[mcp_servers.teamgw-<slug>]` tables (Streamable HTTP: `url`), with
`bearer_token_env_var` naming the same variable as the provider's `env_key`: Codex refuses an inline
`bearer_token` in the file, and the key then stays out of it and off every command line.
"""

from __future__ import annotations

from typing import Any

import tomli_w
from django.utils import translation
from django.utils.translation import gettext as _

from .base import (
    ENV_FILE,
    ENV_VAR,
    MCP_PREFIX,
    PROFILES,
    PROVIDER_ID,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    env_file,
    profile_name,
    window_need,
    window_warnings,
)

SLUG = "codex"
LABEL = "Codex CLI"
ENV_INDIRECTION = True
PATH = "~/.codex/config.toml"
PROMPT_TOKENS = 13300  # measured: 9.4-13.3k (Responses, 9 tools) for a one-line request


def tools_note(model: str) -> str:
    return _(
        "%(model)s is served through Chat Completions, so the gateway drops Codex's web_search and "
        "multi-agent tools for it (the model never sees them)."
    ) % {"model": model}


def config(inp: RenderInput) -> dict[str, Any]:
    data: dict[str, Any] = {}
    primary = inp.primary
    if primary:
        data["model"] = primary.name
    data["model_provider"] = PROVIDER_ID
    if primary and primary.context_window:
        data["model_context_window"] = primary.context_window
    data["model_providers"] = {
        PROVIDER_ID: {
            "name": PROVIDER_NAME,
            "base_url": inp.api_base,
            "env_key": ENV_VAR,
            "wire_api": "responses",
            "http_headers": {VERSION_HEADER: inp.version},
        }
    }
    data["analytics"] = {"enabled": False}
    if inp.mcp_servers:
        data["mcp_servers"] = {
            s.entry: {"url": inp.mcp_url(s), "bearer_token_env_var": ENV_VAR} for s in inp.mcp_servers
        }
    return data


def profiles(inp: RenderInput) -> list[ConfigFile]:
    """One profile per model: its name and window over config.toml's provider."""
    out = []
    for m in inp.ordered:
        data = {"model": m.name, "model_provider": PROVIDER_ID, "model_context_window": inp.window_of(m)}
        name = profile_name(m.name)
        out.append(
            ConfigFile(
                f"{name}.config.toml",
                f"~/.codex/{name}.config.toml",
                f"# {inp.stamp}\n" + tomli_w.dumps(data),
                "toml",
                merge="toml",
                family=f"~/.codex/{PROFILES}.config.toml",
                windows_unconfirmed=True,
            )
        )
    return out


def render(inp: RenderInput) -> Rendered:
    primary = inp.primary
    head = f"# {inp.stamp}\n"
    if primary and primary.translated_responses:
        with translation.override("en"):  # the file's comments are English whatever the page's language
            head += f"# Team gateway note: {tools_note(primary.name)}\n"
    text = head + tomli_w.dumps(config(inp))
    files = [
        ConfigFile(
            "config.toml",
            PATH,
            text,
            "toml",
            merge="toml",
            owned=(f"mcp_servers.{MCP_PREFIX}",),
            windows_unconfirmed=True,
            note=_(
                "Your other settings stay; our top-level model keys and [model_providers.%(provider)s] replace "
                "any earlier ones."
            )
            % {"provider": PROVIDER_ID},
        )
    ]
    files += profiles(inp)
    commands = []
    if inp.api_key:
        files.append(
            env_file(
                inp,
                {ENV_VAR: inp.api_key},
                _(
                    "Load it from your shell profile: add `. %(file)s` to ~/.profile, ~/.bashrc or ~/.zshrc. "
                    "The Windows installer sets it as a user environment variable instead."
                )
                % {"file": ENV_FILE},
            )
        )
        commands.append(Command(_("Load the key in this shell"), f". {ENV_FILE}"))
    else:
        commands.append(before_starting("codex", f"export {ENV_VAR}=<your key>"))
    commands.append(Command(_("Check the config"), "codex debug models > /dev/null && echo config ok"))
    notes = [
        _("Codex needs the gateway's Responses API (POST /v1/responses); the gateway serves it on every channel."),
        _("Codex does not read a per-model output limit; only model_context_window is written."),
        _(
            "Codex runs one model at a time: config.toml is written for the default model and its window. Every "
            "model has a profile with its own window: `codex --profile %(profile)s` (teamgw- and the model's name)."
        )
        % {"profile": profile_name(inp.ordered[-1].name) if inp.models else PROVIDER_ID},
    ]
    if primary and primary.translated_responses:
        notes.append(tools_note(primary.name))
    return Rendered(
        files=files,
        commands=commands,
        notes=notes,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, (primary,) if primary else ()),
        probes=[
            Probe(
                file=PATH,
                format="toml",
                base_url=f"model_providers.{PROVIDER_ID}.base_url",
                base_shape="v1",
                key_env=f"model_providers.{PROVIDER_ID}.env_key",
                models=".",
                model_name="model",
                model_context="model_context_window",
                mcp="mcp_servers",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS),
            )
        ],
    )
