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


def merge_continue(existing: str | None, inp) -> str:
    """Continue's config.yaml merged as the installer does it, with its declared owned lists."""
    f = continue_.render(inp).files[0]
    return inst.MERGES[f.merge](existing, {"content": f.content, "owned": f.owned})


def test_simple_toml_reader_agrees_with_tomllib_on_our_codex_file():
    text = codex.render(sample_input(SAMPLE_KEY)).files[0].content
    assert inst.parse_toml_simple(text) == tomllib.loads(text)


def test_continue_models_follow_a_list_written_without_indentation():
    existing = "name: Mine\nversion: 1\nschema: v1\nmodels:\n- name: Local\n  provider: ollama\n  model: x\n"
    merged = yaml.safe_load(merge_continue(existing, sample_input(None)))
    assert [m["model"] for m in merged["models"]] == ["qwen3-32b", "llama-3.1-8b", "mystery-model", "x"]


def test_continue_file_without_models_gets_a_list():
    merged = yaml.safe_load(merge_continue("name: Mine\nversion: 1\nschema: v1\n", sample_input(None)))
    assert merged["name"] == "Mine" and len(merged["models"]) == 3


def test_an_inline_models_list_is_refused_not_mangled():
    with pytest.raises(ValueError):
        merge_continue("name: x\nmodels: []\n", sample_input(None))


def test_json_merge_removes_only_keys_we_do_not_set():
    merged = inst.merge_json('{"env": {"A": "1", "B": "2"}, "x": 1}', '{"env": {"B": "3"}}', ["env.A", "env.B"])
    assert merged == '{"env": {"B": "3"}, "x": 1}'  # the file's own one-line layout stays


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
    first = merge_continue(None, sample_input(None))
    assert inst.BEGIN in first  # a fresh install writes the markers too, so the next one finds its block
    smaller = sample_input(None).models[0].__class__("qwen3-32b", 16384, 4096, "Qwen3 32B")
    changed = replace(sample_input(None), models=(smaller, *sample_input(None).models[1:]), version="fedcba987654")
    second = merge_continue(first, changed)
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
    merged = merge_continue(old, sample_input(None))
    names = [m[0] for m in continue_models(merged)]
    assert names == [
        "Qwen3 32B (team gateway)",
        "llama-3.1-8b (team gateway)",
        "mystery-model (team gateway)",
        "Local",
        "my own alias",
    ]
    assert "contextLength: 512" not in merged
    assert merge_continue(merged, sample_input(None)) == merged  # a third install changes nothing


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


def merge_goose(existing: str | None, inp) -> str:
    """Goose's config.yaml merged as the installer does it, with its declared owned mapping."""
    from clientconfigs.clients import goose

    f = next(f for f in goose.render(inp).files if f.name == "config.yaml")
    return inst.MERGES[f.merge](existing, {"content": f.content, "owned": f.owned})


def test_goose_config_keeps_the_users_extensions_and_replaces_only_provider_and_model():
    theirs = (
        "GOOSE_PROVIDER: openai\nGOOSE_MODEL: gpt-4o\nextensions:\n  developer:\n    enabled: true\n    type: builtin\n"
    )
    inp = replace(sample_input(None), mcp_servers=())
    once = merge_goose(theirs, inp)
    twice = yaml.safe_load(merge_goose(once, inp))
    assert twice == {
        "GOOSE_PROVIDER": "custom_teamgw",
        "GOOSE_MODEL": "qwen3-32b",
        "extensions": {"developer": {"enabled": True, "type": "builtin"}},
    }
    assert merge_goose(once, inp).count("Team gateway config") == 1


def test_goose_mcp_extensions_join_the_users_mapping_and_follow_the_allowlist():
    # As Goose itself writes the file (serde_yaml, no comments of ours), with an entry of ours from
    # an earlier install among the user's: ours by its `teamgw-` name.
    theirs = (
        "GOOSE_PROVIDER: openai\nextensions:\n    developer:\n        enabled: true\n        type: builtin\n"
        "        name: developer\n    teamgw-old:\n        enabled: true\n        type: streamable_http\n"
        "        name: teamgw-old\n        uri: https://llm.example.com/mcp/old\n        env_keys:\n"
        "        - TEAM_GATEWAY_API_KEY\n    my-own:\n        enabled: false\n        type: stdio\n"
        "        name: my-own\n        cmd: my-mcp\n        args: []\n"
    )
    inp = sample_input(SAMPLE_KEY)
    first = merge_goose(theirs, inp)
    assert merge_goose(first, inp) == first  # a second run changes nothing
    data = yaml.safe_load(first)
    assert list(data["extensions"]) == ["teamgw-docs", "teamgw-tracker", "developer", "my-own"]
    assert data["extensions"]["my-own"] == yaml.safe_load(theirs)["extensions"]["my-own"]
    assert data["extensions"]["teamgw-docs"] == {
        "enabled": True,
        "type": "streamable_http",
        "name": "teamgw-docs",
        "description": "Team docs",
        "uri": "https://llm.example.com/mcp/docs",
        "envs": {},
        "env_keys": ["TEAM_GATEWAY_API_KEY"],
        "headers": {"Authorization": "Bearer ${TEAM_GATEWAY_API_KEY}", "X-Gateway-Config-Version": "0123456789ab"},
        "timeout": 300,
    }
    assert SAMPLE_KEY not in first  # Goose substitutes the header from the environment (env_keys)
    fewer = merge_goose(first, replace(inp, mcp_servers=inp.mcp_servers[1:]))
    assert list(yaml.safe_load(fewer)["extensions"]) == ["teamgw-tracker", "developer", "my-own"]
    none = merge_goose(fewer, replace(inp, mcp_servers=()))
    assert list(yaml.safe_load(none)["extensions"]) == ["developer", "my-own"]
    assert "team-gateway extensions" not in none


