"""Generated files parse, pass the clients' own validators, and follow each client's URL rules."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from dataclasses import replace

import pytest
import yaml
from django.utils import translation

from clientconfigs.clients import CLIENTS
from clientconfigs.clients.base import ENV_VAR, PLACEHOLDER_KEY, ModelSpec
from tests.services import unavailable

from .conftest import SAMPLE_KEY, run_node, sample_input

PARSERS = {"json": json.loads, "jsonc": json.loads, "yaml": yaml.safe_load, "toml": tomllib.loads, "text": str.strip}


def files(slug, inp):
    return {f.name: f for f in CLIENTS[slug].render(inp).files}


@pytest.mark.parametrize("slug", sorted(CLIENTS))
def test_every_generated_file_parses_in_its_format(slug, variant):
    _, inp = variant
    for f in CLIENTS[slug].render(inp).files:
        if f.format == "dotenv":
            lines = [ln for ln in f.content.splitlines() if ln and not ln.startswith("#")]
            assert all("=" in ln for ln in lines)
            continue
        parsed = PARSERS[f.format](f.content)
        assert parsed, f.name


# Files with no room for it: Cline's flat key store holding only the key, and the one-line VS Code
# setting that points Roo at its (stamped) import file.
# Strict JSON read by clients with no header, comment or free-text field for it: Aider's litellm
# metadata (its .aider.conf.yml beside it is stamped), Zed's and Crush's settings (whose model
# entries are checked against the server by the doctor instead).
UNSTAMPED = {
    ("cline", "secrets.json"),
    ("roo", "VS Code settings.json"),
    ("aider", ".aider.model.metadata.json"),
    ("zed", "settings.json"),
    ("crush", "crush.json"),
    ("llm", "keys.json"),
    ("llm", "default_model.txt"),
    ("pi", "settings.json"),
    ("jetbrains", "teamgw.json"),
}


@pytest.mark.parametrize("slug", sorted(CLIENTS))
def test_every_file_carries_the_version_stamp(slug, variant):
    _, inp = variant
    for f in CLIENTS[slug].render(inp).files:
        if (slug, f.name) not in UNSTAMPED:
            assert inp.version in f.content, f.name
    for link in CLIENTS[slug].render(inp).links:
        assert "config=" in link.url


def test_placeholder_files_never_contain_a_key():
    inp = sample_input(None)
    for slug in CLIENTS:
        rendered = CLIENTS[slug].render(inp)
        for f in rendered.files:
            assert SAMPLE_KEY not in f.content
            assert "gp-" not in f.content, (slug, f.name)


def test_files_with_a_minted_key_are_marked_secret_and_others_are_not():
    inp = sample_input(SAMPLE_KEY)
    for slug in CLIENTS:
        for f in CLIENTS[slug].render(inp).files:
            assert f.secret == (SAMPLE_KEY in f.content), (slug, f.name)


@pytest.fixture(scope="module")
def continue_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("continue")
    for name, key in (("minted.yaml", SAMPLE_KEY), ("placeholder.yaml", None)):
        (folder / name).write_text(files("continue", sample_input(key))["config.yaml"].content)
    # Config versions are 12 hex digits of a hash; some read as numbers in YAML 1.2 (Continue
    # refused `1234567e8901` in CI: "models.0: Invalid input").
    for name, version in (("exponent-version.yaml", "1234567e8901"), ("octal-like-version.yaml", "012345678912")):
        inp = replace(sample_input(SAMPLE_KEY), version=version)
        (folder / name).write_text(files("continue", inp)["config.yaml"].content)
    # With an embedding model: Continue's `embed` role, beside the chat models.
    inp = replace(sample_input(SAMPLE_KEY), embedding_models=(ModelSpec("bge-m3", 8192, None, "BGE M3"),))
    (folder / "embedding.yaml").write_text(files("continue", inp)["config.yaml"].content)
    small = replace(inp, embedding_models=(ModelSpec("all-minilm", 256, None),))  # embedOptions.maxChunkSize
    (folder / "embedding-small.yaml").write_text(files("continue", small)["config.yaml"].content)
    bad = {
        "name": "x",
        "version": "1",
        "schema": "v1",
        "models": [
            {
                "name": "m",
                "provider": "openai",
                "model": "m",
                "defaultCompletionOptions": {"contextLength": 8192, "maxTokens": 8000},
            }
        ],
    }
    (folder / "too-close.yaml").write_text(yaml.safe_dump(bad))
    return run_node("continue_yaml.mjs", sorted(folder.iterdir()))


@pytest.mark.parametrize(
    "name", ["minted", "placeholder", "exponent-version", "octal-like-version", "embedding", "embedding-small"]
)
def test_continue_config_passes_continues_own_validator(continue_results, name):
    result = continue_results[f"{name}.yaml"]
    assert result["ok"], result["issues"]


def test_continue_validator_catches_a_max_tokens_too_close_to_the_context(continue_results):
    """The validator really runs: a config leaving < 1000 tokens of input is reported."""
    result = continue_results["too-close.yaml"]
    assert not result["ok"]
    assert "8000" in result["issues"][0]["message"]


def test_continue_uses_the_secret_reference_and_v1_base():
    inp = sample_input(None)
    config = yaml.safe_load(files("continue", inp)["config.yaml"].content)
    assert config["schema"] == "v1"
    for model in config["models"]:
        assert model["apiBase"] == "https://llm.example.com/v1"
        assert model["apiKey"] == "${{ secrets.%s }}" % ENV_VAR  # noqa: UP031
    qwen = next(m for m in config["models"] if m["model"] == "qwen3-32b")
    assert qwen["defaultCompletionOptions"] == {"contextLength": 32768, "maxTokens": 8192}


def test_an_embedding_model_is_continues_embed_role_and_in_no_clients_chat_list():
    """An embedding model is no chat model: Continue lists it for its codebase index only (and
    config.json's one `embeddingsProvider`); no client's file offers it for a conversation."""
    inp = replace(sample_input(SAMPLE_KEY), embedding_models=(ModelSpec("bge-m3", 8192, None, "BGE M3"),))
    rendered = CLIENTS["continue"].render(inp)
    config = yaml.safe_load(files("continue", inp)["config.yaml"].content)
    [embed] = [m for m in config["models"] if m["model"] == "bge-m3"]
    assert embed["roles"] == ["embed"] and "capabilities" not in embed
    assert embed["defaultCompletionOptions"] == {"contextLength": 8192}  # what the doctor compares
    assert all("embed" not in m["roles"] for m in config["models"] if m["model"] != "bge-m3")
    legacy = json.loads(files("continue", inp)["config.json (legacy)"].content)
    assert legacy["embeddingsProvider"]["model"] == "bge-m3"
    assert "bge-m3" not in [m["model"] for m in legacy["models"]]
    assert any("BGE M3: listed for embeddings only" in n for n in rendered.notes)
    for slug, module in CLIENTS.items():
        if slug == "continue":
            continue
        for f in module.render(inp).files:
            assert "bge-m3" not in f.content, (slug, f.name)


def test_continues_index_cuts_chunks_a_small_embedding_model_takes():
    """Continue's codebase index cuts files into 500-token chunks unless told otherwise; a model
    with a 256-token window would refuse every one (llama.cpp: "input is too large to process").
    The chunk size is written only where Continue's own would not fit, in both file generations."""
    models = (ModelSpec("all-minilm", 256, None), ModelSpec("bge-m3", 8192, None), ModelSpec("e5", 512, None))
    for first in models:
        inp = replace(sample_input(SAMPLE_KEY), embedding_models=(first, *(m for m in models if m is not first)))
        config = yaml.safe_load(files("continue", inp)["config.yaml"].content)
        chunks = {m["model"]: m.get("embedOptions") for m in config["models"] if m["roles"] == ["embed"]}
        assert chunks == {"all-minilm": {"maxChunkSize": 250}, "bge-m3": None, "e5": None}
        legacy = json.loads(files("continue", inp)["config.json (legacy)"].content)["embeddingsProvider"]
        assert legacy.get("maxEmbeddingChunkSize") == (250 if first.name == "all-minilm" else None), legacy


@pytest.fixture(scope="module")
def cline_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cline")
    for name, key in (("minted.json", SAMPLE_KEY), ("placeholder.json", None)):
        (folder / name).write_text(files("cline", sample_input(key))["providers.json"].content)
    bad = json.loads(files("cline", sample_input(SAMPLE_KEY))["providers.json"].content)
    bad["providers"]["openai-compatible"]["settings"]["baseUrl"] = "not a url"
    (folder / "bad-url.json").write_text(json.dumps(bad))
    return run_node("cline_providers.mjs", sorted(folder.iterdir()))


@pytest.mark.parametrize("name", ["minted", "placeholder"])
def test_cline_providers_json_passes_cline_core_schema(cline_results, name):
    result = cline_results[f"{name}.json"]
    assert result["ok"], result["issues"]


def test_cline_core_schema_rejects_a_bad_base_url(cline_results):
    result = cline_results["bad-url.json"]
    assert not result["ok"]
    assert any("baseUrl" in issue["path"] for issue in result["issues"])


def test_cline_writes_both_storage_generations_and_no_vscode_settings():
    names = set(files("cline", sample_input(SAMPLE_KEY)))
    assert names == {"providers.json", "models.json", "globalState.json", "secrets.json", "cline_mcp_settings.json"}
    for f in CLIENTS["cline"].render(sample_input(SAMPLE_KEY)).files:
        assert "cline.openaiBaseUrl" not in f.content and "cline.apiKey" not in f.content


@pytest.fixture(scope="module")
def claude_results(tmp_path_factory):
    """SchemaStore's claude-code-settings (npm types generated from the schema) via tsc, in one process."""
    folder = tmp_path_factory.mktemp("claude")
    for name, key in (("minted.json", SAMPLE_KEY), ("placeholder.json", None)):
        (folder / name).write_text(files("claude-code", sample_input(key))["settings.json"].content)
    good = json.loads(files("claude-code", sample_input(SAMPLE_KEY))["settings.json"].content)
    (folder / "number-in-env.json").write_text(json.dumps({**good, "env": {**good["env"], "X": 32768}}))
    # The schema allows unknown top-level keys, but known ones are typed.
    (folder / "wrong-type.json").write_text(json.dumps({**good, "cleanupPeriodDays": "soon", "model": 42}))
    return run_node("claude_settings.mjs", sorted(folder.iterdir()))


@pytest.mark.parametrize("name", ["minted", "placeholder"])
def test_claude_code_settings_validate_against_the_schemastore_schema(claude_results, name):
    result = claude_results[f"{name}.json"]
    assert result["ok"], result["issues"]


@pytest.mark.parametrize("name", ["number-in-env", "wrong-type"])
def test_the_schemastore_check_rejects_invalid_settings(claude_results, name):
    assert not claude_results[f"{name}.json"]["ok"]


def test_claude_code_uses_the_root_url_and_only_the_auth_token(variant):
    name, inp = variant
    env = json.loads(files("claude-code", inp)["settings.json"].content)["env"]
    assert env["ANTHROPIC_BASE_URL"] == "https://llm.example.com"
    assert "ANTHROPIC_API_KEY" not in env
    assert all(isinstance(v, str) for v in env.values())  # the schema types every env value as a string
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    for alias in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
    ):
        assert env[alias] == "qwen3-32b"
    assert ("ANTHROPIC_AUTH_TOKEN" in env) == (name == "minted")


