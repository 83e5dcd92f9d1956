"""Install, change the served window, install again: for every client with files, the real `sh`
installer (fetched from the real portal, which also serves the gateway) run twice in one throwaway
HOME leaves exactly one entry per model with the new window, and the doctor, asking the real
gateway's /v1/models, passes; a value corrupted by hand makes it fail, naming the file and line."""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from channels.models import Model, ModelRoute
from clientconfigs import installer
from clientconfigs.installer import install as inst
from keys.models import Key

from .conftest import make_ccswitch_db
from .test_end_to_end import installed, portal  # noqa: F401 - the fixture
from .test_installer import fetch, run_sh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
CLIENTS_WITH_FILES = sorted(installer.probes())


def entries(home: Path, probes: list[dict], gateway: str) -> dict[str, list[tuple[str, int | None]]]:
    """Every model entry each probed file lists for our gateway: {file: [(model, window)]}."""
    host = re.sub(r"^https?://", "", gateway).split("/")[0]
    out: dict[str, list[tuple[str, int | None]]] = {}
    for p in probes:
        if not p.get("models"):
            continue
        data, text = inst.load(str(home / p["file"].removeprefix("~/")), p["format"])
        out[p["file"]] = [(e["name"], e["ctx"]) for e in inst.entries_of(p, data, text, host)]
    return out


