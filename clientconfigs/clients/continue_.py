"""Continue: config.yaml (schema v1) with every allowed model, an optional .env for the key, and
the legacy config.json for old installs (shown, never installed: config.yaml wins when present).

Continue has no "selected model" setting in the file: `cn -p` and a fresh editor use the first
chat model of the list, so the default model is written first (and the installer puts our block
at the top of the user's list). Per-model window and output: `defaultCompletionOptions`.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _

from portal import i18n

from .base import (
    ENV_VAR,
    MCP_PREFIX,
    PROVIDER_NAME,
    VERSION_HEADER,
    ConfigFile,
    ModelSpec,
    Probe,
    Rendered,
    RenderInput,
    dump_json,
    dump_yaml,
    window_need,
    window_warnings,
)

SLUG = "continue"
LABEL = "Continue"
ENV_INDIRECTION = True
SECRET_REF = "${{ secrets.%s }}" % ENV_VAR  # noqa: UP031 - the braces are Continue's syntax
ROLES = ["chat", "edit", "apply", "summarize"]
PROMPT_TOKENS = 1400  # measured: 0.9-1.4k for a one-line request with `cn -p`
# Continue's codebase index cuts files into chunks of 500 tokens by its own count (core/llm/
# constants.ts DEFAULT_MAX_CHUNK_SIZE: "512 - buffer for safety (in case of differing tokenizers)").
CHUNK_TOKENS = 500
CHUNK_FOR_WINDOW = 512


def chunk_tokens(m: ModelSpec) -> int | None:
    """The chunk size Continue's index must use for embedding model `m`: None when its own 500
    fits the model's window, else the window less Continue's margin in proportion (a 256-token
    model gets 250), so no chunk is longer than the server takes (llama.cpp and vLLM refuse it
    with a 400, and the index then holds nothing of that file)."""
    if not m.context_window or m.context_window >= CHUNK_FOR_WINDOW:
        return None
    return max(1, m.context_window * CHUNK_TOKENS // CHUNK_FOR_WINDOW)


def mcp_servers(inp: RenderInput) -> list[dict[str, Any]]:
    """One `teamgw-<slug>` entry per team MCP server; the key comes from the same secret as the
    models' (~/.continue/.env), so config.yaml itself never holds it."""
    headers = {"Authorization": f"Bearer {SECRET_REF}", VERSION_HEADER: inp.version}
    return [
        {
            "name": s.entry,
            "type": "streamable-http",
            "url": inp.mcp_url(s),
            "requestOptions": {"headers": dict(headers)},
        }
        for s in inp.mcp_servers
    ]


def model_entry(inp: RenderInput, m: ModelSpec, roles: list[str]) -> dict[str, Any]:
    """The start of one of our `models:` entries: Continue's OpenAI provider on the gateway, the
    key from its secret, and what the model is for (`roles`)."""
    return {
        "name": f"{m.label} (team gateway)",
        "provider": "openai",
        "model": m.name,
        "apiBase": inp.api_base,
        "apiKey": SECRET_REF,
        "roles": roles,
    }


def legacy_config(inp: RenderInput, models: list[dict[str, Any]]) -> dict[str, Any]:
    """config.json: the chat models, and the first embedding model as its one `embeddingsProvider`."""
    config: dict[str, Any] = {"models": models}
    if inp.embedding_models:
        m = inp.embedding_models[0]
        config["embeddingsProvider"] = {
            "provider": "openai",
            "model": m.name,
            "apiBase": inp.api_base,
            "apiKey": inp.key_or_placeholder,
        }
        if chunk := chunk_tokens(m):
            config["embeddingsProvider"]["maxEmbeddingChunkSize"] = chunk
    return config