def test_codex_defines_its_own_provider_with_responses_and_v1():
    config = tomllib.loads(files("codex", sample_input(None))["config.toml"].content)
    assert "openai" not in config["model_providers"]
    assert config["model_provider"] in config["model_providers"]
    provider = config["model_providers"][config["model_provider"]]
    assert provider["wire_api"] == "responses"
    assert provider["base_url"] == "https://llm.example.com/v1"
    assert provider["env_key"] == ENV_VAR
    assert config["model_context_window"] == 32768


def test_opencode_and_roo_carry_each_models_limits():
    inp = sample_input(None)
    oc = json.loads(files("opencode", inp)["opencode.json"].content)
    provider = oc["provider"]["teamgw"]
    assert provider["options"]["baseURL"] == "https://llm.example.com/v1"
    assert provider["options"]["apiKey"] == "{env:%s}" % ENV_VAR  # noqa: UP031
    assert provider["models"]["llama-3.1-8b"]["limit"] == {"context": 131072, "output": 4096}
    assert "limit" not in provider["models"]["mystery-model"]
    roo = json.loads(files("roo", inp)["roo-settings.json"].content)["providerProfiles"]
    qwen = roo["apiConfigs"][roo["currentApiConfigName"]]
    assert qwen["openAiModelId"] == "qwen3-32b"
    assert qwen["openAiCustomModelInfo"]["contextWindow"] == 32768
    assert qwen["openAiApiKey"] == PLACEHOLDER_KEY


