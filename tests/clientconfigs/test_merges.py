"""The installer's merge and parse helpers on the edge cases the live-server tests do not reach."""

from __future__ import annotations

import tomllib

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