def test_goose_extensions_the_installer_added_alone_go_with_uninstall():
    from clientconfigs.installer import uninstall_specs

    spec = next(s for s in uninstall_specs()["goose"] if s["path"].endswith("config.yaml"))
    assert spec["keys"] == ["GOOSE_MODEL", "GOOSE_PROVIDER"] and spec["owned"] == ["extensions.teamgw-"]
    mine = "GOOSE_MODE: smart_approve\n"
    merged = merge_goose(mine + "extensions: {}\n", sample_input(None))
    assert list(yaml.safe_load(merged)["extensions"]) == ["teamgw-docs", "teamgw-tracker"]
    assert inst.UNMERGES["yaml-keys"](merged, spec, "https://llm.example.com") == mine
    assert inst.UNMERGES["yaml-keys"](merge_goose(None, sample_input(None)), spec, "x") == ""


def test_goose_doctor_reads_our_mcp_entries_from_config_yaml():
    from clientconfigs.clients import goose

    text = merge_goose(
        "extensions:\n  my-own:\n    type: streamable_http\n    uri: http://127.0.0.1:9/x\n", sample_input(None)
    )
    probe = goose.render(sample_input(None)).probes[1].__dict__
    assert inst.mcp_entries(probe, inst.parse_yaml_flat(text)) == [
        ("teamgw-docs", "https://llm.example.com/mcp/docs"),
        ("teamgw-tracker", "https://llm.example.com/mcp/tracker"),
    ]


def continue_mcp(text: str) -> list[str]:
    return [s["name"] for s in yaml.safe_load(text).get("mcpServers") or []]


def test_continue_mcp_servers_join_the_users_list_and_follow_the_allowlist():
    mine = "name: Mine\nversion: 1\nschema: v1\nmcpServers:\n- name: my-own\n  command: my-mcp\n"
    # An entry of ours copied from the page by hand (no markers) is ours by its name.
    copied = mine + "- name: teamgw-old\n  type: streamable-http\n  url: https://llm.example.com/mcp/old\n"
    first = merge_continue(copied, sample_input(None))
    assert continue_mcp(first) == ["teamgw-docs", "teamgw-tracker", "my-own"]
    entry = yaml.safe_load(first)["mcpServers"][0]
    assert entry == {
        "name": "teamgw-docs",
        "type": "streamable-http",
        "url": "https://llm.example.com/mcp/docs",
        "requestOptions": {
            "headers": {
                "Authorization": "Bearer ${{ secrets.TEAM_GATEWAY_API_KEY }}",
                "X-Gateway-Config-Version": "0123456789ab",
            }
        },
    }
    inp = sample_input(SAMPLE_KEY)
    assert SAMPLE_KEY not in first and SAMPLE_KEY not in merge_continue(first, inp)  # the key stays in .env
    fewer = merge_continue(first, replace(inp, mcp_servers=inp.mcp_servers[1:]))
    assert continue_mcp(fewer) == ["teamgw-tracker", "my-own"]
    none = merge_continue(fewer, replace(inp, mcp_servers=()))
    assert continue_mcp(none) == ["my-own"] and "team-gateway mcpServers" not in none


def test_continue_mcp_servers_without_a_list_of_the_users_get_one_that_uninstall_takes_away():
    mine = "name: Mine\nversion: 1\nschema: v1\nmodels:\n- name: Local\n  provider: ollama\n  model: x\n"
    merged = merge_continue(mine, sample_input(None))
    assert continue_mcp(merged) == ["teamgw-docs", "teamgw-tracker"]
    spec = {"merge": "yaml-models", "owned": ["mcpServers.teamgw-"]}
    assert inst.UNMERGES["yaml-models"](merged, spec, "https://llm.example.com") == mine
    # An empty inline list is the same as none; the next install without servers leaves no header.
    inline = merge_continue(mine + "mcpServers: []\n", sample_input(None))
    assert continue_mcp(inline) == ["teamgw-docs", "teamgw-tracker"]
    assert "mcpServers" not in merge_continue(inline, replace(sample_input(None), mcp_servers=()))


