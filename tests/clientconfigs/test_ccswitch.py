"""CC Switch end to end: the real `sh` installer writes the team's provider into CC Switch's own
database (its schema, below), updates the same rows on a second run, leaves the user's providers
and their current choice alone, and falls back to the import links (which carry the key) where CC
Switch has no database. The doctor reads the rows back and asks the gateway."""

from __future__ import annotations

import base64
import json
import sqlite3
import tomllib
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from channels.models import ModelRoute
from clientconfigs import services
from clientconfigs.installer import install as installer
from keys.services import verify_key
from tests.clientconfigs.conftest import make_ccswitch_db
from tests.clientconfigs.test_installer import backups, fetch, install, mode, run_sh

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

MINE = {"env": {"ANTHROPIC_AUTH_TOKEN": "sk-mine", "ANTHROPIC_BASE_URL": "https://api.example.com"}}


@pytest.fixture
def ccswitch_db(home) -> Path:
    """CC Switch as a user has it: one provider of their own for Claude Code, switched on."""
    path = make_ccswitch_db(home)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO providers (id, app_type, name, settings_config, is_current) VALUES (?, ?, ?, ?, 1)",
            ("mine-1", "claude", "My own", json.dumps(MINE)),
        )
    conn.close()
    return path


def rows(path: Path) -> dict[tuple[str, str], dict]:
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("SELECT id, app_type, name, settings_config, is_current, meta FROM providers").fetchall()
    finally:
        conn.close()
    return {(i, app): {"name": n, "settings": json.loads(s), "current": c, "meta": m} for i, app, n, s, c, m in found}


