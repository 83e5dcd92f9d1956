"""Claude Code: the `env` block of ~/.claude/settings.json.

Claude Code appends /v1/messages itself, so ANTHROPIC_BASE_URL is the root (a /v1 suffix gives
/v1/v1/messages). Only ANTHROPIC_AUTH_TOKEN is set: with ANTHROPIC_API_KEY as well it sends both
headers. The context window and output cap are global (CLAUDE_CODE_MAX_CONTEXT_TOKENS,
CLAUDE_CODE_MAX_OUTPUT_TOKENS; without them Claude Code assumes 1M tokens for an unknown model), so
the file lists one model, the default, for every role (main, haiku, sonnet, opus): one window is
then right for every request it sends. Per model, `~/.claude/teamgw-<model>.json` sets that model for
every role with its own window and cap, for `claude --settings ~/.claude/teamgw-<model>.json` (a
settings layer over settings.json, which keeps the URL and key). The page says so.

The team's MCP servers go where `claude mcp add --scope user` puts them: `mcpServers` of
~/.claude.json (settings.json has no MCP servers), as `type: http` entries with the key in an
Authorization header (without a minted key: `${ANTHROPIC_AUTH_TOKEN}`, which Claude Code expands
from the environment). ~/.claude.json is also Claude Code's own state file, rewritten whole while it
runs: install with Claude Code closed.
"""

from __future__ import annotations

import json
import shlex

from django.utils.translation import gettext as _

from .base import (
    PROFILES,
    VERSION_HEADER,
    Command,
    ConfigFile,
    Probe,
    Rendered,
    RenderInput,
    before_starting,
    dump_json,
    mcp_servers_file,
    profile_name,
    window_need,
    window_warnings,
)

SLUG = "claude-code"
LABEL = "Claude Code"
ENV_INDIRECTION = False  # settings `env` values are literal; without a key we leave the token to the shell
SCHEMA = "https://json.schemastore.org/claude-code-settings.json"
PATH = "~/.claude/settings.json"
MCP_PATH = "~/.claude.json"
PROMPT_TOKENS = 12300  # measured: 11.9-12.3k (12 tools) for a one-line request


def env_block(inp: RenderInput) -> dict[str, str]:
    env: dict[str, str] = {"ANTHROPIC_BASE_URL": inp.gateway_url}
    if inp.api_key:
        env["ANTHROPIC_AUTH_TOKEN"] = inp.api_key
    primary = inp.primary
    if primary:
        env["ANTHROPIC_MODEL"] = primary.name
        env["ANTHROPIC_DEFAULT_SONNET_MODEL"] = primary.name
        env["ANTHROPIC_DEFAULT_OPUS_MODEL"] = primary.name
        env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] = primary.name
        if primary.context_window:
            env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(primary.context_window)
        if primary.max_output_tokens:
            env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(primary.max_output_tokens)
    env["ANTHROPIC_CUSTOM_HEADERS"] = f"{VERSION_HEADER}: {inp.version}"
    return env


def model_settings(inp: RenderInput) -> list[ConfigFile]:
    """One `--settings` file per model: it in every role, with its own window and output cap."""
    out = []
    for m in inp.ordered:
        roles = ("ANTHROPIC_MODEL", *(f"ANTHROPIC_DEFAULT_{r}_MODEL" for r in ("SONNET", "OPUS", "HAIKU")))
        env = dict.fromkeys(roles, m.name)
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(inp.window_of(m))
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(inp.output_of(m))
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"{VERSION_HEADER}: {inp.version}"
        name = profile_name(m.name)
        out.append(
            ConfigFile(
                f"{name}.json",
                f"~/.claude/{name}.json",
                dump_json({"$schema": SCHEMA, "env": env}),
                "json",
                replace=("env",),
                family=f"~/.claude/{PROFILES}.json",
                windows_unconfirmed=True,
            )
        )
    return out


def mcp_file(inp: RenderInput) -> ConfigFile:
    """User-scope MCP servers: one `teamgw-<slug>` entry per server this key may use."""
    return mcp_servers_file(".claude.json", MCP_PATH, inp, "http", inp.api_key or "${ANTHROPIC_AUTH_TOKEN}")


def render(inp: RenderInput) -> Rendered:
    settings = {"$schema": SCHEMA, "env": env_block(inp)}
    # A stale ANTHROPIC_API_KEY would be sent too; the deprecated small-fast model would win over
    # the haiku default. Without a minted key, an old token in settings would override the shell.
    remove = ["env.ANTHROPIC_API_KEY", "env.ANTHROPIC_SMALL_FAST_MODEL"]
    # Limits from an earlier install for a model that no longer has them must not stay behind.
    remove += ["env.CLAUDE_CODE_MAX_CONTEXT_TOKENS", "env.CLAUDE_CODE_MAX_OUTPUT_TOKENS"]
    if not inp.api_key:
        remove.append("env.ANTHROPIC_AUTH_TOKEN")
    primary = inp.primary
    notes = [_("Claude Code talks Anthropic Messages: the gateway answers it on every channel.")]
    if primary:
        if primary.context_window:
            note = _(
                "Claude Code has one context-window setting for all models, so settings.json uses only "
                "%(model)s (main, haiku, sonnet and opus) with its window (%(window)s tokens): switching with "
                "/model would keep this window. For another model start "
                "`claude --settings ~/.claude/%(profile)s.json` (teamgw- and the model's name): it sets that "
                "model with its own window."
            )
        else:
            note = _(
                "Claude Code has one context-window setting for all models, so settings.json uses only "
                "%(model)s (main, haiku, sonnet and opus) with its window: switching with /model would "
                "keep this window. For another model start `claude --settings ~/.claude/%(profile)s.json` "
                "(teamgw- and the model's name): it sets that model with its own window."
            )
        window = f"{primary.context_window:,}" if primary.context_window else ""
        notes.append(note % {"model": primary.name, "window": window, "profile": profile_name(inp.ordered[-1].name)})
    files = [
        ConfigFile(
            "settings.json",
            PATH,
            dump_json(settings),
            "json",
            secret=bool(inp.api_key),
            remove=tuple(remove),
            windows_unconfirmed=True,
        ),
        *model_settings(inp),
    ]
    if inp.mcp_servers:
        files.append(mcp_file(inp))
    commands = []
    if not inp.api_key:
        # Only without a key: a minted key must not end up on a command line (shell history, ps).
        commands.append(
            Command(
                _("Try it once without changing settings.json"),
                "claude --settings " + shlex.quote(json.dumps(settings, separators=(",", ":"))),
            )
        )
        notes.append(_("No key is written: export ANTHROPIC_AUTH_TOKEN with your key before starting claude."))
        commands.insert(0, before_starting("claude", "export ANTHROPIC_AUTH_TOKEN=<your key>"))
    return Rendered(
        files=files,
        commands=commands,
        notes=notes,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, (primary,) if primary else ()),
        probes=[
            Probe(
                file=PATH,
                format="json",
                base_url="env.ANTHROPIC_BASE_URL",
                base_shape="root",
                key="env.ANTHROPIC_AUTH_TOKEN",
                models="env",
                model_name="ANTHROPIC_MODEL",
                model_context="CLAUDE_CODE_MAX_CONTEXT_TOKENS",
                model_output="CLAUDE_CODE_MAX_OUTPUT_TOKENS",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS),
            ),
            Probe(file=MCP_PATH, format="json", base_url="", base_shape="root", mcp="mcpServers", client=LABEL),
        ],
    )
