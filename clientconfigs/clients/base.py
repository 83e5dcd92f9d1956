"""Shapes shared by every client module: what goes in (gateway, key, models) and what comes out.

A client module is a pure function `render(RenderInput) -> Rendered`: no database, no request, no
clock. The page, the REST API and the installer bundle all call it, so they can never disagree.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.utils.translation import gettext as _

# Written where a client has no way to read the key from the environment and no key was minted.
PLACEHOLDER_KEY = "PASTE-YOUR-GATEWAY-KEY-HERE"
ENV_VAR = "TEAM_GATEWAY_API_KEY"
PROVIDER_ID = "teamgw"
PROVIDER_NAME = "Team Gateway"
VERSION_HEADER = "X-Gateway-Config-Version"
# The shell environment file several clients share (Codex, Goose, Copilot CLI): sourced from the
# shell profile on macOS and Linux; the Windows installer sets its variables for the user instead.
ENV_FILE = "~/.config/team-gateway/env"
# A model whose window the gateway does not know gets the smallest listed one (safe: the client
# compacts before it), else this: the clients' own defaults (128k and up) could overrun a small server.
UNKNOWN_WINDOW = 8192
# Our MCP entries in a client's own list of servers are `teamgw-<server slug>`: the installer owns
# every entry with this prefix (a second run replaces them, uninstall removes them) and no other.
MCP_PREFIX = PROVIDER_ID + "-"


@dataclass(frozen=True)
class ModelSpec:
    """One public model with the limits a client can rely on (see services.model_specs)."""

    name: str
    context_window: int | None
    max_output_tokens: int | None
    display_name: str = ""
    # No live route's channel serves the Responses API natively: the gateway translates to Chat
    # Completions and drops the tools only OpenAI can run (Codex's web_search, multi-agent tools).
    translated_responses: bool = False

    @property
    def label(self) -> str:
        return self.display_name or self.name


@dataclass(frozen=True)
class McpServerSpec:
    """One team MCP server this key may call tools on, reached through the gateway at `/mcp/<slug>`."""

    slug: str
    name: str
    description: str = ""

    @property
    def entry(self) -> str:
        """The entry's name in the client's list of servers (its tools show as `teamgw-docs…`)."""
        return MCP_PREFIX + self.slug


@dataclass(frozen=True)
class RenderInput:
    gateway_url: str  # the root, e.g. https://llm.example.com (no /v1, no trailing slash)
    api_key: str | None  # plaintext of a key minted for this download; None: placeholder / env var
    models: tuple[ModelSpec, ...]
    version: str
    default_model: str = ""
    generated_at: str = "2026-01-01T00:00:00.000Z"  # ISO time; passed in so output is reproducible
    mcp_servers: tuple[McpServerSpec, ...] = ()  # mcpservers.access.allowed_servers(key), by name
    # Models that answer Embeddings only (channels.choices.ModelKind): never in a chat model list;
    # clients with a place for them (Continue's `embed` role) list them there.
    embedding_models: tuple[ModelSpec, ...] = ()

    def mcp_url(self, server: McpServerSpec) -> str:
        """The gateway's Streamable HTTP endpoint for one server (mcpservers.access.server_path)."""
        return f"{self.gateway_url}/mcp/{server.slug}"

    @property
    def api_base(self) -> str:
        """Base URL for OpenAI-style clients: they append /chat/completions or /responses."""
        return self.gateway_url + "/v1"

    @property
    def key_or_placeholder(self) -> str:
        return self.api_key or PLACEHOLDER_KEY

    @property
    def primary(self) -> ModelSpec | None:
        """The chosen default model, else the one with the largest known context window."""
        for m in self.models:
            if m.name == self.default_model:
                return m
        if not self.models:
            return None
        return max(self.models, key=lambda m: (m.context_window or 0, [-ord(c) for c in m.name]))

    @property
    def ordered(self) -> tuple[ModelSpec, ...]:
        """The models with the default first: clients that take the first entry then use it."""
        primary = self.primary
        if primary is None:
            return self.models
        return (primary, *(m for m in self.models if m is not primary))

    @property
    def smallest_window(self) -> ModelSpec | None:
        """The listed model with the smallest known window (for clients with one global setting)."""
        known = [m for m in self.models if m.context_window]
        return min(known, key=lambda m: m.context_window or 0) if known else None

    @property
    def fallback_window(self) -> int:
        """The window to write for a model whose window the gateway does not know."""
        smallest = self.smallest_window
        return smallest.context_window if smallest and smallest.context_window else UNKNOWN_WINDOW

    def window_of(self, m: ModelSpec) -> int:
        return m.context_window or self.fallback_window

    def output_of(self, m: ModelSpec) -> int:
        """The model's output cap, else a quarter of the window it is given (the prompt keeps the rest)."""
        return m.max_output_tokens or max(1, self.window_of(m) // 4)

    @property
    def stamp(self) -> str:
        # Not translated: the installer finds its earlier stamp by this English prefix when it merges.
        return f"Team gateway config {self.version}: regenerate it from the portal when this changes."


@dataclass(frozen=True)
class ConfigFile:
    """A file the developer puts on disk. `merge` tells the installer how to combine it with an
    existing file: json (deep merge of objects), toml (our top-level keys and tables replace
    theirs), dotenv (our variables replace theirs), yaml-models (Continue's `models:` list), yaml-keys
    (flat YAML: our top-level keys replace theirs), yaml-list (a file that is one list, llm's: our
    items between markers), toml-items (TOML lists of tables shared with the user's, Vibe's: ours are
    the items named "teamgw"), text (a one-value file, ours whole), or none (shown on the page, never
    installed). install.py and install.ps1 implement each one."""

    name: str
    path: str  # home-relative with forward slashes, e.g. ~/.claude/settings.json
    content: str
    format: str  # json | yaml | toml | dotenv | jsonc | text
    merge: str = "json"
    secret: bool = False  # holds a key: the installer writes it with mode 0600
    windows_path: str = ""  # when it differs from %USERPROFILE% + path
    macos_path: str = ""  # when it differs from `path`
    remove: tuple[str, ...] = ()  # dotted keys a json merge deletes (e.g. a conflicting old key)
    # Dotted keys whose value ours replaces whole instead of deep-merging into (our own model
    # catalogues: a model an admin removed must not linger).
    replace: tuple[str, ...] = ()
    # "dotted.path:id:base" — a list shared with the user's own entries: ours replace theirs with the
    # same id or the same base URL (entries we wrote before); the rest stay.
    lists: tuple[str, ...] = ()
    # Dotted prefixes of what the installer owns by name in a container shared with the user's own
    # entries: "mcpServers.teamgw-" (JSON: keys of `mcpServers` starting with `teamgw-`) or
    # "mcp_servers.teamgw-" (TOML: those tables). A second run drops them before writing ours, so a
    # server no longer allowed disappears; uninstall drops them; the user's entries stay.
    owned: tuple[str, ...] = ()
    # A file of a family named per model (`~/.claude/teamgw-*.json`): this glob, like `path`, finds
    # every member, so uninstall removes the files of models no longer listed too.
    family: str = ""
    note: str = ""
    windows_unconfirmed: bool = False  # the research could not confirm the Windows location

    @property
    def windows(self) -> str:
        return self.windows_path or windows_of(self.path)


def windows_of(path: str) -> str:
    """A home-relative path (`~/.codex/config.toml`) under %USERPROFILE% on Windows."""
    return "%USERPROFILE%\\" + path.removeprefix("~/").replace("/", "\\")


@dataclass(frozen=True)
class Command:
    label: str
    text: str
    secret: bool = False


def before_starting(program: str, text: str) -> Command:
    """What to run in a shell before starting `program` (the command's name, e.g. `claude`)."""
    return Command(_("Before starting %(program)s") % {"program": program}, text)


@dataclass(frozen=True)
class Link:
    label: str
    url: str


@dataclass(frozen=True)
class Probe:
    """Where the doctor finds the settings in an installed file.

    Paths are dotted keys into the parsed file; `*` iterates an object's values or a list's items.
    `model_name` is a key inside each item, or `$key` for the object key itself.
    """

    file: str  # ConfigFile.path
    format: str  # json | toml | yaml (a models list) | yaml-flat (top-level key: value)
    base_url: str  # dotted path to the base URL the client uses; empty: the file holds none
    base_shape: str  # "v1": must end in /v1; "chat": in /v1/chat/completions (Goose); "root": no /v1
    key: str = ""  # dotted path to the key (may be an env reference), empty: from the environment
    key_env: str = ""  # dotted path to the *name* of an env var holding the key (Codex env_key)
    key_var: str = ""  # the env var holding the key, when the file does not name it (Zed)
    key_file: str = ""  # a dotenv file the client reads that var from (~/.qwen/.env)
    models: str = ""  # dotted path to the model items ("." for the file's root, no `*`: one item)
    model_name: str = ""
    model_context: str = ""  # path inside an item to its context window
    model_output: str = ""  # path inside an item to its output limit
    model_base: str = ""  # path inside an item to its base URL (lists that mix ours with the user's)
    # Path inside an item to its roles (Continue): an item whose roles leave out "chat" is no chat
    # model, so the client's own prompt need not fit its window.
    model_roles: str = ""
    name_prefix: str = ""  # stripped from the model name (Aider's `openai/`); names without it are not ours
    mcp: str = ""  # dotted path to the client's MCP servers (an object or TOML tables); ours: MCP_PREFIX
    mcp_url: str = "url"  # key of an MCP entry's URL (Qwen Code's `httpUrl`)
    client: str = ""  # the client's name, for the doctor's messages
    needs: int = 0  # tokens the client's own prompt plus an answer take: a smaller window cannot work
    macos_file: str = ""  # ConfigFile.macos_path, when the client keeps the file elsewhere on macOS
    windows_file: str = ""  # ConfigFile.windows_path, when it is not under %USERPROFILE% as `file` is


@dataclass(frozen=True)
class Rendered:
    files: list[ConfigFile] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown prominently on the page and by the installer
    # Providers the installer writes into a client's own database (CC Switch's cc-switch.db): one per
    # app, {"app_type", "settings_config"}; upserted under PROVIDER_ID, so a second run updates them.
    db_providers: list[dict[str, Any]] = field(default_factory=list)


# What each client sends before the user types a word (system prompt + tool schemas), measured at
# the gateway for a one-line request (upper of two runs; issue 14 and research/client-formats.md),
# and the room left for an answer. A window below their sum fails even on "pong".
ANSWER_ROOM = 2048


def window_need(prompt_tokens: int, answer_floor: int = ANSWER_ROOM) -> int:
    return prompt_tokens + answer_floor if prompt_tokens else 0


def window_warnings(
    label: str, prompt_tokens: int, models: tuple[ModelSpec, ...], answer_floor: int = ANSWER_ROOM
) -> list[str]:
    """One sentence per model whose window cannot hold the client's own prompt and an answer."""
    need = window_need(prompt_tokens, answer_floor)
    out = []
    for m in models:
        if need and m.context_window and m.context_window < need:
            out.append(
                _(
                    "%(model)s: its context window (%(window)s tokens) is too small for %(client)s, which "
                    "sends about %(prompt)s tokens of its own prompt and tools before your first word; "
                    "with room for an answer it needs at least %(need)s. Pick a larger model for %(client)s."
                )
                % {
                    "model": m.name,
                    "window": f"{m.context_window:,}",
                    "client": label,
                    "prompt": f"{prompt_tokens:,}",
                    "need": f"{need:,}",
                }
            )
    return out


def profile_name(model: str) -> str:
    """A file-name-safe profile name for one model (Codex's --profile, Claude Code's --settings file)."""
    return PROFILE_PREFIX + re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-")


PROFILE_PREFIX = PROVIDER_ID + "-"
PROFILES = PROFILE_PREFIX + "*"  # every profile_name: the glob a per-model file family declares


def env_file(inp: RenderInput, variables: dict[str, str], note: str = "") -> ConfigFile:
    """ENV_FILE with our variables (merged by name), a secret when it carries the minted key."""
    lines = [f"# {inp.stamp}"] + [f"export {name}='{value}'" for name, value in variables.items()]
    return ConfigFile(
        "env",
        ENV_FILE,
        "\n".join(lines) + "\n",
        "dotenv",
        merge="dotenv",
        secret=bool(inp.api_key) and inp.api_key in variables.values(),
        note=note
        or _("Load it from your shell profile: add `. %(file)s` to ~/.profile, ~/.bashrc or ~/.zshrc.")
        % {"file": ENV_FILE},
    )


def mcp_servers_file(
    name: str,
    path: str,
    inp: RenderInput,
    kind: str,
    key: str,
    *,
    env_ref: bool = False,
    kind_key: str = "type",
    **extra: Any,
) -> ConfigFile:
    """A JSON file whose `mcpServers` object holds the team's servers (Claude Code, Cline, Copilot
    CLI, Droid, OpenHands): one `teamgw-<slug>` entry of type `kind` each (under `kind_key`), the key
    (`key`) as a bearer; the user's entries stay. `env_ref`: `key` is always a `${VAR}` reference, so
    the file holds no secret."""
    servers = {
        s.entry: {
            kind_key: kind,
            "url": inp.mcp_url(s),
            "headers": {"Authorization": f"Bearer {key}", VERSION_HEADER: inp.version},
            **extra,
        }
        for s in inp.mcp_servers
    }
    return ConfigFile(
        name,
        path,
        dump_json({"mcpServers": servers}),
        "json",
        secret=bool(inp.api_key) and not env_ref,
        owned=(f"mcpServers.{MCP_PREFIX}",),
        windows_unconfirmed=True,
        note=_("Only the team's MCP servers (teamgw-…) are the installer's; your own servers stay."),
    )


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


class _Dumper(yaml.SafeDumper):
    pass


# What a YAML 1.2 core-schema parser (the `yaml` npm package in Continue and others) reads as a
# number, boolean or null but PyYAML's YAML 1.1 resolver leaves bare: `012345678912`, `1234e56`,
# `0o17`, `.5`. A config version hash once came out as `…e…` digits and Continue refused the file.
_YAML12_NON_STRING = re.compile(
    r"""[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+
    |[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    |[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)
    |null|Null|NULL|~|true|True|TRUE|false|False|FALSE""",
    re.VERBOSE,
)


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "'" if _YAML12_NON_STRING.fullmatch(data) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)