def test_the_installer_writes_our_provider_into_ccswitch_and_updates_it_on_a_second_run(
    live_server, settings, home, alice, catalog, ccswitch_db
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    first = install(live_server, home, alice, "cc-switch", key_name="laptop")
    assert first.returncode == 0, first.stdout + first.stderr
    found = rows(ccswitch_db)
    assert set(found) == {("mine-1", "claude"), ("teamgw", "claude"), ("teamgw", "codex"), ("teamgw", "opencode")}
    claude = found["teamgw", "claude"]["settings"]["env"]
    assert claude["ANTHROPIC_BASE_URL"] == live_server.url  # root: Claude Code adds /v1/messages
    assert claude["ANTHROPIC_MODEL"] == "qwen3-32b"
    assert verify_key(claude["ANTHROPIC_AUTH_TOKEN"]).name == "cc-switch@laptop"  # the key is not lost
    codex = found["teamgw", "codex"]["settings"]
    config = tomllib.loads(codex["config"])
    assert config["model_providers"]["teamgw"]["base_url"] == live_server.url + "/v1"
    assert config["model_providers"]["teamgw"]["requires_openai_auth"] is True
    assert codex["auth"]["OPENAI_API_KEY"] == claude["ANTHROPIC_AUTH_TOKEN"]
    opencode = found["teamgw", "opencode"]["settings"]
    assert opencode["options"]["baseURL"] == live_server.url + "/v1" and "qwen3-32b" in opencode["models"]
    assert found["teamgw", "codex"]["meta"] == "{}" and found["teamgw", "claude"]["current"] == 0
    # The user's own provider: untouched and still the current one.
    assert found["mine-1", "claude"] == {"name": "My own", "settings": MINE, "current": 1, "meta": "{}"}
    [backup] = backups(ccswitch_db)
    assert mode(backup) == 0o600 and set(rows(backup)) == {("mine-1", "claude")}
    assert "switch to Team Gateway in CC Switch" in first.stdout

    # The user switches Claude Code to ours in CC Switch; a second install (a new key) updates in place.
    conn = sqlite3.connect(ccswitch_db)
    with conn:
        conn.execute("UPDATE providers SET is_current = (id = 'teamgw') WHERE app_type = 'claude'")
    conn.close()
    second = install(live_server, home, alice, "cc-switch", key_name="laptop")
    assert second.returncode == 0, second.stdout + second.stderr
    again = rows(ccswitch_db)
    assert set(again) == set(found)  # the same rows, no second provider
    token = again["teamgw", "claude"]["settings"]["env"]["ANTHROPIC_AUTH_TOKEN"]
    assert token != claude["ANTHROPIC_AUTH_TOKEN"] and verify_key(token).name == "cc-switch@laptop"
    assert again["teamgw", "claude"]["current"] == 1 and again["mine-1", "claude"]["current"] == 0
    assert "current provider for claude: switch away and back" in second.stdout


def test_without_ccswitch_the_installer_prints_import_links_that_carry_the_key(
    live_server, settings, home, alice, catalog
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    result = install(live_server, home, alice, "cc-switch", key_name="desk")
    assert result.returncode == 0, result.stdout + result.stderr
    links = [line.split(": ", 2)[2] for line in result.stdout.splitlines() if "ccswitch://" in line]
    assert len(links) == 3
    for link in links:
        parts = urlsplit(link)
        assert (parts.scheme, parts.netloc, parts.path) == ("ccswitch", "v1", "/import")
        params = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert verify_key(params["apiKey"]).name == "cc-switch@desk"
        assert params["endpoint"] in (live_server.url, live_server.url + "/v1")
        config = json.loads(base64.urlsafe_b64decode(params["config"] + "=" * (-len(params["config"]) % 4)))
        assert config
    assert not (home / ".cc-switch").exists()


def test_a_database_that_is_not_ccswitchs_is_left_alone_and_the_links_are_given(
    live_server, settings, home, alice, catalog
):
    settings.PORTAL_PUBLIC_URL = live_server.url
    path = home / ".cc-switch" / "cc-switch.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE providers (id TEXT, name TEXT)")
    conn.close()
    before = path.read_bytes()
    result = install(live_server, home, alice, "cc-switch", key_name="desk")
    assert result.returncode == 1
    assert "not a CC Switch 3.8+ database" in result.stdout and "ccswitch://v1/import?" in result.stdout
    assert path.read_bytes() == before


def test_the_doctor_checks_what_ccswitch_holds(live_server, settings, home, alice, gateway_stub, ccswitch_db):
    up, _, plaintext = gateway_stub
    settings.PORTAL_PUBLIC_URL = up.root_url
    # The stub serves every model with one window: keep the catalog to the model whose window it has.
    ModelRoute.objects.filter(model__name="llama-3.1-8b").delete()
    # What the installer writes for a gateway at the stub's address (the installer itself runs above).
    rendered = services.render("cc-switch", services.render_input(alice, gateway=up.root_url, plaintext=None))
    installer.ccswitch_upsert(str(ccswitch_db), {"db_providers": rendered.db_providers, "gateway": up.root_url}, "t")
    script = fetch(live_server.url + "/connect/install.sh")
    check = run_sh(script, home, "--check", "cc-switch", env={"TEAM_GATEWAY_API_KEY": plaintext})
    assert check.returncode == 0, check.stdout + check.stderr
    assert "key valid" in check.stdout and "all checks passed" in check.stdout
    assert check.stdout.count("has the right shape") == 3

    # Someone edits the Codex provider in CC Switch to a base URL without /v1.
    conn = sqlite3.connect(ccswitch_db)
    (settings_config,) = conn.execute(
        "SELECT settings_config FROM providers WHERE id='teamgw' AND app_type='codex'"
    ).fetchone()
    broken = json.loads(settings_config)
    broken["config"] = broken["config"].replace(up.root_url + "/v1", up.root_url)
    with conn:
        conn.execute(
            "UPDATE providers SET settings_config = ? WHERE id='teamgw' AND app_type='codex'", (json.dumps(broken),)
        )
    conn.close()
    check = run_sh(script, home, "--check", "cc-switch", env={"TEAM_GATEWAY_API_KEY": plaintext})
    assert check.returncode == 1
    assert f"base URL {up.root_url} should be ending in /v1" in check.stdout