def dotenv(text: str) -> dict[str, str]:
    """The variables a shell gets from sourcing the file (single-quoted values only)."""
    return dict(re.findall(r"(?m)^export (\w+)='([^']*)'$", text))


def droid_id(entry: dict) -> str:
    """The id Droid 0.225 gives a custom model (its `custom:${displayName, spaces as dashes}-${n}`)."""
    return "custom:" + re.sub(r"\s+", "-", entry["displayName"].strip()) + "-0"


def _selected(slug: str, inp) -> str:
    """The model each client actually starts with, read the way the client reads its file."""
    out = {f.name: f.content for f in CLIENTS[slug].render(inp).files}
    if slug == "continue":
        return yaml.safe_load(out["config.yaml"])["models"][0]["model"]  # `cn` and the editor take the first
    if slug == "claude-code":
        return json.loads(out["settings.json"])["env"]["ANTHROPIC_MODEL"]
    if slug == "codex":
        return tomllib.loads(out["config.toml"])["model"]
    if slug == "cline":
        return json.loads(out["providers.json"])["providers"]["openai-compatible"]["settings"]["model"]
    if slug in ("opencode", "kilo"):
        return json.loads(out[f"{slug}.json"])["model"].split("/", 1)[1]
    if slug == "roo":
        profiles = json.loads(out["roo-settings.json"])["providerProfiles"]
        return profiles["apiConfigs"][profiles["currentApiConfigName"]]["openAiModelId"]
    if slug == "qwen-code":
        return json.loads(out["settings.json"])["model"]["name"]
    if slug == "aider":
        return yaml.safe_load(out[".aider.conf.yml"])["model"].removeprefix("openai/")
    if slug == "crush":
        return json.loads(out["crush.json"])["models"]["large"]["model"]
    if slug == "zed":
        return json.loads(out["settings.json"])["agent"]["default_model"]["model"]
    if slug == "goose":
        assert (
            json.loads(out["custom_teamgw.json"])["models"][0]["name"]
            == yaml.safe_load(out["config.yaml"])["GOOSE_MODEL"]
        )
        return yaml.safe_load(out["config.yaml"])["GOOSE_MODEL"]
    if slug == "llm":
        return out["default_model.txt"].strip().removeprefix("teamgw/")
    if slug == "copilot-cli":
        return dotenv(out["env"])["COPILOT_MODEL"]
    if slug == "pi":
        assert json.loads(out["settings.json"])["defaultProvider"] == "teamgw"
        return json.loads(out["settings.json"])["defaultModel"]
    if slug == "factory-droid":
        data = json.loads(out["settings.json"])
        [chosen] = [m for m in data["customModels"] if droid_id(m) == data["sessionDefaultSettings"]["model"]]
        return chosen["model"]
    if slug == "mistral-vibe":
        config = tomllib.loads(out["config.toml"])
        return next(m["name"] for m in config["models"] if m["alias"] == config["active_model"])
    if slug == "openhands":
        return json.loads(out["agent_settings.json"])["llm"]["model"].removeprefix("openai/")
    if slug == "jetbrains":
        return json.loads(out["teamgw.json"])["id"]
    raise AssertionError(f"no reader for {slug}")


