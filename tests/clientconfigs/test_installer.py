"""The real `sh` installer, fetched from a live test server and run in a throwaway HOME: it merges
into existing files, backs up first, sets modes, and its token works once. The doctor (`--check`)
is run against a real HTTP server standing in for the gateway's /v1/models."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import tomllib
import urllib.request
from pathlib import Path

import pytest
import yaml

from channels.models import ModelRoute
from clientconfigs import services
from clientconfigs.clients import roo
from clientconfigs.models import KeyMode
from keys.services import verify_key
from tests.services import require_binary

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - the live test server
        return resp.read().decode()


def run_sh(script: str, home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    require_binary("sh", "a POSIX shell")
    path = home.parent / "install.sh"
    path.write_text(script)
    clean = {"HOME": str(home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8", **(env or {})}
    return subprocess.run(["sh", str(path), *args], capture_output=True, text=True, timeout=60, env=clean)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


def install(live_server, home, user, client, key_mode=KeyMode.MINT, **kw) -> subprocess.CompletedProcess:
    _, token = services.issue_download_token(user, client, key_mode=key_mode, **kw)
    return run_sh(fetch(live_server.url + "/connect/install.sh"), home, token)


def test_claude_code_settings_are_merged_backed_up_and_private(live_server, settings, home, alice, catalog):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = home / ".claude" / "settings.json"
    target.parent.mkdir()
    original = {
        "theme": "dark",
        "permissions": {"allow": ["Bash(ls*)"]},
        "env": {"FOO": "bar", "ANTHROPIC_API_KEY": "sk-old"},
    }
    target.write_text(json.dumps(original))
    target.chmod(0o644)

    result = install(live_server, home, alice, "claude-code", key_name="laptop")
    assert result.returncode == 0, result.stdout + result.stderr

    merged = json.loads(target.read_text())
    assert merged["theme"] == "dark" and merged["permissions"] == original["permissions"]
    assert merged["env"]["FOO"] == "bar"
    assert "ANTHROPIC_API_KEY" not in merged["env"]  # would be sent next to the bearer token
    assert merged["env"]["ANTHROPIC_BASE_URL"] == live_server.url
    assert merged["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert verify_key(merged["env"]["ANTHROPIC_AUTH_TOKEN"]).name == "claude-code@laptop"
    assert mode(target) == 0o600
    [backup] = backups(target)
    assert json.loads(backup.read_text()) == original and mode(backup) == 0o600
    assert "claude-code@laptop" in result.stdout


def test_a_used_token_installs_nothing(live_server, settings, home, alice, catalog):
    settings.PORTAL_PUBLIC_URL = live_server.url
    _, token = services.issue_download_token(alice, "opencode", key_mode=KeyMode.PLACEHOLDER)
    script = fetch(live_server.url + "/connect/install.sh")
    assert run_sh(script, home, token).returncode == 0
    target = home / ".config" / "opencode" / "opencode.json"
    before = target.read_text()
    again = run_sh(script, home, token)
    assert again.returncode != 0
    assert "once" in again.stderr
    assert target.read_text() == before and backups(target) == []


def test_codex_toml_keeps_unrelated_tables_and_replaces_ours(live_server, settings, home, alice, catalog):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = home / ".codex" / "config.toml"
    target.parent.mkdir()
    target.write_text(
        'model = "o3"\napproval_policy = "on-request"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"\n\n'
        '[model_providers.teamgw]\nname = "old"\nbase_url = "http://old/v1"\nwire_api = "chat"\n\n'
        '[model_providers.teamgw.http_headers]\nX-Old = "1"\n'
    )
    result = install(live_server, home, alice, "codex", key_name="desk")
    assert result.returncode == 0, result.stdout + result.stderr
    config = tomllib.loads(target.read_text())
    assert config["approval_policy"] == "on-request"
    assert config["mcp_servers"] == {"docs": {"command": "docs-mcp"}}
    assert config["model"] == "qwen3-32b"  # the largest window by default; o3 replaced
    provider = config["model_providers"]["teamgw"]
    assert provider["wire_api"] == "responses" and provider["base_url"] == live_server.url + "/v1"
    assert "X-Old" not in provider["http_headers"]
    env_file = home / ".config" / "team-gateway" / "env"
    assert mode(env_file) == 0o600
    assert "TEAM_GATEWAY_API_KEY='gp-" in env_file.read_text()
    assert len(backups(target)) == 1


def test_continue_models_are_added_between_markers_and_replaced_on_reinstall(
    live_server, settings, home, alice, catalog
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = home / ".continue" / "config.yaml"
    target.parent.mkdir()
    target.write_text(
        "name: Mine\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: Local\n    provider: ollama\n"
        "    model: llama3\nrules:\n  - Be terse\n"
    )
    env_file = home / ".continue" / ".env"
    env_file.write_text("OTHER_SECRET=keep-me\n")
    for machine in ("laptop", "laptop"):
        result = install(live_server, home, alice, "continue", key_name=machine)
        assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(target.read_text())
    assert config["name"] == "Mine" and config["rules"] == ["Be terse"]
    # The default (largest window) first: Continue uses the first model of the list.
    assert [m["model"] for m in config["models"]] == ["qwen3-32b", "llama-3.1-8b", "llama3"]
    assert target.read_text().count(">>> team-gateway") == 1
    env = env_file.read_text()
    assert "OTHER_SECRET=keep-me" in env and env.count("TEAM_GATEWAY_API_KEY=") == 1
    assert mode(env_file) == 0o600
    assert len(backups(target)) >= 1


def test_a_small_embedding_models_chunk_size_survives_the_merge_into_the_users_continue_config(
    live_server, settings, home, alice, catalog
):
    """The installer merges our block into the user's config.yaml; the nested `embedOptions` of a
    256-token embedding model (Continue would cut 500-token chunks) comes through, twice."""
    settings.PORTAL_PUBLIC_URL = live_server.url
    catalog["llama"].kind = "embedding"
    catalog["llama"].save()
    ModelRoute.objects.filter(model=catalog["llama"]).update(context_window=256, max_output_tokens=None)
    target = home / ".continue" / "config.yaml"
    target.parent.mkdir()
    target.write_text(
        "name: Mine\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: Local\n    provider: ollama\n    model: x\n"
    )
    for _ in range(2):
        result = install(live_server, home, alice, "continue", key_name="laptop")
        assert result.returncode == 0, result.stdout + result.stderr
    [embed] = [m for m in yaml.safe_load(target.read_text())["models"] if m.get("roles") == ["embed"]]
    assert embed["model"] == "llama-3.1-8b" and embed["embedOptions"] == {"maxChunkSize": 250}


def test_cline_keeps_other_providers(live_server, settings, home, alice, catalog):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = home / ".cline" / "data" / "settings" / "providers.json"
    target.parent.mkdir(parents=True)
    other = {
        "settings": {"provider": "anthropic", "apiKey": "sk-ant"},
        "updatedAt": "2026-01-01T00:00:00.000Z",
        "tokenSource": "manual",
    }
    target.write_text(
        json.dumps({"version": 1, "lastUsedProvider": "anthropic", "modes": {}, "providers": {"anthropic": other}})
    )
    result = install(live_server, home, alice, "cline", key_mode=KeyMode.PLACEHOLDER)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(target.read_text())
    assert data["providers"]["anthropic"] == other
    assert data["providers"]["openai-compatible"]["settings"]["baseUrl"] == live_server.url + "/v1"
    assert data["lastUsedProvider"] == "openai-compatible"
    for name in ("models.json", "../globalState.json", "../secrets.json"):
        assert (target.parent / name).exists()


def vs_code_settings(home, text: str):
    """VS Code's user settings.json (where the Roo entry goes) holding `text`."""
    target = home / ".config" / "Code" / "User" / "settings.json"
    target.parent.mkdir(parents=True)
    target.write_text(text)
    return target


