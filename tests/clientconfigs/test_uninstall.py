"""Install, install again with one MCP server fewer, uninstall: for every client's files, the user's
own entries (their MCP servers among them) survive each step, our `teamgw-…` MCP entries follow the
allowlist, and uninstall leaves each of the user's files byte-identical to what it was before the
first install (files that only we wrote are deleted). The installer's own functions run on a
throwaway HOME; the live-server runs are in test_reinstall.py and test_real_clients.py."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from clientconfigs import installer, services
from clientconfigs.clients import CLIENTS
from clientconfigs.clients.base import MCP_PREFIX
from clientconfigs.installer import install as inst

from .conftest import SAMPLE_KEY, make_ccswitch_db, sample_input

SPECS = installer.uninstall_specs()
GATEWAY = sample_input(None).gateway_url
# Keyed by model name like the user's own entries, so uninstall leaves ours there (they only
# describe a model to Aider; installer/__init__.py uninstall_spec).
AIDER_METADATA = "~/.aider.model.metadata.json"
MINE = {"url": "http://127.0.0.1:9/my-own-mcp", "headers": {"Authorization": "Bearer mine"}}


def users_own(spec: dict) -> str | None:
    """A file as the developer had it before our first install: their own settings and MCP server."""
    merge = spec["merge"]
    if merge == "json":
        data: dict = {"mine": {"keep": [1, 2]}}
        for owned in spec["owned"]:
            data[owned.rsplit(".", 1)[0]] = {"my-own": MINE}
        return json.dumps(data, indent=2) + "\n"
    if merge == "toml":
        return 'approval_policy = "on-request"\n\n[mcp_servers.my-own]\nurl = "http://127.0.0.1:9/my-own-mcp"\n'
    if merge == "toml-items":  # Mistral Vibe's lists of tables: a provider and an MCP server of theirs
        return (
            'vim_keybindings = true\n\n[[providers]]\nname = "mine"\napi_base = "http://127.0.0.1:9/v1"\n\n'
            '[[mcp_servers]]\nname = "my-own"\ntransport = "streamable-http"\nurl = "http://127.0.0.1:9/my-own-mcp"\n\n'
            '[mcp_servers.auth]\ntype = "static"\napi_key_env = "MINE"\n'
        )
    if merge == "dotenv":
        return "MINE=1\n"
    if merge == "yaml-models":
        mine = "name: Mine\nversion: 1.0.0\nschema: v1\nmodels:\n- name: Local\n  provider: ollama\n  model: x\n"
        # Indented, as the user wrote it: ours go in at their indent and leave it byte-identical.
        servers = "mcpServers:\n  - name: my-own\n    type: streamable-http\n    url: http://127.0.0.1:9/my-own-mcp\n"
        return mine + servers if spec["owned"] else mine
    if merge == "yaml-keys":
        if spec["owned"]:  # Goose's config.yaml: an extension of theirs in the mapping ours join
            return "mine: 1\nextensions:\n  my-own:\n    enabled: true\n    type: streamable_http\n    name: my-own\n"
        return "mine: 1\n"
    if merge == "yaml-list":
        return "- model_id: mine\n  model_name: m\n"
    return None  # text: a one-value file is ours whole


def path_of(home: Path, spec: dict) -> Path:
    return home / spec["path"].removeprefix("~/")


def our_mcp_entries(path: Path, spec: dict) -> dict[str, set[str]]:
    """{container: names} of the MCP entries in a file, ours and the user's."""
    text = path.read_text()
    if spec["merge"] == "yaml-models":  # Continue's `mcpServers:` is a list of named items
        data = yaml.safe_load(text)
        return {o: {i["name"] for i in data.get(o.rsplit(".", 1)[0]) or []} for o in spec["owned"]}
    if spec["merge"] == "yaml-keys":  # Goose's `extensions:`: a mapping keyed by name
        data = yaml.safe_load(text)
        return {o: set(data.get(o.rsplit(".", 1)[0]) or {}) for o in spec["owned"]}
    if spec["merge"] == "toml-items":  # Vibe's `[[mcp_servers]]`: a list of named tables
        data = tomllib.loads(text)
        return {o: {i["name"] for i in data.get(o.rsplit(".", 1)[0]) or []} for o in spec["owned"]}
    data = tomllib.loads(text) if spec["merge"] == "toml" else json.loads(text)
    return {o: set(inst.one(data, o.rsplit(".", 1)[0]) or {}) for o in spec["owned"]}