@pytest.mark.parametrize("slug", sorted(set(CLIENTS) - {"cc-switch"}))
@pytest.mark.parametrize("default", ["llama-3.1-8b", "mystery-model"])
def test_the_chosen_default_model_is_the_one_each_client_uses(slug, default):
    inp = replace(sample_input(None), default_model=default)
    assert _selected(slug, inp) == default


def test_codex_file_says_when_tools_are_dropped_for_a_chat_only_upstream():
    chat_only = replace(sample_input(None).models[0], translated_responses=True)
    inp = replace(sample_input(None), models=(chat_only, *sample_input(None).models[1:]))
    text = CLIENTS["codex"].render(inp).files[0].content
    assert text.splitlines()[1].startswith("# Team gateway note: qwen3-32b is served through Chat Completions")
    assert "web_search" in text.splitlines()[1]
    assert "Team gateway note" not in CLIENTS["codex"].render(sample_input(None)).files[0].content
    assert tomllib.loads(text)["analytics"] == {"enabled": False}
    with translation.override("zh-hans"):  # the page's note speaks the reader's language, the file stays English
        rendered = CLIENTS["codex"].render(inp)
    assert rendered.files[0].content == text
    assert "qwen3-32b 经由 Chat Completions 提供" in rendered.notes[-1]