def users_file(tmp_path: Path, file: str, before: str) -> tuple[Path, Path]:
    """A fresh home holding the user's own `file` (a `~/` path) with `before` in it: (home, the file)."""
    home = tmp_path / "home"
    home.mkdir()
    path = home / file.removeprefix("~/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(before)
    return home, path


def doctor(url: str, home: Path, client: str):
    return run_sh(fetch(url + "/connect/install.sh"), home, "--check", client)


@pytest.mark.parametrize("client", CLIENTS_WITH_FILES)
def test_a_second_install_after_a_window_change_leaves_one_entry_per_model_with_the_new_window(
    portal,  # noqa: F811
    tmp_path,
    alice,
    client,
):
    url, _ = portal
    home = tmp_path / "home"
    home.mkdir()
    probes = installer.probes()[client]
    if client == "cc-switch":
        make_ccswitch_db(home)  # CC Switch is installed and has been started once
    first = installed(url, home, alice, client)
    assert doctor(url, home, client).returncode == 0
    windows = {p["file"]: bool(p.get("model_context")) for p in probes}
    for file, listed in entries(home, probes, url).items():
        assert listed == [("qwen3-32b", 8192 if windows[file] else None)], (file, listed)

    for route in ModelRoute.objects.all():  # an admin serves a larger window (save: the gateway hears it)
        route.context_window = 16384
        route.save()
    second = installed(url, home, alice, client)

    for file, listed in entries(home, probes, url).items():
        assert listed == [("qwen3-32b", 16384 if windows[file] else None)], (file, listed)
    check = doctor(url, home, client)
    assert check.returncode == 0, check.stdout + check.stderr
    if not any(windows.values()):  # llm's format has no window: the doctor checks the model names
        assert "model qwen3-32b: reachable" in check.stdout
    else:
        assert "context window 16384 agrees with the server" in check.stdout
    assert "listed" not in check.stdout  # no duplicates

    # Neither run printed the key it minted: only its masked form.
    printed = first.stdout + second.stdout + first.stderr + second.stderr
    assert re.findall(r"gp-[A-Za-z0-9_-]{30,}", printed) == []
    assert all(k.masked in printed for k in Key.objects.filter(owner=alice, client=client))
    # The second install replaced the first install's key instead of adding one.
    assert "it replaces the key minted before for this client" in second.stdout
    replaced = Key.objects.get(owner=alice, client=client, rotated_to__isnull=False)
    # When the old key stops, as the pages say it: to the minute, in UTC (no ISO microseconds).
    assert f"which stops at {replaced.expires_at.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC\n" in second.stdout
    assert Key.objects.active().filter(owner=alice, client=client, name=f"{client}@e2e").count() == 1

    if not any(windows.values()):  # a model renamed by hand: the doctor names the file and the line
        target = next(p["file"] for p in probes if p.get("models"))
        path = home / target.removeprefix("~/")
        # The first model name as a whole value (a YAML line, a quoted JSON/TOML/env value).
        path.write_text(re.sub(r"qwen3-32b(?=['\"\n])", "qwen3-33b", path.read_text(), count=1))
        broken = doctor(url, home, client)
        assert broken.returncode == 1, broken.stdout
        assert re.search(re.escape(target) + r" line \d+: model qwen3-33b is not available", broken.stdout)
        return
    # Corrupt the window by hand: the doctor names the file and the line.
    target = next(p["file"] for p in probes if p.get("models") and p.get("model_context"))
    path = home / target.removeprefix("~/")
    if client == "cc-switch":  # a database: edited through SQL, as CC Switch's own editor would
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("UPDATE providers SET settings_config = replace(settings_config, '16384', '512')")
        conn.close()
    else:
        path.write_text(path.read_text().replace("16384", "512"))
    broken = doctor(url, home, client)
    assert broken.returncode == 1, broken.stdout
    wrong = r" line \d+: model qwen3-32b has context window 512 in the file, 16384 on the server"
    assert re.search(re.escape(target) + wrong, broken.stdout), broken.stdout


# The user's own value of a setting our install replaces, as they had the file before (the first
# install over it remembers it), and the names uninstall says it put back; a file that had no such
# value gets the key removed. Objects and lists come back as the user wrote them, not only strings.
USERS_VALUES = [
    ("llm", "~/.config/io.datasette.llm/default_model.txt", "gpt-4o-mini\n", None),
    (
        "codex",
        "~/.codex/config.toml",
        'approval_policy = "on-request"\nmodel = "o3"\n\n[tui]\nnotifications = true\n',
        "model",
    ),
    ("codex", "~/.codex/config.toml", 'approval_policy = "on-request"\n', None),  # no model: ours goes
    (
        "claude-code",
        "~/.claude/settings.json",
        # theirs keeps its place among the user's own members
        '{\n  "env": {\n    "ANTHROPIC_MODEL": "claude-opus-4-1",\n    "MY_FLAG": "1"\n  },\n  "theme": "dark"\n}\n',
        "env.ANTHROPIC_MODEL",
    ),
    (
        "opencode",
        "~/.config/opencode/opencode.json",
        '{\n  "model": "anthropic/claude-sonnet-4",\n  "theme": "tokyonight"\n}\n',
        "model",
    ),
    ("aider", "~/.aider.conf.yml", "model: gpt-4o\ndark-mode: true\n", "model"),
    (
        "goose",
        "~/.config/goose/config.yaml",
        "GOOSE_PROVIDER: openai\nGOOSE_MODEL: gpt-4o\nGOOSE_MODE: auto\n",
        "GOOSE_PROVIDER, GOOSE_MODEL",
    ),
    # An object ours replaces whole: Crush's models.large/small, written in the user's own layout.
    (
        "crush",
        "~/.config/crush/crush.json",
        '{\n  "models": {\n    "large": { "model": "gpt-4o", "provider": "openai" },\n'
        '    "small": {\n      "model": "gpt-4o-mini",\n      "provider": "openai",\n      "max_tokens": 4096\n    }\n'
        '  },\n  "options": { "tui": { "compact_mode": true } }\n}\n',
        "models.large, models.small",
    ),
    # A list ours replaces whole: OpenHands' tools.
    (
        "openhands",
        "~/.openhands/agent_settings.json",
        '{\n  "kind": "Agent",\n  "tools": [\n    {"name": "terminal", "params": {}},\n'
        '    {"name": "browser_tool_set", "params": {"headless": true}}\n  ]\n}\n',
        "kind, tools",
    ),
    # A string where ours puts an object (Qwen Code's older top-level `model`): it goes back whole.
    ("qwen-code", "~/.qwen/settings.json", '{\n  "model": "qwen3-coder-plus",\n  "theme": "Default"\n}\n', "model"),
    # An entry of a list shared with ours, that ours took the place of (the same model id).
    (
        "qwen-code",
        "~/.qwen/settings.json",
        '{\n  "modelProviders": {\n    "openai": [\n'
        '      { "id": "qwen3-32b", "name": "My own", "baseUrl": "http://127.0.0.1:9/v1" },\n'
        '      { "id": "gpt-4o", "baseUrl": "https://api.openai.com/v1" }\n    ]\n  }\n}\n',
        "modelProviders.openai[0]",
    ),
    # A TOML table ours replaces (Codex's [analytics], with a table nested in it), between the user's.
    (
        "codex",
        "~/.codex/config.toml",
        'model = "o3"\n\n[tui]\nnotifications = true\n\n[analytics]\nenabled = true\nflush = [1, 2]\n\n'
        '[analytics.labels]\nteam = "infra"\n\n[history]\npersistence = "none"\n',
        "model, [analytics], [analytics.labels]",
    ),
    # A list of tables at the name ours uses ([[analytics]]), last in the file.
    (
        "codex",
        "~/.codex/config.toml",
        '[tui]\nnotifications = true\n\n[[analytics]]\nsink = "a"\n\n[[analytics]]\nsink = "b"\n',
        "[analytics], [analytics]",
    ),
    # YAML: a list and a mapping nested under keys ours sets (Aider's model and weak-model).
    (
        "aider",
        "~/.aider.conf.yml",
        "dark-mode: true\nmodel:\n  - gpt-4o\n  - o3\n\nweak-model:\n  name: gpt-4o-mini\n  temperature: 0\n"
        "auto-commits: false\n",
        "model, weak-model",
    ),
]


@pytest.mark.parametrize(("client", "file", "before", "names"), USERS_VALUES)
def test_uninstall_after_two_installs_puts_back_the_users_own_value_the_install_replaced(
    portal,  # noqa: F811
    tmp_path,
    alice,
    client,
    file,
    before,
    names,
):
    url, _ = portal
    home, path = users_file(tmp_path, file, before)
    installed(url, home, alice, client)
    assert path.read_text() != before  # ours replaced theirs
    for _ in range(2):  # again, each with a rotated key: ours must not become "theirs"
        assert "it replaces the key minted before" in installed(url, home, alice, client).stdout
    state = home / inst.REPLACED.removeprefix("~/")
    if state.exists():  # only what the user had, never a key
        assert stat.S_IMODE(state.stat().st_mode) == 0o600
        assert "gp-" not in state.read_text()
        assert "qwen3-32b" not in state.read_text() or "qwen3-32b" in before  # ours never, theirs maybe

    gone = run_sh(fetch(url + "/connect/install.sh"), home, "--uninstall", client, "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert path.read_text() == before
    line = next(ln for ln in gone.stdout.splitlines() if f"{path}:" in ln)
    if client == "llm":
        assert "your own value put back (backup:" in line, gone.stdout
    elif names is None:  # nothing of theirs to put back
        assert "our entries removed (backup:" in line, gone.stdout
    else:  # the keys by name, never their values
        assert f"our entries removed and your own {names} put back (backup:" in line, gone.stdout
    assert not state.exists()
    [backup] = sorted(path.parent.glob(path.name + ".bak-*"), key=lambda p: p.name)[-1:]
    assert backup.read_text() != before  # the uninstall's own backup holds what it removed


# The user changes a setting of ours after the install (another model, their own table again):
# uninstall leaves that change byte for byte, neither taking it out nor putting their value from
# before the install back over it, and says so; the rest of ours goes and the rest of theirs comes
# back. (client, file, before, a setting of ours as installed, the user's later edit of it, its
# value before the install ("" none, None: the file is one value), the setting as uninstall names
# it, what it says it put back.)
LATER_EDITS = [
    (
        "claude-code",
        "~/.claude/settings.json",
        '{\n  "env": {\n    "ANTHROPIC_MODEL": "claude-opus-4-1",\n    "MY_FLAG": "1"\n  },\n  "theme": "dark"\n}\n',
        r'"ANTHROPIC_MODEL": "[^"]*"',
        '"ANTHROPIC_MODEL":  "my-later-model"',
        '"ANTHROPIC_MODEL": "claude-opus-4-1"',
        "env.ANTHROPIC_MODEL",
        None,
    ),
    (
        "codex",
        "~/.codex/config.toml",
        'model = "o3"\n\n[tui]\nnotifications = true\n\n[analytics]\nenabled = true\nflush = [1, 2]\n',
        r"\[analytics\]\nenabled = false",
        "[analytics]\nenabled = false\nflush = [3]  # mine since",
        "[analytics]\nenabled = true\nflush = [1, 2]",
        "[analytics]",
        "model",  # not edited: theirs comes back
    ),
    (
        "codex",
        "~/.codex/config.toml",
        'approval_policy = "on-request"\nmodel = "o3"\n',
        r'(?m)^model = "[^"]*"$',
        'model = "gpt-5"  # mine since',
        'model = "o3"',
        "model",
        None,
    ),
    (
        "aider",
        "~/.aider.conf.yml",
        "model: gpt-4o\ndark-mode: true\n",
        r"(?m)^model: .*$",
        "model:   my-later-model  # mine since",
        "model: gpt-4o",
        "model",
        None,
    ),
    # Lists of tables (Mistral Vibe): a top-level key of ours among the user's items.
    (
        "mistral-vibe",
        "~/.vibe/config.toml",
        'active_model = "mistral-medium"\nvim_keybindings = true\n',
        r'(?m)^active_model = "[^"]*"$',
        'active_model = "devstral"  # mine since',
        'active_model = "mistral-medium"',
        "active_model",
        None,
    ),
    # dotenv: the user put a key of their own in place of ours (none there before the install).
    (
        "qwen-code",
        "~/.qwen/.env",
        "MINE=1\n",
        r"(?m)^TEAM_GATEWAY_API_KEY=.*$",
        "TEAM_GATEWAY_API_KEY=gp-minted-by-hand",
        "",
        "TEAM_GATEWAY_API_KEY",
        None,
    ),
    # A one-value file: the user picked another of our models since (`llm models default …`).
    ("llm", "~/.config/io.datasette.llm/default_model.txt", "gpt-4o-mini\n", r".+", "teamgw/my-later", None, "", None),
]


def parsed(text: str, file: str):
    if file.endswith(".json"):
        return json.loads(text)
    if file.endswith(".env"):
        return dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))
    return tomllib.loads(text) if file.endswith(".toml") else yaml.safe_load(text)


