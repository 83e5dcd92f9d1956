"""Goose (block/goose), files only: a custom provider and the default in ~/.config/goose/config.yaml.

Goose loads every `~/.config/goose/custom_providers/*.json` as a declarative provider
(crates/goose/src/config/declarative_providers.rs): `name` (its id), `engine` ("openai"),
`display_name`, `api_key_env`, `base_url`, `models` ([{name, context_limit}]), `headers`,
`supports_streaming`. The OpenAI engine posts to the base URL's own path when it has one beyond
`/v1`, so ours names `/v1/chat/completions` in full. The key is read through `get_secret`, which
tries the environment variable named by `api_key_env` before the keyring: ours stays in
~/.config/team-gateway/env. `GOOSE_PROVIDER` and `GOOSE_MODEL` in config.yaml pick it. Goose does
not run here (a desktop/Rust binary); the format is from its source.

The team's MCP servers are `extensions.teamgw-<slug>` entries of config.yaml
(crates/goose/src/config/extensions.rs `ExtensionEntry`: `enabled` beside the flattened
`ExtensionConfig`, keyed by the lower-cased name), of type `streamable_http` (Goose reads `sse` only
to warn that it is no longer supported): `name`, `description` (required), `uri`, `envs`,
`env_keys`, `headers`, `timeout`. Goose substitutes `${VAR}` in a header's value from the entry's
`envs` and `env_keys` (extension_manager.rs `substitute_env_vars`), and an `env_keys` name is read
through `get_secret`, the environment first: the header says `Bearer ${TEAM_GATEWAY_API_KEY}`, so
config.yaml never holds the key. Goose rewrites config.yaml itself (it saves its own extensions on
start), dropping comments: the installer finds its entries again by their `teamgw-` names.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from .base import (
    ENV_FILE,
    ENV_VAR,
    MCP_PREFIX,
    PROVIDER_NAME,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    dump_yaml,
    env_file,
)

SLUG = "goose"
LABEL = "Goose"
ENV_INDIRECTION = True
PROVIDER = "custom_teamgw"
PROVIDER_FILE = f"~/.config/goose/custom_providers/{PROVIDER}.json"
CONFIG = "~/.config/goose/config.yaml"
TIMEOUT = 300  # seconds; Goose's DEFAULT_EXTENSION_TIMEOUT, which new entries are asked to spell out


def extensions(inp: RenderInput) -> dict[str, Any]:
    """One `teamgw-<slug>` extension per team MCP server; the key is a reference Goose resolves."""
    return {
        s.entry: {
            "enabled": True,
            "type": "streamable_http",
            "name": s.entry,
            "description": s.description or s.name,
            "uri": inp.mcp_url(s),
            "envs": {},
            "env_keys": [ENV_VAR],
            "headers": {"Authorization": "Bearer ${%s}" % ENV_VAR, VERSION_HEADER: inp.version},  # noqa: UP031
            "timeout": TIMEOUT,
        }
        for s in inp.mcp_servers
    }


def render(inp: RenderInput) -> Rendered:
    provider = {
        "name": PROVIDER,
        "engine": "openai",
        "display_name": PROVIDER_NAME,
        "description": inp.stamp,
        "api_key_env": ENV_VAR,
        "base_url": inp.api_base + "/chat/completions",
        "models": [{"name": m.name, "context_limit": inp.window_of(m)} for m in inp.ordered],
        "headers": {VERSION_HEADER: inp.version},
        "supports_streaming": True,
    }
    files = [
        ConfigFile(
            f"{PROVIDER}.json",
            PROVIDER_FILE,
            dump_json(provider),
            "json",
            replace=("models",),
            windows_path=f"%APPDATA%\\Block\\goose\\config\\custom_providers\\{PROVIDER}.json",
            windows_unconfirmed=True,
        )
    ]
    primary = inp.primary
    lines = [f"# {inp.stamp}"]
    if primary:
        lines += [f"GOOSE_PROVIDER: {PROVIDER}", f"GOOSE_MODEL: {dump_json(primary.name).strip()}"]
    if inp.mcp_servers:
        lines.append(dump_yaml({"extensions": extensions(inp)}).rstrip("\n"))
    # Always sent, even with nothing of ours in it: its merge takes out servers no longer allowed.
    files.append(
        ConfigFile(
            "config.yaml",
            CONFIG,
            "\n".join(lines) + "\n",
            "yaml",
            merge="yaml-keys",
            owned=(f"extensions.{MCP_PREFIX}",),
            windows_path="%APPDATA%\\Block\\goose\\config\\config.yaml",
            windows_unconfirmed=True,
            note=_(
                "Your own extensions and other settings stay; GOOSE_PROVIDER, GOOSE_MODEL and the team's MCP "
                "servers (teamgw-…) are replaced. The file holds no key: Goose reads it from %(var)s."
            )
            % {"var": ENV_VAR},
        )
    )
    if inp.api_key:
        files.append(env_file(inp, {ENV_VAR: inp.api_key}))
        commands = [Command(_("Load the key in this shell"), f". {ENV_FILE}")]
    else:
        commands = [before_starting("goose", f"export {ENV_VAR}=<your key>")]
    commands.append(Command(_("Try it"), 'goose run -t "Reply with the word pong."'))
    return Rendered(
        files=files,
        commands=commands,
        notes=[_("Goose reads the key from the environment variable the provider file names, before its keyring.")],
        probes=[
            Probe(
                file=PROVIDER_FILE,
                format="json",
                base_url="base_url",
                base_shape="chat",
                key_env="api_key_env",
                key_file=ENV_FILE,
                models="models.*",
                model_name="name",
                model_context="context_limit",
                client=LABEL,
            ),
            Probe(file=CONFIG, format="yaml-flat", base_url="", base_shape="root", mcp="extensions", mcp_url="uri"),
        ],
    )