def install_once(client: str, inp, home: Path) -> None:
    rendered = services.render(client, inp)
    bundle = services.bundle(client, inp, rendered, None)
    assert inst.install(bundle, stamp="1", specs=SPECS) == 0


@pytest.mark.parametrize("client", sorted(SPECS))
def test_users_own_entries_survive_install_reinstall_and_uninstall(client, tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    # A per-model family of files (`teamgw-*`) is all ours: checked by name after the uninstall.
    specs = [spec for spec in SPECS[client] if not spec.get("glob")]
    before: dict[Path, str] = {}
    for spec in specs:
        if spec["merge"] == "ccswitch":
            make_ccswitch_db(home)
            continue
        own = users_own(spec)
        if own is not None:
            path = path_of(home, spec)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(own)
            before[path] = own

    first = sample_input(SAMPLE_KEY)
    install_once(client, first, home)
    for spec in specs:
        if spec.get("owned") and path_of(home, spec).exists():
            for names in our_mcp_entries(path_of(home, spec), spec).values():
                assert names == {"my-own", f"{MCP_PREFIX}docs", f"{MCP_PREFIX}tracker"}, (spec["path"], names)

    # The admin takes `tracker` off this key, then `docs` too: our entries follow, the user's stay.
    # The last run lists one model: the per-model files of the others stay behind until uninstall.
    for left, models in ((first.mcp_servers[:1], first.models), ((), first.models[:1])):
        install_once(client, replace(first, mcp_servers=left, models=models), home)
        for spec in specs:
            if spec.get("owned") and path_of(home, spec).exists():
                for names in our_mcp_entries(path_of(home, spec), spec).values():
                    assert names == {"my-own", *(s.entry for s in left)}, (spec["path"], names)

    assert inst.uninstall(SPECS, GATEWAY, [client], yes=True, stamp="2") == 0
    for spec in specs:
        path = path_of(home, spec)
        if spec["merge"] == "ccswitch":
            conn = sqlite3.connect(path)
            assert conn.execute("SELECT count(*) FROM providers WHERE id = 'teamgw'").fetchone() == (0,)
            conn.close()
        elif spec["path"] == AIDER_METADATA:
            assert json.loads(path.read_text())["mine"] == json.loads(before[path])["mine"]
        elif path in before:
            assert path.read_text() == before[path], spec["path"]
        else:
            assert not path.exists(), spec["path"]
    # Files named per model (Claude Code's --settings files, Codex's profiles) go too, those of models
    # no longer listed among them: their client declares the family's `teamgw-*` glob.
    assert [p for p in home.rglob(f"{MCP_PREFIX}*") if ".bak-" not in p.name] == []
    # A second uninstall finds nothing of ours and changes nothing.
    assert inst.uninstall(SPECS, GATEWAY, [client], yes=True, stamp="3") == 0
    assert {p: p.read_text() for p in before if AIDER_METADATA.removeprefix("~/") not in str(p)} == {
        p: t for p, t in before.items() if AIDER_METADATA.removeprefix("~/") not in str(p)
    }


def test_uninstall_without_a_terminal_and_without_yes_removes_nothing(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    install_once("opencode", sample_input(SAMPLE_KEY), home)
    path = home / ".config" / "opencode" / "opencode.json"
    text = path.read_text()
    monkeypatch.setattr(inst, "confirm", lambda question: False)  # no /dev/tty, or the answer was no
    assert inst.uninstall(SPECS, GATEWAY, ["opencode"], yes=False) == 1
    assert path.read_text() == text
    assert "nothing removed (pass --yes" in capsys.readouterr().out


def test_uninstall_specs_do_not_depend_on_the_model_or_server_names():
    """What uninstall removes is read off one sample render: names that vary must not leak into it."""
    blob = json.dumps(SPECS)
    assert "sample-model" not in blob and f"{MCP_PREFIX}sample" not in blob
    assert set(SPECS) == {
        slug
        for slug in CLIENTS
        if any(f.merge != "none" for f in CLIENTS[slug].render(sample_input(SAMPLE_KEY)).files)
        or CLIENTS[slug].render(sample_input(SAMPLE_KEY)).db_providers
    }


def test_a_file_holding_only_our_mcp_entries_is_emptied_not_left_with_stale_ones(tmp_path, monkeypatch):
    """Claude Code's ~/.claude.json is not in the bundle when no server is allowed any more: the
    installer still removes the entries it wrote there before."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    install_once("claude-code", sample_input(SAMPLE_KEY), home)
    state = home / ".claude.json"
    data = json.loads(state.read_text())
    data["numStartups"] = 3  # Claude Code's own state, written between our runs
    state.write_text(json.dumps(data, indent=2))
    install_once("claude-code", replace(sample_input(SAMPLE_KEY), mcp_servers=()), home)
    assert json.loads(state.read_text()) == {"numStartups": 3}
    assert os.stat(state).st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("client", "family", "windows"),
    [
        ("claude-code", "~/.claude/teamgw-*.json", "%USERPROFILE%\\.claude\\teamgw-*.json"),
        ("codex", "~/.codex/teamgw-*.config.toml", "%USERPROFILE%\\.codex\\teamgw-*.config.toml"),
    ],
)
def test_per_model_files_are_one_spec_each_family_found_by_its_declared_glob(client, family, windows):
    [spec] = [s for s in SPECS[client] if s.get("glob")]
    assert (spec["path"], spec["macos_path"], spec["windows_path"]) == (family, family, windows)


def test_the_users_own_credentials_are_never_remembered_only_their_other_values(tmp_path, monkeypatch, capsys):
    """What install remembers to put back is no secret: a key or header of the user's stays in the
    install's backup only, and uninstall says where; their model comes back."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"env": {"ANTHROPIC_MODEL": "claude-opus-4-1", "ANTHROPIC_AUTH_TOKEN": "sk-ant-mine"}}
    settings.write_text(json.dumps(mine, indent=2) + "\n")
    install_once("claude-code", sample_input(SAMPLE_KEY), home)
    state = home / inst.REPLACED.removeprefix("~/")
    assert "sk-ant-mine" not in state.read_text() and "claude-opus-4-1" in state.read_text()
    assert os.stat(state).st_mode & 0o777 == 0o600

    assert inst.uninstall(SPECS, GATEWAY, ["claude-code"], yes=True, stamp="2") == 0
    assert json.loads(settings.read_text()) == {"env": {"ANTHROPIC_MODEL": "claude-opus-4-1"}}
    assert "sk-ant-mine" in (settings.parent / "settings.json.bak-1").read_text()
    assert not state.exists()
    out = capsys.readouterr().out
    assert f"{settings}: our entries removed and your own env.ANTHROPIC_MODEL put back (backup: " in out
    assert (
        f"{settings}: your own env.ANTHROPIC_AUTH_TOKEN from before the install is not put back (we never store a "
        "credential); it is in settings.json.bak-1"
    ) in out


def test_a_file_installed_before_values_were_remembered_never_gets_our_value_back_as_theirs(tmp_path, monkeypatch):
    """An install by an older installer left no record: the next install finds ours in the file and
    remembers nothing, so uninstall removes our default model instead of putting it back."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    bundle = services.bundle("llm", sample_input(SAMPLE_KEY), services.render("llm", sample_input(SAMPLE_KEY)), None)
    assert inst.install(bundle, stamp="0") == 0  # no specs: nothing remembered, as before this fix
    install_once("llm", sample_input(SAMPLE_KEY), home)
    assert not (home / inst.REPLACED.removeprefix("~/")).exists()
    assert inst.uninstall(SPECS, GATEWAY, ["llm"], yes=True, stamp="2") == 0
    assert not (home / ".config" / "io.datasette.llm" / "default_model.txt").exists()


def test_an_object_holding_the_users_credential_is_never_remembered_their_list_is(tmp_path, monkeypatch, capsys):
    """OpenHands' `llm` and `tools` are replaced whole: the user's `llm` holds their api_key, so it
    stays in the install's backup only (uninstall says where); their `tools` list comes back as they
    wrote it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".openhands" / "agent_settings.json"
    settings.parent.mkdir()
    settings.write_text(
        '{\n  "llm": {"model": "openai/gpt-4o", "api_key": "sk-mine"},\n'
        '  "tools": [\n    // the shell\n    {"name": "terminal", "params": {}}\n  ]\n}\n'
    )
    install_once("openhands", sample_input(SAMPLE_KEY), home)
    state = (home / inst.REPLACED.removeprefix("~/")).read_text()
    assert "sk-mine" not in state and "openai/gpt-4o" not in state and "terminal" in state

    assert inst.uninstall(SPECS, GATEWAY, ["openhands"], yes=True, stamp="2") == 0
    assert settings.read_text() == '{\n  "tools": [\n    // the shell\n    {"name": "terminal", "params": {}}\n  ]\n}\n'
    assert "sk-mine" in (settings.parent / "agent_settings.json.bak-1").read_text()
    out = capsys.readouterr().out
    assert f"{settings}: our entries removed and your own tools put back (backup: " in out
    assert f"{settings}: your own llm from before the install is not put back (we never store a credential)" in out


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("max_tokens", False),
        ("maxOutputTokens", False),
        ("CLAUDE_CODE_MAX_OUTPUT_TOKENS", False),
        ("access_tokens", True),
        ("auth_tokens", True),
        ("refreshTokens", True),
        ("ANTHROPIC_AUTH_TOKEN", True),
        ("api_key", True),
        ("model", False),
    ],
)
def test_a_limit_on_tokens_is_no_credential_a_list_of_tokens_is(name, secret):
    """Only a limit (max…tokens) escapes the credential rule, so a user's access or refresh tokens
    are never written to the record of what to put back."""
    assert inst._secret_name(name) is secret


