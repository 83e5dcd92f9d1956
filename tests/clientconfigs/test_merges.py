"""The installer's merge and parse helpers on the edge cases the live-server tests do not reach."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import pytest
import yaml

from clientconfigs.clients import codex, continue_
from clientconfigs.installer import install as inst

from .conftest import SAMPLE_KEY, sample_input


def test_simple_toml_reader_agrees_with_tomllib_on_our_codex_file():
    text = codex.render(sample_input(SAMPLE_KEY)).files[0].content
    assert inst.parse_toml_simple(text) == tomllib.loads(text)


def test_continue_models_follow_a_list_written_without_indentation():
    ours = continue_.render(sample_input(None)).files[0].content
    existing = "name: Mine\nversion: 1\nschema: v1\nmodels:\n- name: Local\n  provider: ollama\n  model: x\n"
    merged = yaml.safe_load(inst.merge_yaml_models(existing, ours))
    assert [m["model"] for m in merged["models"]] == ["qwen3-32b", "llama-3.1-8b", "mystery-model", "x"]


def test_continue_file_without_models_gets_a_list():
    ours = continue_.render(sample_input(None)).files[0].content
    merged = yaml.safe_load(inst.merge_yaml_models("name: Mine\nversion: 1\nschema: v1\n", ours))
    assert merged["name"] == "Mine" and len(merged["models"]) == 3


def test_an_inline_models_list_is_refused_not_mangled():
    ours = continue_.render(sample_input(None)).files[0].content
    with pytest.raises(ValueError):
        inst.merge_yaml_models("name: x\nmodels: []\n", ours)


def test_json_merge_removes_only_keys_we_do_not_set():
    merged = inst.merge_json('{"env": {"A": "1", "B": "2"}, "x": 1}', '{"env": {"B": "3"}}', ["env.A", "env.B"])
    assert merged == '{\n  "env": {\n    "B": "3"\n  },\n  "x": 1\n}\n'


def test_toml_merge_replaces_our_top_level_keys_even_after_tables_in_their_file():
    existing = 'model = "o3"\n[profiles.fast]\nmodel = "o4-mini"\n'
    merged = tomllib.loads(inst.merge_toml(existing, 'model = "qwen"\n\n[model_providers.teamgw]\nname = "x"\n'))
    assert merged["model"] == "qwen"
    assert merged["profiles"]["fast"]["model"] == "o4-mini"  # a key inside their table is theirs


def continue_models(text: str) -> list[tuple[str, str, int | None]]:
    return [
        (m["name"], m["model"], (m.get("defaultCompletionOptions") or {}).get("contextLength"))
        for m in yaml.safe_load(text)["models"]
    ]


def test_continue_reinstall_over_a_fresh_install_keeps_one_entry_per_model_with_the_new_window():
    first = inst.merge_yaml_models(None, continue_.render(sample_input(None)).files[0].content)
    assert inst.BEGIN in first  # a fresh install writes the markers too, so the next one finds its block
    smaller = sample_input(None).models[0].__class__("qwen3-32b", 16384, 4096, "Qwen3 32B")
    changed = replace(sample_input(None), models=(smaller, *sample_input(None).models[1:]), version="fedcba987654")
    second = inst.merge_yaml_models(first, continue_.render(changed).files[0].content)
    assert continue_models(second) == [
        ("Qwen3 32B (team gateway)", "qwen3-32b", 16384),
        ("llama-3.1-8b (team gateway)", "llama-3.1-8b", 131072),
        ("mystery-model (team gateway)", "mystery-model", None),
    ]
    assert second.count("# Team gateway config") == 1 and "fedcba987654" in second and "0123456789ab" not in second


def test_continue_entries_written_without_markers_are_recognised_by_name_and_base_url():
    ours = continue_.render(sample_input(None)).files[0].content
    # What the old installer wrote on a fresh install (no markers), plus the user's own entries: one
    # on another server, one of their own on our gateway under a name we never write.
    old = ours.replace("contextLength: 32768", "contextLength: 512")
    old = old.replace(
        "models:\n",
        "models:\n- name: Local\n  provider: ollama\n  model: llama3\n"
        "- name: my own alias\n  provider: openai\n  model: qwen3-32b\n  apiBase: https://llm.example.com/v1\n",
    )
    merged = inst.merge_yaml_models(old, ours)
    names = [m[0] for m in continue_models(merged)]
    assert names == [
        "Qwen3 32B (team gateway)",
        "llama-3.1-8b (team gateway)",
        "mystery-model (team gateway)",
        "Local",
        "my own alias",
    ]
    assert "contextLength: 512" not in merged
    assert inst.merge_yaml_models(merged, ours) == merged  # a third install changes nothing


def test_continue_default_model_is_first_in_the_list():
    inp = replace(sample_input(None), default_model="llama-3.1-8b")
    names = [m[1] for m in continue_models(continue_.render(inp).files[0].content)]
    assert names[0] == "llama-3.1-8b"


def test_json_merge_replaces_our_catalogue_so_a_removed_model_does_not_linger():
    old = '{"providers": {"p": {"models": {"gone": {"id": "gone"}, "kept": {"id": "kept", "x": 1}}}}, "mine": 1}'
    new = '{"providers": {"p": {"models": {"kept": {"id": "kept"}}}}}'
    merged = json.loads(inst.merge_json(old, new, replace=["providers.p.models"]))
    assert merged == {"providers": {"p": {"models": {"kept": {"id": "kept"}}}}, "mine": 1}


def test_json_merge_of_a_shared_list_replaces_our_entries_and_keeps_the_users():
    old = json.dumps(
        {"m": {"openai": [{"id": "a", "baseUrl": "https://gw/v1"}, {"id": "b", "baseUrl": "https://mine/v1"}]}}
    )
    new = json.dumps({"m": {"openai": [{"id": "c", "baseUrl": "https://gw/v1"}]}})
    merged = json.loads(inst.merge_json(old, new, lists=["m.openai:id:baseUrl"]))
    assert merged["m"]["openai"] == [{"id": "c", "baseUrl": "https://gw/v1"}, {"id": "b", "baseUrl": "https://mine/v1"}]


def test_toml_merge_replaces_our_version_comment_instead_of_piling_it_up():
    first = codex.render(sample_input(None)).files[0].content
    again = inst.merge_toml(inst.merge_toml(first, first), first.replace("0123456789ab", "fedcba987654"))
    assert again.count("# Team gateway config") == 1 and "0123456789ab" not in again


def llm_models(text: str) -> list[str]:
    return [m["model_id"] for m in yaml.safe_load(text)]


def test_llm_models_join_the_users_own_list_and_a_second_run_replaces_ours():
    from clientconfigs.clients import llm_cli

    ours = llm_cli.render(sample_input(SAMPLE_KEY)).files[0].content
    theirs = "# my models\n- model_id: local\n  model_name: qwen\n  api_base: http://localhost:8080/v1\n"
    once = inst.merge_yaml_list(theirs, ours)
    assert llm_models(once) == ["local", "teamgw/qwen3-32b", "teamgw/llama-3.1-8b", "teamgw/mystery-model"]
    fewer = llm_cli.render(replace(sample_input(SAMPLE_KEY), models=sample_input(None).models[:1])).files[0].content
    twice = inst.merge_yaml_list(once, fewer)
    assert llm_models(twice) == ["local", "teamgw/qwen3-32b"]  # the model an admin removed is gone
    assert twice.startswith("# my models\n") and twice.count(inst.BEGIN) == 1
    assert llm_models(inst.merge_yaml_list(None, ours)) == llm_models(ours)


def test_llm_entries_copied_from_the_page_without_markers_are_replaced_not_doubled():
    from clientconfigs.clients import llm_cli

    ours = llm_cli.render(sample_input(None)).files[0].content
    pasted = "- model_id: mine\n  model_name: m\n" + ours.split("\n", 1)[1]  # no markers, no stamp line
    assert llm_models(inst.merge_yaml_list(pasted, ours)) == ["mine", *llm_models(ours)]


def test_an_inline_llm_list_is_refused_not_mangled():
    from clientconfigs.clients import llm_cli

    ours = llm_cli.render(sample_input(None)).files[0].content
    with pytest.raises(ValueError):
        inst.merge_yaml_list("[{model_id: x, model_name: y}]\n", ours)
    with pytest.raises(ValueError):
        inst.merge_yaml_list("models:\n- model_id: x\n", ours)


def test_goose_config_keeps_the_users_extensions_and_replaces_only_provider_and_model():
    from clientconfigs.clients import goose

    ours = next(f for f in goose.render(sample_input(None)).files if f.name == "config.yaml").content
    theirs = (
        "GOOSE_PROVIDER: openai\nGOOSE_MODEL: gpt-4o\nextensions:\n  developer:\n    enabled: true\n    type: builtin\n"
    )
    once = inst.merge_yaml_keys(theirs, ours)
    twice = yaml.safe_load(inst.merge_yaml_keys(once, ours))
    assert twice == {
        "GOOSE_PROVIDER": "custom_teamgw",
        "GOOSE_MODEL": "qwen3-32b",
        "extensions": {"developer": {"enabled": True, "type": "builtin"}},
    }
    assert inst.merge_yaml_keys(once, ours).count("Team gateway config") == 1