def test_vs_code_settings_with_comments_get_our_one_line_and_keep_every_other_byte(
    live_server, settings, home, alice, catalog
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    jsonc = '{\n  // my comment, with "quotes" and a // inside\n  "editor.fontSize": 14, /* mine */\n}\n'
    target = vs_code_settings(home, jsonc)
    result = install(live_server, home, alice, "roo", key_mode=KeyMode.PLACEHOLDER)
    assert result.returncode == 0, result.stdout + result.stderr
    line = f'  "roo-cline.autoImportSettingsPath": {json.dumps(roo.PATH)},\n'
    assert target.read_text() == jsonc.replace("}\n", line + "}\n")  # VS Code's trailing comma style too
    assert (home / ".config" / "team-gateway" / "roo-settings.json").exists()

    gone = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--uninstall", "roo", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert target.read_text() == jsonc


def test_a_file_that_is_not_json_even_with_comments_is_left_alone(live_server, settings, home, alice, catalog):
    settings.PORTAL_PUBLIC_URL = live_server.url
    broken = '{\n  // my comment\n  "editor.fontSize": 14\n  "editor.tabSize": 2\n}\n'
    target = vs_code_settings(home, broken)
    result = install(live_server, home, alice, "roo", key_mode=KeyMode.PLACEHOLDER)
    assert result.returncode == 1
    assert target.read_text() == broken and backups(target) == []
    assert (
        "left unchanged, the installer cannot edit it safely (not JSON, even with comments: line 4 column 3: "
        "expected ','"
    ) in result.stdout
    assert (home / ".config" / "team-gateway" / "roo-settings.json").exists()


# --- doctor --------------------------------------------------------------------------------------


def write_files(home: Path, slug: str, user, gateway: str, plaintext: str | None) -> None:
    inp = services.render_input(user, gateway=gateway, plaintext=plaintext)
    for f in services.render(slug, inp).files:
        path = home / f.path.removeprefix("~/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.content)


def test_doctor_passes_when_key_models_url_and_window_agree(live_server, settings, home, alice, gateway_stub):
    up, _, plaintext = gateway_stub
    settings.PORTAL_PUBLIC_URL = up.root_url
    write_files(home, "claude-code", alice, up.root_url, plaintext)
    result = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--check", "claude-code")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "key valid" in result.stdout
    assert "context window 32768 agrees with the server" in result.stdout
    assert "has the right shape" in result.stdout


def test_doctor_reports_a_window_the_server_disagrees_with(live_server, settings, home, alice, gateway_stub):
    up, _, plaintext = gateway_stub
    up.max_model_len = 16384
    settings.PORTAL_PUBLIC_URL = up.root_url
    write_files(home, "claude-code", alice, up.root_url, plaintext)
    result = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--check", "claude-code")
    assert result.returncode == 1
    assert "context window 32768 in the file, 16384 on the server" in result.stdout


def test_doctor_reports_a_rejected_key_and_a_wrong_base_url(live_server, settings, home, alice, gateway_stub):
    up, _, _ = gateway_stub
    settings.PORTAL_PUBLIC_URL = up.root_url
    write_files(home, "codex", alice, up.root_url, None)
    config = home / ".codex" / "config.toml"
    config.write_text(config.read_text().replace(up.root_url + "/v1", up.root_url))
    result = run_sh(
        fetch(live_server.url + "/connect/install.sh"),
        home,
        "--check",
        "codex",
        env={"TEAM_GATEWAY_API_KEY": "gp-wrong"},
    )
    assert result.returncode == 1
    assert "should be ending in /v1" in result.stdout
    assert (
        "rejected the key (401)" in result.stdout and "run a new install command from the Connect page" in result.stdout
    )


CONTINUE_WITH_DUPLICATES = """name: Mine
version: 0.0.1
schema: v1
models:
- name: Local
  provider: ollama
  model: not-on-the-gateway
- name: qwen3-32b (team gateway)
  provider: openai
  model: qwen3-32b
  apiBase: {gw}/v1
  apiKey: {key}
  defaultCompletionOptions:
    contextLength: 32768
- name: qwen3-32b (team gateway)
  provider: openai
  model: qwen3-32b
  apiBase: {gw}/v1
  apiKey: {key}
  defaultCompletionOptions:
    contextLength: 512
"""


def test_doctor_fails_on_a_duplicated_model_naming_the_lines_and_ignores_the_users_own(
    live_server, settings, home, gateway_stub
):
    """What the old installer left after a second Continue install: the doctor said all was well."""
    up, _, plaintext = gateway_stub
    settings.PORTAL_PUBLIC_URL = up.root_url
    target = home / ".continue" / "config.yaml"
    target.parent.mkdir()
    target.write_text(CONTINUE_WITH_DUPLICATES.format(gw=up.root_url, key=plaintext))
    result = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--check", "continue")
    assert result.returncode == 1, result.stdout
    assert "~/.continue/config.yaml lines 8, 15: model qwen3-32b is listed 2 times" in result.stdout
    assert "~/.continue/config.yaml line 21: model qwen3-32b has context window 512 in the file, 32768" in result.stdout
    assert "not-on-the-gateway" not in result.stdout  # the user's own model on another server is theirs
    assert "all checks passed" not in result.stdout


def test_doctor_warns_when_a_window_cannot_hold_the_clients_own_prompt(
    live_server, settings, home, alice, gateway_stub
):
    up, _, plaintext = gateway_stub
    up.max_model_len = 4096
    ModelRoute.objects.update(context_window=4096, discovered_context_window=None, max_output_tokens=1024)
    settings.PORTAL_PUBLIC_URL = up.root_url
    write_files(home, "claude-code", alice, up.root_url, plaintext)
    result = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--check", "claude-code")
    assert re.search(r"! model \S+: its window \(4096 tokens\) cannot hold Claude Code's own prompt", result.stdout)


def test_doctor_passes_an_embedding_model_whose_window_cannot_hold_continues_prompt(
    live_server, settings, home, alice, gateway_stub, catalog
):
    """Continue's `embed` entry never carries Continue's own prompt: a 1,024-token window is right
    for it, while the same window on a chat entry is the warning's case."""
    up, _, plaintext = gateway_stub
    up.max_model_len = 1024
    ModelRoute.objects.update(context_window=1024, discovered_context_window=None, max_output_tokens=256)
    catalog["llama"].kind = "embedding"
    catalog["llama"].save()
    settings.PORTAL_PUBLIC_URL = up.root_url
    write_files(home, "continue", alice, up.root_url, plaintext)
    text = (home / ".continue" / "config.yaml").read_text()
    assert "  - embed\n" in text or "- embed\n" in text
    result = run_sh(fetch(live_server.url + "/connect/install.sh"), home, "--check", "continue")
    assert "model llama-3.1-8b: reachable, context window 1024 agrees with the server" in result.stdout
    assert re.search(r"! model qwen3-32b: its window \(1024 tokens\) cannot hold Continue's own prompt", result.stdout)
    assert "! model llama-3.1-8b" not in result.stdout, result.stdout


def test_two_installs_in_the_same_second_keep_the_backup_of_the_users_own_file(tmp_path, monkeypatch):
    """Codex, then Copilot CLI, from one setup script: both merge into the shared environment file
    under the same one-second stamp. The second backup goes beside the first, which is the only copy
    of the user's own file, instead of over it."""
    from clientconfigs import installer
    from clientconfigs.installer import install as inst

    from .conftest import SAMPLE_KEY, sample_input

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    env_file = home / ".config" / "team-gateway" / "env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text("export EDITOR=vim\n")
    inp = sample_input(SAMPLE_KEY)
    for client in ("codex", "copilot-cli"):
        bundle = services.bundle(client, inp, services.render(client, inp), None)
        assert inst.install(bundle, stamp="20261207-101500", specs=installer.uninstall_specs()) == 0
    first, second = backups(env_file)
    assert (first.name, second.name) == ("env.bak-20261207-101500", "env.bak-20261207-101500-2")
    assert first.read_text() == "export EDITOR=vim\n" and mode(first) == 0o600
    assert "TEAM_GATEWAY_API_KEY" in second.read_text() and "COPILOT" not in second.read_text()
    assert "COPILOT" in env_file.read_text() and "export EDITOR=vim" in env_file.read_text()


def test_ccswitch_database_backups_within_the_same_second_do_not_overwrite_each_other(tmp_path, monkeypatch, capsys):
    """Two installs and an uninstall of CC Switch under one one-second stamp: each copy of its
    database goes beside the earlier ones (`.bak-STAMP-2`, -3), as the config files' backups do; the
    first, the database as it was before the team gateway, was written over."""
    import sqlite3
    from dataclasses import replace

    from clientconfigs import installer
    from clientconfigs.installer import install as inst

    from .conftest import SAMPLE_KEY, make_ccswitch_db, sample_input

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    db = make_ccswitch_db(home)
    specs, stamp = installer.uninstall_specs(), "20261207-101500"
    for version in ("first", "second"):
        inp = replace(sample_input(SAMPLE_KEY), version=version)
        bundle = services.bundle("cc-switch", inp, services.render("cc-switch", inp), None)
        assert inst.install(bundle, stamp=stamp, specs=specs) == 0
    assert f"(backup: cc-switch.db.bak-{stamp}-2)" in capsys.readouterr().out
    assert inst.uninstall(specs, inp.gateway_url, ["cc-switch"], yes=True, stamp=stamp) == 0
    assert f"removed (backup: cc-switch.db.bak-{stamp}-3)" in capsys.readouterr().out

    def ours(path: Path) -> int:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("SELECT count(*) FROM providers WHERE id = 'teamgw'").fetchone()[0]
        finally:
            conn.close()

    first, second, third = backups(db)
    assert [b.name for b in (first, second, third)] == [
        f"cc-switch.db.bak-{stamp}",
        f"cc-switch.db.bak-{stamp}-2",
        f"cc-switch.db.bak-{stamp}-3",
    ]
    assert ours(first) == 0 and ours(second) > 0 and ours(third) > 0 and ours(db) == 0
    assert {mode(b) for b in (first, second, third)} == {0o600}