def edit_one_of_ours(client: str, file: str, entry: str, old: str, new: str, tmp_path, monkeypatch) -> tuple:
    """Install twice (the second a rotated key and a new version: the record follows it), then the
    user changes `old` to `new` in the entry of ours that `entry` matches whole: (home, the file,
    the entry as the user left it)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    install_once(client, sample_input(SAMPLE_KEY), home)
    install_once(client, replace(sample_input(SAMPLE_KEY.replace("SAMPLE", "OTHER")), version="second"), home)
    path = home / file.removeprefix("~/")
    text = path.read_text()
    [ours] = re.findall(entry, text, re.S)
    edited = ours.replace(old, new)
    assert edited != ours
    path.write_text(text.replace(ours, edited))
    written = (home / inst.WRITTEN.removeprefix("~/")).read_text()
    assert "gp-" not in written and "OTHER" not in written  # a key only as its salted hash
    return home, path, edited


def kept_file(text: str, file: str) -> dict:
    if file.endswith(".json"):
        return json.loads(text)
    return tomllib.loads(text) if file.endswith(".toml") else yaml.safe_load(text)


# An entry of ours the user changed since the install, and one they left alone, in each shape
# uninstall finds ours by: entries of a shared JSON list, MCP server entries (JSON objects, TOML
# tables and lists of tables, YAML lists and mappings), and a marked YAML block. (client, file, our
# entry as a regex matching it whole, the user's edit in it, the untouched one's text, the name
# uninstall gives the changed one.)
LATER_ENTRY_EDITS = [
    (
        "qwen-code",
        "~/.qwen/settings.json",
        r'\{\n        "id": "qwen3-32b",.*?\n      \}',
        ('"contextWindowSize": 32768', '"contextWindowSize": 65536'),
        '"id": "llama-3.1-8b"',
        "modelProviders.openai[qwen3-32b]",
    ),
    (
        "factory-droid",
        "~/.factory/settings.json",
        r'\{\n      "model": "llama-3.1-8b",.*?\n    \}',
        ('"maxOutputTokens": 4096', '"maxOutputTokens": 2048'),
        '"model": "qwen3-32b"',
        "customModels[llama-3.1-8b [Team Gateway]]",
    ),
    (
        "claude-code",
        "~/.claude.json",
        r'"teamgw-docs": \{.*?\n    \}',
        ("https://llm.example.com/mcp/docs", "http://127.0.0.1:9/my-docs"),
        "teamgw-tracker",
        "mcpServers.teamgw-docs",
    ),
    (
        "codex",
        "~/.codex/config.toml",
        r"\[mcp_servers\.teamgw-docs\]\n(?:[^\[\n][^\n]*\n)+",
        ("https://llm.example.com/mcp/docs", "http://127.0.0.1:9/my-docs"),
        "teamgw-tracker",
        "[mcp_servers.teamgw-docs]",
    ),
    (
        "mistral-vibe",
        "~/.vibe/config.toml",
        r'\[\[mcp_servers\]\]\nname = "teamgw-docs"\n.*?(?=\n\[\[|\Z)',
        ("https://llm.example.com/mcp/docs", "http://127.0.0.1:9/my-docs"),
        "teamgw-tracker",
        "mcp_servers.teamgw-docs",
    ),
    (
        "continue",
        "~/.continue/config.yaml",
        r"- name: teamgw-docs\n(?:  [^\n]*\n)+",
        ("https://llm.example.com/mcp/docs", "http://127.0.0.1:9/my-docs"),
        "teamgw-tracker",
        "mcpServers.teamgw-docs",
    ),
    (
        "goose",
        "~/.config/goose/config.yaml",
        r"  teamgw-docs:\n(?:    [^\n]*\n)+",
        ("https://llm.example.com/mcp/docs", "http://127.0.0.1:9/my-docs"),
        "teamgw-tracker",
        "extensions.teamgw-docs",
    ),
    # The models between our markers in Continue's list: the block is ours whole; its MCP servers
    # in the same file stay untouched and go.
    (
        "continue",
        "~/.continue/config.yaml",
        r"# >>> team-gateway models .*?# <<< team-gateway models\n",
        ("contextLength: 32768", "contextLength: 65536"),
        "teamgw-tracker",
        "models",
    ),
]


@pytest.mark.parametrize(
    ("client", "file", "entry", "edit", "untouched", "name"),
    LATER_ENTRY_EDITS,
    ids=[f"{case[0]}:{case[5]}" for case in LATER_ENTRY_EDITS],
)
def test_uninstall_keeps_an_entry_of_ours_the_user_changed_and_removes_the_others(
    client, file, entry, edit, untouched, name, tmp_path, monkeypatch, capsys
):
    home, path, edited = edit_one_of_ours(client, file, entry, *edit, tmp_path, monkeypatch)
    assert untouched in path.read_text()

    assert inst.uninstall(SPECS, GATEWAY, [client], yes=True, stamp="2") == 0
    after = path.read_text() if path.exists() else ""
    assert edited in after, after  # byte for byte
    assert untouched not in after, after
    assert None not in kept_file(after, file).values()  # still loads: no list left empty (null)
    assert f"{path}: kept your later change to {name} as it is" in capsys.readouterr().out
    assert not (home / inst.WRITTEN.removeprefix("~/")).exists()


def test_uninstall_keeps_a_ccswitch_row_of_ours_the_user_changed_and_removes_the_others(tmp_path, monkeypatch, capsys):
    """CC Switch's editor changed our Claude Code provider (another model): that row stays as it is,
    our rows for the other apps go."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    db = make_ccswitch_db(home)
    install_once("cc-switch", sample_input(SAMPLE_KEY), home)
    install_once("cc-switch", replace(sample_input(SAMPLE_KEY.replace("SAMPLE", "OTHER")), version="second"), home)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE providers SET settings_config = replace(settings_config, '\"qwen3-32b\"', '\"llama-3.1-8b\"'),"
            " is_current = 1 WHERE id = 'teamgw' AND app_type = 'claude'"
        )
    edited = conn.execute("SELECT * FROM providers WHERE app_type = 'claude'").fetchall()
    assert {r[0] for r in conn.execute("SELECT app_type FROM providers WHERE id = 'teamgw'")} == {
        "claude",
        "codex",
        "opencode",
    }
    conn.close()
    written = home / inst.WRITTEN.removeprefix("~/")
    assert "gp-" not in (written.read_text() if written.exists() else "")

    assert inst.uninstall(SPECS, GATEWAY, ["cc-switch"], yes=True, stamp="2") == 0
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT * FROM providers").fetchall() == edited  # every column as the user left it
    conn.close()
    out = capsys.readouterr().out
    assert f"{db}: 2 provider row(s) of Team Gateway removed (backup: cc-switch.db.bak-2)" in out
    assert f"{db}: kept your later change to Team Gateway (claude) as it is" in out