# Every Model field charmbracelet/crush's schema.json lists as required (Crush itself cannot be
# installed here: its npm package downloads the binary from GitHub).
CRUSH_MODEL_FIELDS = {
    "id",
    "name",
    "cost_per_1m_in",
    "cost_per_1m_out",
    "cost_per_1m_in_cached",
    "cost_per_1m_out_cached",
    "context_window",
    "default_max_tokens",
    "can_reason",
    "supports_attachments",
}


def test_crush_file_has_every_required_model_field_and_its_roles_point_at_listed_models(variant):
    _, inp = variant
    data = json.loads(files("crush", inp)["crush.json"].content)
    provider = data["providers"]["teamgw"]
    assert provider["type"] == "openai-compat" and provider["base_url"] == inp.api_base
    assert provider["discover_models"] is False
    ids = [m["id"] for m in provider["models"]]
    assert all(set(m) == CRUSH_MODEL_FIELDS for m in provider["models"])
    for role in ("large", "small"):
        assert data["models"][role]["provider"] == "teamgw" and data["models"][role]["model"] in ids
        assert 0 < data["models"][role]["max_tokens"] <= 200000  # the schema's maximum
    assert {m["id"]: m["context_window"] for m in provider["models"]}["qwen3-32b"] == 32768
    if inp.api_key is None:
        assert provider["api_key"] == "$" + ENV_VAR


def test_zed_uses_the_window_as_max_tokens_and_stores_the_key_only_for_mcp_servers(variant):
    _, inp = variant
    settings = files("zed", inp)["settings.json"]
    data = json.loads(settings.content)
    provider = data["language_models"]["openai_compatible"]["teamgw"]
    assert provider["api_url"] == inp.api_base
    by_name = {m["name"]: m for m in provider["available_models"]}
    assert by_name["qwen3-32b"]["max_tokens"] == 32768 and by_name["qwen3-32b"]["max_output_tokens"] == 8192
    assert by_name["llama-3.1-8b"]["max_tokens"] == 131072
    # The models' key comes from TEAMGW_API_KEY; Zed sends an MCP server's headers as written.
    servers = data.pop("context_servers")
    assert SAMPLE_KEY not in json.dumps(data)
    assert settings.secret == bool(inp.api_key)
    without = files("zed", replace(inp, mcp_servers=()))["settings.json"]
    assert "context_servers" not in json.loads(without.content) and not without.secret
    assert SAMPLE_KEY not in without.content
    # Zed's ContextServerSettingsContent is untagged: an entry with `command` is a local process, one
    # with `url` (and only the Http variant's fields) a remote server.
    for s in inp.mcp_servers:
        entry = servers[s.entry]
        assert set(entry) == {"url", "headers"}
        assert entry["url"] == f"{inp.gateway_url}/mcp/{s.slug}"
        assert entry["headers"]["Authorization"] == f"Bearer {inp.api_key or PLACEHOLDER_KEY}"
    assert settings.owned == ("context_servers.teamgw-",)