def test_continue_doctor_reads_our_mcp_entries_from_config_yaml():
    text = merge_continue("mcpServers:\n  - name: my-own\n    url: http://127.0.0.1:9/x\n", sample_input(None))
    probe = continue_.render(sample_input(None)).probes[0].__dict__
    assert inst.mcp_entries(probe, inst.parse_yaml_models(text)) == [
        ("teamgw-docs", "https://llm.example.com/mcp/docs"),
        ("teamgw-tracker", "https://llm.example.com/mcp/tracker"),
    ]


def merge_zed(existing: str | None, inp) -> str:
    """Zed's settings.json merged as the installer does it, with its declared owned servers."""
    from clientconfigs.clients import zed

    f = zed.render(inp).files[0]
    return inst.MERGES[f.merge](existing, {"content": f.content, "replace": f.replace, "owned": f.owned})


def test_zed_context_servers_join_the_users_and_follow_the_allowlist():
    mine = {
        "vim_mode": True,
        "context_servers": {
            "my-own": {"command": "my-mcp", "args": ["--stdio"]},
            "my-remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer mine"}},
            "teamgw-old": {"url": "https://llm.example.com/mcp/old", "headers": {}},  # a server no longer allowed
        },
    }
    inp = sample_input(SAMPLE_KEY)
    first = json.loads(merge_zed(json.dumps(mine, indent=2), inp))
    assert list(first["context_servers"]) == ["my-own", "my-remote", "teamgw-docs", "teamgw-tracker"]
    assert first["vim_mode"] is True and first["language_models"]["openai_compatible"]["teamgw"]
    assert first["context_servers"]["teamgw-docs"] == {
        "url": "https://llm.example.com/mcp/docs",
        "headers": {"Authorization": f"Bearer {SAMPLE_KEY}", "X-Gateway-Config-Version": "0123456789ab"},
    }
    fewer = merge_zed(json.dumps(first), replace(inp, mcp_servers=inp.mcp_servers[1:]))
    assert list(json.loads(fewer)["context_servers"]) == ["my-own", "my-remote", "teamgw-tracker"]
    none = json.loads(merge_zed(fewer, replace(inp, mcp_servers=())))
    assert none["context_servers"] == {k: v for k, v in mine["context_servers"].items() if k != "teamgw-old"}


# Zed's own first settings.json, as it writes it: comments (and, after an edit by hand, trailing commas).
ZED_JSONC = """// Zed settings
//
// For information on how to configure Zed, see the Zed
// documentation: https://zed.dev/docs/configuring-zed
{
  "ui_font_size": 16,
  // my own server
  "context_servers": {
    "my-own": {"command": "my-mcp", "args": []},
  },
}
"""


def test_zed_settings_with_comments_are_edited_in_place_and_the_doctor_reads_them(tmp_path, monkeypatch):
    """The installer writes the team's members into a JSONC settings.json without losing a comment
    or the user's trailing commas; the doctor reads it; uninstall gives it back byte for byte."""
    from clientconfigs import installer, services
    from clientconfigs.clients import zed

    home = tmp_path / "home"
    target = home / ".config" / "zed" / "settings.json"
    target.parent.mkdir(parents=True)
    target.write_text(ZED_JSONC)
    monkeypatch.setenv("HOME", str(home))
    inp = sample_input(SAMPLE_KEY)
    rendered = services.render("zed", inp)
    assert inst.install(services.bundle("zed", inp, rendered, None), stamp="1") == 0
    text = target.read_text()
    assert text.startswith(ZED_JSONC.split("{", 1)[0]) and "  // my own server\n" in text
    assert '    "my-own": {"command": "my-mcp", "args": []},\n    "teamgw-docs": {\n' in text

    data, _ = inst.load(str(target), "json")
    assert data["context_servers"]["my-own"] == {"command": "my-mcp", "args": []}
    probe = zed.render(inp).probes[0].__dict__
    assert inst.mcp_entries(probe, data) == [
        ("teamgw-docs", "https://llm.example.com/mcp/docs"),
        ("teamgw-tracker", "https://llm.example.com/mcp/tracker"),
    ]
    assert inst.uninstall(installer.uninstall_specs(), inp.gateway_url, ["zed"], yes=True, stamp="2") == 0
    assert target.read_text() == ZED_JSONC


def test_the_doctor_finds_roos_mcp_file_where_vs_code_keeps_it_on_macos(tmp_path, monkeypatch, capsys):
    from clientconfigs.clients import roo

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(inst.platform, "system", lambda: "Darwin")
    f = roo.mcp_file(sample_input(SAMPLE_KEY))
    target = tmp_path / f.macos_path.removeprefix("~/")
    target.parent.mkdir(parents=True)
    target.write_text(f.content)
    probe = roo.render(sample_input(None)).probes[1].__dict__
    seen = []
    monkeypatch.setattr(inst, "server_models", lambda gateway, key: seen.append(key) or (0, "stopped here"))
    assert inst.check("https://llm.example.com", [probe]) == 1
    assert "no team MCP servers installed" not in capsys.readouterr().out
    assert seen == [SAMPLE_KEY]  # the key came from our entries' Authorization header