def test_the_users_entry_ours_took_the_place_of_does_not_come_back_beside_ours_they_changed(
    tmp_path, monkeypatch, capsys
):
    """Ours replaced the user's own `qwen3-32b` in Qwen Code's list; they changed ours since: it
    stays, and theirs from before the install is not put back beside it (two entries, one id)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    settings = home / ".qwen" / "settings.json"
    settings.parent.mkdir()
    mine = {"id": "gpt-4o", "baseUrl": "https://api.openai.com/v1"}
    theirs = {"id": "qwen3-32b", "name": "My own", "baseUrl": "http://127.0.0.1:9/v1"}
    settings.write_text(json.dumps({"modelProviders": {"openai": [theirs, mine]}}, indent=2) + "\n")
    install_once("qwen-code", sample_input(SAMPLE_KEY), home)
    data = json.loads(settings.read_text())
    ours = data["modelProviders"]["openai"][0]
    ours["generationConfig"]["contextWindowSize"] = 65536
    settings.write_text(json.dumps(data, indent=2) + "\n")

    assert inst.uninstall(SPECS, GATEWAY, ["qwen-code"], yes=True, stamp="2") == 0
    assert json.loads(settings.read_text()) == {"modelProviders": {"openai": [ours, mine]}}
    out = capsys.readouterr().out
    assert f"{settings}: kept your later change to modelProviders.openai[qwen3-32b] as it is" in out
    assert "put back" not in out