def test_roo_mcp_servers_are_streamable_http_entries_in_its_global_storage(variant):
    """Roo's McpHub schema: a `url` entry must say `type` sse or streamable-http; headers are strings."""
    _, inp = variant
    f = files("roo", inp)["mcp_settings.json"]
    storage = "globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json"
    assert f.path == "~/.config/Code/User/" + storage
    assert f.macos_path == "~/Library/Application Support/Code/User/" + storage
    assert f.windows == "%APPDATA%\\Code\\User\\" + storage.replace("/", "\\")
    servers = json.loads(f.content)["mcpServers"]
    assert sorted(servers) == ["teamgw-docs", "teamgw-tracker"]
    for entry in servers.values():
        assert entry["type"] == "streamable-http" and entry["url"].startswith("https://llm.example.com/mcp/")
        assert all(isinstance(v, str) for v in entry["headers"].values())
        assert entry["headers"]["Authorization"] == f"Bearer {inp.api_key or PLACEHOLDER_KEY}"
        assert not {"command", "args", "env"} & set(entry)
    assert f.secret == bool(inp.api_key) and f.owned == ("mcpServers.teamgw-",)
    assert "mcp_settings.json" not in files("roo", replace(inp, mcp_servers=()))


def test_clients_with_one_global_window_list_only_the_default_and_the_page_says_so():
    inp = sample_input(SAMPLE_KEY)
    claude = CLIENTS["claude-code"].render(inp)
    env = json.loads(claude.files[0].content)["env"]
    assert {env[k] for k in env if k.endswith("_MODEL")} == {"qwen3-32b"}
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert any("one context-window setting for all models" in n for n in claude.notes)
    cline = CLIENTS["cline"].render(inp)
    catalog = json.loads(cline.files[1].content)["providers"]["openai-compatible"]["models"]
    assert {k: v["contextWindow"] for k, v in catalog.items() if "contextWindow" in v} == {
        "qwen3-32b": 32768,
        "llama-3.1-8b": 131072,
    }


def test_window_warnings_name_the_client_and_the_model_below_its_prompt():
    small = replace(sample_input(None).models[0], name="tiny-llama", context_window=4096, max_output_tokens=1024)
    inp = replace(sample_input(None), models=(small, *sample_input(None).models[1:]), default_model="tiny-llama")
    for slug, label in (("claude-code", "Claude Code"), ("codex", "Codex CLI"), ("qwen-code", "Qwen Code")):
        [warning] = CLIENTS[slug].render(inp).warnings
        assert warning.startswith("tiny-llama: its context window (4,096 tokens) is too small for " + label)
    assert CLIENTS["continue"].render(inp).warnings == []  # Continue's own prompt is about 1.4k
    assert CLIENTS["aider"].render(inp).warnings == []


# What llm itself makes of the files (its own loader in llm/default_plugins/openai_models.py).
LLM_PROBE = """
import json, llm
models = {m.model_id: m for m in llm.get_models()}
ours = [i for i in models if i.startswith("teamgw/")]
m = llm.get_model(llm.get_default_model())
print(json.dumps({"ours": ours, "default": m.model_id, "name": m.model_name, "base": m.api_base,
    "tools": m.supports_tools, "headers": m.headers, "key": m.get_key(), "mine": "local" in models}))
"""