@pytest.mark.parametrize(("client", "file", "before", "ours", "edit", "theirs", "name", "names"), LATER_EDITS)
def test_uninstall_keeps_a_setting_the_user_changed_after_the_install_as_they_changed_it(
    portal,  # noqa: F811
    tmp_path,
    alice,
    client,
    file,
    before,
    ours,
    edit,
    theirs,
    name,
    names,
):
    url, _ = portal
    home, path = users_file(tmp_path, file, before)
    installed(url, home, alice, client)
    installed(url, home, alice, client)  # a re-install (a rotated key) remembers its own values
    written = home / inst.WRITTEN.removeprefix("~/")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert "gp-" not in written.read_text()  # our key only as a hash
    text, count = re.subn(ours, edit, path.read_text(), count=1)
    assert count == 1, text
    path.write_text(text)

    gone = run_sh(fetch(url + "/connect/install.sh"), home, "--uninstall", client, "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    after = path.read_text()
    if theirs is None:  # the whole file is the user's now
        assert after == text
        assert f"{path}: kept your later change to it as it is" in gone.stdout, gone.stdout
        # said in the plan too, before the question (it is not among the files to change)
        assert f"leave as it is (you changed our settings in it since the install): {path}" in gone.stdout
    else:  # their edit as they wrote it, the rest as before the install
        assert edit in after and (not theirs or theirs not in after), after
        expected = before.replace(theirs, edit) if theirs else before + edit + "\n"
        assert parsed(after, file) == parsed(expected, file), after
        assert f"{path}: kept your later change to {name} as it is" in gone.stdout, gone.stdout
    line = next(ln for ln in gone.stdout.splitlines() if f"{path}:" in ln)
    if names:
        assert f"our entries removed and your own {names} put back (backup:" in line, gone.stdout
    assert not written.exists() and not (home / inst.REPLACED.removeprefix("~/")).exists()


def test_uninstall_without_a_later_change_still_puts_back_the_users_value(portal, tmp_path, alice):  # noqa: F811
    """The control: the same install and uninstall with no edit between restores the file as it was."""
    url, _ = portal
    before = LATER_EDITS[0][2]
    home, path = users_file(tmp_path, "~/.claude/settings.json", before)
    installed(url, home, alice, "claude-code")
    gone = run_sh(fetch(url + "/connect/install.sh"), home, "--uninstall", "claude-code", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert path.read_text() == before
    assert "kept your later change" not in gone.stdout


@pytest.mark.parametrize(
    ("client", "profile"),
    [("claude-code", "~/.claude/teamgw-{}.json"), ("codex", "~/.codex/teamgw-{}.config.toml")],
)
def test_a_second_install_after_an_admin_removed_a_model_deletes_its_per_model_file(
    portal,  # noqa: F811
    tmp_path,
    alice,
    client,
    profile,
):
    url, _ = portal
    route = ModelRoute.objects.get(model__name="qwen3-32b")
    gone = Model.objects.create(name="retired-model")
    ModelRoute.objects.create(model=gone, channel=route.channel, upstream_model="fake-model", context_window=8192)
    home = tmp_path / "home"
    home.mkdir()
    installed(url, home, alice, client)
    stale, kept = (home / profile.format(name).removeprefix("~/") for name in ("retired-model", "qwen3-32b"))
    assert stale.exists() and kept.exists()
    own = stale.with_name(stale.name.replace("teamgw-", "my-"))  # the user's own profile beside ours
    own.write_text(stale.read_text())

    gone.enabled = False  # the admin retires the model
    gone.save()
    again = installed(url, home, alice, client)

    assert not stale.exists(), again.stdout
    assert f"{stale}: deleted (backup: {stale.name}.bak-" in again.stdout
    assert kept.exists() and "retired-model" in own.read_text()
    check = doctor(url, home, client)
    assert check.returncode == 0, check.stdout + check.stderr
