"""Mistral Vibe (PyPI `mistral-vibe` 3.0): a provider and its models in ~/.vibe/config.toml.

vibe/core/config: `[[providers]]` items (`name`, `api_base` with /v1, `api_key_env_var`,
`api_style` "openai", `backend` "generic", `extra_headers`) and `[[models]]` items (`name` sent to
the API, `provider`, `alias` that `active_model` and `--model` take, `max_context_length`,
`max_output_tokens`); both lists are merged with Vibe's defaults by name and alias. The key is read
from the variable `api_key_env_var` names, which Vibe also loads from ~/.vibe/.env. The installer's
`toml-items` merge replaces our items and keeps the user's own.

The team's MCP servers are `[[mcp_servers]]` items (vibe/core/config/models.py `MCPStreamableHttp`:
`name`, `transport = "streamable-http"`, `url`, and an `auth` table `MCPStaticAuth` with
`type = "static"`, `headers`, and `api_key_env`, whose variable's value goes out as
`api_key_format` "Bearer {token}" in `api_key_header` "Authorization" — the defaults). The key is
therefore never in config.toml: `api_key_env` names the same variable as the provider, which Vibe
loads from ~/.vibe/.env too (vibe_schema.load_dotenv_values). Ours are the items named `teamgw-…`.
"""

from __future__ import annotations

from typing import Any

import tomli_w
from django.utils.translation import gettext as _

from .base import (
    ENV_VAR,
    MCP_PREFIX,
    PROVIDER_ID,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
)

SLUG = "mistral-vibe"
LABEL = "Mistral Vibe"
ENV_INDIRECTION = True
PATH = "~/.vibe/config.toml"
ENV_FILE = "~/.vibe/.env"
PREFIX = PROVIDER_ID + "/"


def config(inp: RenderInput) -> dict[str, Any]:
    data: dict[str, Any] = {}
    primary = inp.primary
    if primary:
        data["active_model"] = PREFIX + primary.name
    data["providers"] = [
        {
            "name": PROVIDER_ID,
            "api_base": inp.api_base,
            "api_key_env_var": ENV_VAR,
            "api_style": "openai",
            "backend": "generic",
            "extra_headers": {VERSION_HEADER: inp.version},
        }
    ]
    data["models"] = [
        {
            "name": m.name,
            "provider": PROVIDER_ID,
            "alias": PREFIX + m.name,
            "max_context_length": inp.window_of(m),
            "max_output_tokens": inp.output_of(m),
        }
        for m in inp.ordered
    ]
    if inp.mcp_servers:
        data["mcp_servers"] = [
            {
                "name": s.entry,
                "transport": "streamable-http",
                "url": inp.mcp_url(s),
                "auth": {"type": "static", "api_key_env": ENV_VAR, "headers": {VERSION_HEADER: inp.version}},
            }
            for s in inp.mcp_servers
        ]
    return data


def render(inp: RenderInput) -> Rendered:
    files = [
        ConfigFile(
            "config.toml",
            PATH,
            f"# {inp.stamp}\n" + tomli_w.dumps(config(inp)),
            "toml",
            merge="toml-items",
            owned=(f"mcp_servers.{MCP_PREFIX}",),  # items named so: install.py's OUR_ITEM drops them
            windows_unconfirmed=True,
            note=_(
                "Your own providers, models, MCP servers and settings stay; ours (%(provider)s, %(prefix)s…) are "
                "replaced."
            )
            % {"provider": PROVIDER_ID, "prefix": MCP_PREFIX},
        )
    ]
    commands = []
    if inp.api_key:
        files.append(
            ConfigFile(
                ".env",
                ENV_FILE,
                f"# {inp.stamp}\n{ENV_VAR}='{inp.api_key}'\n",
                "dotenv",
                merge="dotenv",
                secret=True,
                windows_unconfirmed=True,
            )
        )
    else:
        commands.append(before_starting("vibe", f"echo \"{ENV_VAR}='<your key>'\" >> {ENV_FILE}"))
    commands.append(Command(_("Try it"), 'vibe -p "Reply with the word pong."'))
    return Rendered(
        files=files,
        commands=commands,
        notes=[_("Every model carries its own window and output limit; switch with /model (it saves active_model).")],
        probes=[
            Probe(
                file=PATH,
                format="toml",
                base_url="providers.*.api_base",
                base_shape="v1",
                key_var=ENV_VAR,
                key_file=ENV_FILE,
                models="models.*",
                model_name="alias",
                name_prefix=PREFIX,
                model_context="max_context_length",
                model_output="max_output_tokens",
                mcp="mcp_servers",
                client=LABEL,
            )
        ],
    )