def test_llm_reads_our_models_its_key_and_default_through_its_own_loader(tmp_path):
    folder = os.environ.get("PORTAL_LLM", "")
    python = os.path.join(folder, "bin", "python")
    if not folder or not os.path.exists(python):
        unavailable("PORTAL_LLM does not point at the pinned llm installed by .ci/run")
    from clientconfigs.installer import install as inst

    mine = "- model_id: local\n  model_name: qwen\n  api_base: http://localhost:8080/v1\n"
    (tmp_path / "extra-openai-models.yaml").write_text(mine)
    for f in CLIENTS["llm"].render(replace(sample_input(SAMPLE_KEY), default_model="llama-3.1-8b")).files:
        target = tmp_path / f.path.rsplit("/", 1)[-1]
        old = target.read_text() if target.exists() else None
        target.write_text(inst.MERGES[f.merge](old, {"content": f.content}))
    env = {"PATH": "/usr/bin:/bin", "LLM_USER_PATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([python, "-c", LLM_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["ours"] == ["teamgw/llama-3.1-8b", "teamgw/qwen3-32b", "teamgw/mystery-model"]  # default first
    assert seen["mine"]  # the user's own entry still loads
    assert (seen["default"], seen["name"]) == ("teamgw/llama-3.1-8b", "llama-3.1-8b")
    assert seen["base"] == "https://llm.example.com/v1" and seen["tools"] is True
    assert seen["key"] == SAMPLE_KEY and seen["headers"] == {"X-Gateway-Config-Version": "0123456789ab"}


# Junie's model-profile fields as JetBrains' own junie-local model files spell them (`junieConfig`):
# Junie's CLI installs from JetBrains' site and AI Assistant is an IDE plugin, so neither runs here.
JUNIE_FIELDS = {"id", "displayName", "providerName", "baseUrl", "apiType", "apiKey", "maxContextLength"}


def test_junie_profile_uses_junies_fields_a_full_endpoint_and_the_default_models_window(variant):
    _, inp = variant
    rendered = CLIENTS["jetbrains"].render(inp)
    [f] = rendered.files
    assert f.path == "~/.junie/models/teamgw.json"  # the profile `custom:teamgw`
    profile = json.loads(f.content)
    assert set(profile) == JUNIE_FIELDS
    assert profile["apiType"] == "OpenAICompletion"
    assert profile["baseUrl"] == inp.api_base + "/chat/completions"  # Junie appends nothing
    assert (profile["id"], profile["maxContextLength"]) == ("qwen3-32b", 32768)
    assert profile["apiKey"] == (inp.api_key or "${%s}" % ENV_VAR)  # noqa: UP031
    assert any(inp.api_base in n and "AI Assistant" in n for n in rendered.notes)


OPENHANDS_PROBE = """
import json
from openhands_cli.mcp.mcp_utils import list_enabled_servers
print(json.dumps({n: s.model_dump(mode="json", exclude_none=True) for n, s in list_enabled_servers().items()}))
"""


def test_openhands_reads_our_mcp_servers_and_skips_the_users_disabled_one_through_its_own_loader(tmp_path):
    folder = os.environ.get("PORTAL_OPENHANDS", "")
    python = os.path.join(folder, "bin", "python")
    if not folder or not os.path.exists(python):
        unavailable("PORTAL_OPENHANDS does not point at the pinned OpenHands CLI installed by .ci/run")
    from clientconfigs.installer import install as inst

    mine = {"command": "my-mcp", "args": [], "enabled": False}
    (tmp_path / "mcp.json").write_text(json.dumps({"mcpServers": {"my-own": mine}}))
    f = files("openhands", sample_input(SAMPLE_KEY))["mcp.json"]
    merged = inst.MERGES[f.merge]((tmp_path / "mcp.json").read_text(), {"content": f.content, "owned": f.owned})
    (tmp_path / "mcp.json").write_text(merged)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPENHANDS_PERSISTENCE_DIR": str(tmp_path)}
    done = subprocess.run([python, "-c", OPENHANDS_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert sorted(seen) == ["teamgw-docs", "teamgw-tracker"]  # the user's switched-off server stays off
    assert seen["teamgw-docs"]["url"] == "https://llm.example.com/mcp/docs"
    assert seen["teamgw-docs"]["transport"] == "http"
    assert seen["teamgw-docs"]["headers"]["Authorization"] == f"Bearer {SAMPLE_KEY}"
    assert json.loads(merged)["mcpServers"]["my-own"] == mine and f.secret
