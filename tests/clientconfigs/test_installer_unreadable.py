"""The real `sh` installer, fetched from a live test server, meets a user's YAML or .env file that
its line-based merges cannot edit safely (a tab in an indent, a second document, an unclosed quote,
a [ ] running back to the margin, a key of ours set twice): it leaves that file byte for byte as it
was, says which file and line, configures the client's other files, and exits non-zero; again on a
second run, with or without PyYAML on the developer's machine. The doctor and uninstall report such
a file too; valid files are still merged as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clientconfigs import services
from clientconfigs.models import KeyMode

from .test_installer import backups, fetch, install, run_sh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ENV_FILE = ".config/team-gateway/env"
# (client, the user's broken file, its text, the problem the installer names, a file of the same
# client that still gets configured)
BROKEN = [
    ("aider", ".aider.conf.yml", "model: gpt-4o\nread:\n\t- CONVENTIONS.md\n", "line 3: a tab in the indent",
     ".aider.model.metadata.json"),
    ("aider", ".aider.conf.yml", "openai-api-base: http://a/v1\ndark-mode: true\nopenai-api-base: http://b/v1\n",
     "line 3: openai-api-base is set a second time (first on line 1)", ".aider.model.metadata.json"),
    ("aider", ".aider.conf.yml", "---\nmodel: gpt-4o\n", "line 1: a document marker (---)",
     ".aider.model.metadata.json"),
    ("continue", ".continue/config.yaml", "name: Mine\nversion: 0.0.1\n---\nname: Other\n",
     "line 3: a document marker (---)", ".continue/.env"),
    ("continue", ".continue/.env", "OTHER_SECRET='keep-me\n", "line 1: a quote in the value is not closed",
     ".continue/config.yaml"),
    ("goose", ".config/goose/config.yaml", "GOOSE_MODEL: 'gpt-4o\nGOOSE_PROVIDER: openai\n",
     "line 1: a quoted value is not closed on its line", ".config/goose/custom_providers/custom_teamgw.json"),
    ("goose", ".config/goose/config.yaml", "tags: {team: a,\nGOOSE_MODEL: gpt-4o}\n",
     "lines 1-2: a [ ] or { } value runs back to the left margin", ".config/goose/custom_providers/custom_teamgw.json"),
    ("goose", ENV_FILE, "source ~/.secrets\n", "line 1: not a NAME=value line",
     ".config/goose/custom_providers/custom_teamgw.json"),
    ("copilot-cli", ENV_FILE, "export EDITOR=vim\nexport PS1='$ \n", "line 2: a quote in the value is not closed",
     None),
    ("qwen-code", ".qwen/.env", "DEBUG=1\nnot an assignment\n", "line 2: not a NAME=value line", ".qwen/settings.json"),
    ("llm", ".config/io.datasette.llm/extra-openai-models.yaml", "- model_id: mine\n\tapi_base: http://x\n",
     "line 2: a tab in the indent", ".config/io.datasette.llm/default_model.txt"),
    ("codex", ".codex/config.toml", "model = 'gpt-4o\napproval_policy = \"never\"\n",
     "line 1 column 9: a quoted string is not closed on its line", None),
]  # fmt: skip


@pytest.fixture(params=["with PyYAML", "standard library only"])
def env(request, tmp_path) -> dict[str, str]:
    """The PATH the installer runs with: this Python (PyYAML importable), or the same one started
    without site-packages, as on a developer's machine with a bare python3."""
    if request.param == "with PyYAML":
        return {}
    bare = tmp_path / "bare-python"
    bare.mkdir()
    (bare / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (bare / "python3").chmod(0o755)
    return {"PATH": f"{bare}:/usr/bin:/bin"}


def users_file(home: Path, name: str, text: str) -> Path:
    path = home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run_install(live_server, home, alice, client, env):
    _, token = services.issue_download_token(alice, client, key_mode=KeyMode.MINT, key_name="laptop")
    return run_sh(fetch(live_server.url + "/connect/install.sh"), home, token, env=env)


@pytest.mark.parametrize(("client", "name", "text", "problem", "other"), BROKEN)
def test_a_file_the_installer_cannot_edit_safely_is_left_byte_for_byte_and_named(
    live_server, settings, home, alice, catalog, env, client, name, text, problem, other
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = users_file(home, name, text)
    before = target.read_bytes()
    for _ in range(2):  # a second run refuses it again, and configures the rest again
        result = run_install(live_server, home, alice, client, env)
        assert result.returncode == 1, result.stdout + result.stderr
        assert target.read_bytes() == before and backups(target) == []
        assert f"{target}: left unchanged, the installer cannot edit it safely ({problem}" in result.stdout
        assert "Fix that and run a new install command from the Connect page" in result.stdout
        if other:
            assert f"✓ {home / other}" in result.stdout
        assert "minted for this machine" in result.stdout


def test_the_bare_python_has_no_pyyaml(env):
    if env:
        path = Path(env["PATH"].split(":")[0]) / "python3"
        done = subprocess.run([str(path), "-c", "import yaml"], capture_output=True, timeout=30)
        assert done.returncode != 0


VALID_AIDER = """# mine: it's my config
model: gpt-4o
read: [CONVENTIONS.md,
       README.md]
prompt: |
  "Be terse," she said.
  \tTabs inside a block are text.
openai-api-base: http://old/v1
dark-mode: true
"""


def test_a_valid_yaml_file_with_flow_lists_block_text_and_apostrophes_is_still_merged_and_stays_merged(
    live_server, settings, home, alice, catalog, env
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = users_file(home, ".aider.conf.yml", VALID_AIDER)
    for _ in range(2):
        result = run_install(live_server, home, alice, "aider", env)
        assert result.returncode == 0, result.stdout + result.stderr
        config = yaml.safe_load(target.read_text())
        assert config["openai-api-base"] == live_server.url + "/v1"
        assert config["read"] == ["CONVENTIONS.md", "README.md"] and config["dark-mode"] is True
        assert config["prompt"].startswith('"Be terse," she said.')
        assert target.read_text().count("openai-api-base:") == 1
    assert "it's my config" in target.read_text()


def test_doctor_and_uninstall_name_a_file_the_installer_cannot_edit_and_leave_it(
    live_server, settings, home, alice, catalog
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    script = fetch(live_server.url + "/connect/install.sh")
    result = install(live_server, home, alice, "aider", key_mode=KeyMode.MINT, key_name="desk")
    assert result.returncode == 0, result.stdout + result.stderr
    target = home / ".aider.conf.yml"
    broken = target.read_text() + "editor: 'vim\n"
    target.write_text(broken)

    check = run_sh(script, home, "--check", "aider")
    assert check.returncode == 1
    line = broken.count("\n")
    assert (
        f"~/.aider.conf.yml: the installer cannot edit it safely (line {line}: a quoted value is not closed "
        "on its line); fix that and install again"
    ) in check.stdout

    gone = run_sh(script, home, "--uninstall", "aider", "--yes")
    assert gone.returncode == 1
    assert f"{target}: left unchanged (line {line}: a quoted value is not closed on its line)" in gone.stdout
    assert target.read_text() == broken


GOOSE_OWN = """GOOSE_PROVIDER: openai
GOOSE_MODEL: gpt-4o
extensions:
  fetch:
    args:
    - mcp-server-fetch
    cmd: uvx
    description: 'it''s the fetch server'
    enabled: true
    envs: {}
    name: fetch
    type: stdio
GOOSE_MODE: smart_approve  # it's Goose's own
"""
CONTINUE_OWN = """---
name: Mine
version: 0.0.1
schema: v1
models:
  - name: Local
    provider: ollama
    model: llama3
rules:
  - name: quotes
    rule: >
      Say "hello and
      it's fine.
"""


@pytest.mark.parametrize(
    ("client", "name", "text", "kept"),
    [
        ("goose", ".config/goose/config.yaml", GOOSE_OWN, {"GOOSE_MODE": "smart_approve"}),
        ("continue", ".continue/config.yaml", CONTINUE_OWN, {"name": "Mine"}),
    ],
)
def test_a_valid_file_as_the_client_itself_writes_it_is_still_merged(
    live_server, settings, home, alice, catalog, env, client, name, text, kept
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = users_file(home, name, text)
    result = run_install(live_server, home, alice, client, env)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(target.read_text())
    assert kept.items() <= config.items()
    assert target.read_text() != text and len(backups(target)) == 1


# The user's journey after a refusal: their file with their own settings and comments and one
# broken line; they fix that line and run a new install command, then another.
# (client, file, broken text, the problem named (lines of the user's file), the fixed text, what of
# theirs must stay, what of ours must be there once)
FIXED = [
    ("continue", ".continue/config.yaml",
     "name: Mine\nversion: 0.0.1\nschema: v1\n# my rules, keep them\nrules:\n\t- Be terse.\n",
     "line 6: a tab in the indent",
     "name: Mine\nversion: 0.0.1\nschema: v1\n# my rules, keep them\nrules:\n  - Be terse.\n",
     "# my rules, keep them\nrules:\n  - Be terse.\n", "model: qwen3-32b\n"),
    ("qwen-code", ".qwen/settings.json",
     '{\n  // my theme, keep it\n  "ui": {"theme": "GitHub"}\n  "general": {"vimMode": true}\n}\n',
     "not JSON, even with comments: line 4 column 3: expected ',' or '}'",
     '{\n  // my theme, keep it\n  "ui": {"theme": "GitHub"},\n  "general": {"vimMode": true}\n}\n',
     '  // my theme, keep it\n  "ui": {"theme": "GitHub"},\n', '"modelProviders": {'),
    ("codex", ".codex/config.toml",
     'hide_agent_reasoning = true\n\n# my history setting, keep it\n[history]\npersistence = "none\n',
     "line 5 column 15: a quoted string is not closed on its line",
     'hide_agent_reasoning = true\n\n# my history setting, keep it\n[history]\npersistence = "none"\n',
     '# my history setting, keep it\n[history]\npersistence = "none"\n', "[model_providers.teamgw]\n"),
]  # fmt: skip


@pytest.mark.parametrize(("client", "name", "broken", "problem", "fixed", "theirs", "ours"), FIXED)
def test_after_fixing_the_named_line_a_new_install_merges_and_a_third_changes_nothing(
    live_server, settings, home, alice, catalog, client, name, broken, problem, fixed, theirs, ours
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    target = users_file(home, name, broken)
    refused = run_install(live_server, home, alice, client, {})
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert target.read_text() == broken and backups(target) == []
    # The file, and the line of the user's own file with what is wrong there, then what to do.
    assert f"{target}: left unchanged, the installer cannot edit it safely ({problem}" in refused.stdout
    assert "Fix that and run a new install command from the Connect page" in refused.stdout

    target.write_text(fixed)
    merged = run_install(live_server, home, alice, client, {})
    assert merged.returncode == 0, merged.stdout + merged.stderr
    text = target.read_text()
    assert theirs in text and text.count(ours) == 1
    [backup] = backups(target)
    assert backup.read_text() == fixed

    again = run_install(live_server, home, alice, client, {})
    assert again.returncode == 0, again.stdout + again.stderr
    assert target.read_text() == text
    # Not one more copy of the same bytes, nor one over the backup of the user's own file.
    assert backups(target) == [backup] and backup.read_text() == fixed
    assert f"✓ {target}\n" in again.stdout