def render(inp: RenderInput) -> Rendered:
    headers = {VERSION_HEADER: inp.version}
    models = []
    legacy = []
    for m in inp.ordered:
        entry = model_entry(inp, m, list(ROLES))
        entry["capabilities"] = ["tool_use"]
        options: dict[str, Any] = {}
        if m.context_window:
            options["contextLength"] = m.context_window
        if m.max_output_tokens:
            options["maxTokens"] = m.max_output_tokens
        if options:
            entry["defaultCompletionOptions"] = options
        entry["requestOptions"] = {"headers": dict(headers)}
        models.append(entry)

        old: dict[str, Any] = {
            "title": f"{m.label} (team gateway)",
            "provider": "openai",
            "model": m.name,
            "apiBase": inp.api_base,
            "apiKey": inp.key_or_placeholder,
        }
        if m.context_window:
            old["contextLength"] = m.context_window
        if m.max_output_tokens:
            old["completionOptions"] = {"maxTokens": m.max_output_tokens}
        old["capabilities"] = {"tools": True}
        old["requestOptions"] = {"headers": dict(headers)}
        legacy.append(old)

    for m in inp.embedding_models:
        embed = model_entry(inp, m, ["embed"])
        if m.context_window:  # what the doctor compares with /v1/models; the index does not read it
            embed["defaultCompletionOptions"] = {"contextLength": m.context_window}
        if chunk := chunk_tokens(m):
            embed["embedOptions"] = {"maxChunkSize": chunk}
        embed["requestOptions"] = {"headers": dict(headers)}
        models.append(embed)

    config: dict[str, Any] = {"name": PROVIDER_NAME, "version": "1.0.0", "schema": "v1", "models": models}
    if inp.mcp_servers:
        config["mcpServers"] = mcp_servers(inp)
    yaml_text = f"# {inp.stamp}\n" + dump_yaml(config)
    files = [
        ConfigFile(
            "config.yaml",
            "~/.continue/config.yaml",
            yaml_text,
            "yaml",
            merge="yaml-models",
            owned=(f"mcpServers.{MCP_PREFIX}",),
            note=_(
                "The installer adds these models to your existing models list, and the team's MCP servers "
                "(teamgw-…) to your MCP servers, between team-gateway marker comments; it leaves everything "
                "else as it is."
            ),
        )
    ]
    notes = [_("The key is read from %(var)s: ~/.continue/.env first, then your environment.") % {"var": ENV_VAR}]
    if inp.api_key:
        files.append(
            ConfigFile(
                ".env",
                "~/.continue/.env",
                f"# {inp.stamp}\n{ENV_VAR}={inp.api_key}\n",
                "dotenv",
                merge="dotenv",
                secret=True,
            )
        )
    else:
        notes.append(
            _("Put %(var)s=<your key> in ~/.continue/.env, or export it before starting your editor.")
            % {"var": ENV_VAR}
        )
    files.append(
        ConfigFile(
            _("config.json (legacy)"),
            "~/.continue/config.json",
            dump_json(legacy_config(inp, legacy)),
            "json",
            merge="none",
            secret=bool(inp.api_key),
            note=_(
                "Only for old Continue versions without config.yaml support; ignored when config.yaml "
                "exists. Not installed by the installer."
            ),
        )
    )
    if inp.embedding_models:
        notes.append(
            _(
                "%(models)s: listed for embeddings only (role embed), which Continue's codebase index uses; "
                "pick one in Continue's settings when there are several."
            )
            % {"models": i18n.listing(m.label for m in inp.embedding_models)}
        )
    if len(inp.models) > 1 and inp.primary:
        notes.append(
            _(
                "%(model)s is first in the list, so Continue uses it by default (`cn -p` takes the "
                "first chat model); pick another in the editor's model list. `cn --model` does not choose among "
                "them (Continue CLI 1.5.47 ignores it for a local config.yaml): for the CLI, choose the default "
                "here and install again."
            )
            % {"model": inp.primary.label}
        )
    return Rendered(
        files=files,
        notes=notes,
        warnings=window_warnings(LABEL, PROMPT_TOKENS, inp.models),
        probes=[
            Probe(
                file="~/.continue/config.yaml",
                format="yaml",
                base_url="models.*.apiBase",
                base_shape="v1",
                key="models.*.apiKey",
                models="models.*",
                model_name="model",
                model_context="defaultCompletionOptions.contextLength",
                model_output="defaultCompletionOptions.maxTokens",
                model_base="apiBase",
                model_roles="roles",
                mcp="mcpServers",
                client=LABEL,
                needs=window_need(PROMPT_TOKENS),
            )
        ],
    )
