"""The doctor asks the real gateway's MCP endpoint, with the installed key, what this developer may
call on each team server the installer wrote, and says clearly when the gateway refuses; the sh
installer's --uninstall then removes the team's entries and keeps the developer's own."""

from __future__ import annotations

import json

import pytest

from clientconfigs.installer import install as inst
from mcpservers.models import McpGrant
from mcpservers.services import check_server
from tests.gateway.conftest import ThreadServer
from tests.mcpservers.conftest import UPSTREAM_TOKEN, running_upstream
from tests.mcpservers.factories import grant, make_server

from .test_installer import fetch, run_sh
from .test_jsonc import ZED_HEADER, ZED_MY_SERVERS
from .test_real_clients import install

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def portal(transactional_db, settings, monkeypatch, tmp_path):
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "mcpdoc-" + tmp_path.name[-10:])
    settings.PORTAL_PUBLIC_URL = ""
    with running_upstream(tmp_path) as up:
        server = ThreadServer().start()
        try:
            yield server, up
        finally:
            server.stop()


def test_the_doctor_lists_the_tools_this_key_may_call_and_says_when_the_gateway_refuses(portal, tmp_path, alice):
    server, up = portal
    tracker = make_server(slug="tracker", url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    check_server(tracker.pk)
    grant(tracker, tool="echo", user=alice)
    grant(tracker, tool="whoami", user=alice)
    home = tmp_path / "home"
    (home / ".config" / "opencode").mkdir(parents=True)
    config = home / ".config" / "opencode" / "opencode.json"
    mine = {"mcp": {"my-own": {"type": "remote", "url": "http://127.0.0.1:9/mcp"}}, "theme": "dark"}
    config.write_text(json.dumps(mine, indent=2) + "\n")
    install(server, home, alice, "opencode")
    script = fetch(server.url + "/connect/install.sh")

    check = run_sh(script, home, "--check", "opencode")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "✓ MCP server teamgw-tracker: you may call echo, whoami" in check.stdout
    assert UPSTREAM_TOKEN not in check.stdout + check.stderr

    McpGrant.objects.filter(user=alice).delete()  # an admin takes the server away from alice
    refused = run_sh(script, home, "--check", "opencode")
    assert refused.returncode == 1, refused.stdout
    assert "MCP server teamgw-tracker" in refused.stdout
    assert "the gateway refused: this key may call nothing on this server any more" in refused.stdout

    gone = run_sh(script, home, "--uninstall", "opencode", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert config.read_text() == json.dumps(mine, indent=2) + "\n"  # byte-identical


def test_the_doctor_says_when_the_teams_server_is_down_and_what_its_last_check_listed(portal, tmp_path, alice):
    server, up = portal
    tracker = make_server(slug="tracker", url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    check_server(tracker.pk)
    grant(tracker, tool="echo", user=alice)
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "claude-code")
    up.process.terminate()
    up.process.wait(20)

    check = run_sh(fetch(server.url + "/connect/install.sh"), home, "--check", "claude-code")
    assert check.returncode == 0, check.stdout + check.stderr  # the developer's files are right
    line = next(ln for ln in check.stdout.splitlines() if "MCP server teamgw-tracker" in ln)
    assert line.startswith("! MCP server teamgw-tracker: the team's server is down (")
    assert "unreachable" in line and line.endswith("you may call echo")


@pytest.mark.parametrize("client", ["copilot-cli", "factory-droid", "mistral-vibe"])
def test_the_doctor_reads_the_mcp_entries_of_the_clients_that_name_the_key_by_variable(client, portal, tmp_path, alice):
    """Copilot CLI's mcp-config.json, Droid's mcp.json and Vibe's [[mcp_servers]] hold no key (a
    `${VAR}` reference or `api_key_env`): the doctor finds ours and asks with the installed key."""
    server, up = portal
    tracker = make_server(slug="tracker", url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    check_server(tracker.pk)
    grant(tracker, tool="echo", user=alice)
    home = tmp_path / "home"
    install(server, home, alice, client)
    script = fetch(server.url + "/connect/install.sh")

    check = run_sh(script, home, "--check", client)
    assert "✓ MCP server teamgw-tracker: you may call echo" in check.stdout, check.stdout + check.stderr
    # alice has no models here, so Droid's settings.json lists none; no problem is the MCP entries'.
    assert not [ln for ln in check.stdout.splitlines() if ln.startswith("✗") and "MCP" in ln], check.stdout
    assert UPSTREAM_TOKEN not in check.stdout + check.stderr


@pytest.mark.parametrize(
    ("client", "path", "container"),
    [
        ("zed", ".config/zed/settings.json", "context_servers"),
        ("roo", ".config/Code/User/globalStorage/rooveterinaryinc.roo-cline/settings/mcp_settings.json", "mcpServers"),
    ],
)
def test_zed_and_roo_get_the_team_servers_the_doctor_lists_them_and_uninstall_keeps_the_users(
    client, path, container, portal, tmp_path, alice
):
    """Zed's context_servers and Roo's mcp_settings.json hold the key itself (neither expands a
    variable it can see): the file is the developer's only, the doctor asks with that key, and
    --uninstall leaves the developer's own server and the file as it was."""
    server, up = portal
    tracker = make_server(slug="tracker", url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
    check_server(tracker.pk)
    grant(tracker, tool="echo", user=alice)
    home = tmp_path / "home"
    config = home / path
    config.parent.mkdir(parents=True)
    mine = {container: {"my-own": {"type": "streamable-http", "url": "http://127.0.0.1:9/mcp"}}}
    config.write_text(json.dumps(mine, indent=2) + "\n")
    install(server, home, alice, client)
    servers = json.loads(config.read_text())[container]
    assert set(servers) == {"my-own", "teamgw-tracker"}
    assert servers["teamgw-tracker"]["url"] == server.url + "/mcp/tracker"
    assert (config.stat().st_mode & 0o777) == 0o600
    script = fetch(server.url + "/connect/install.sh")

    check = run_sh(script, home, "--check", client)
    assert "✓ MCP server teamgw-tracker: you may call echo" in check.stdout, check.stdout + check.stderr
    assert UPSTREAM_TOKEN not in check.stdout + check.stderr

    gone = run_sh(script, home, "--uninstall", client, "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert config.read_text() == json.dumps(mine, indent=2) + "\n"  # byte-identical


def test_zeds_commented_settings_get_the_servers_in_place_and_uninstall_gives_the_file_back(portal, tmp_path, alice):
    """Zed's settings.json as a developer has it (comments, trailing commas, their own commented
    servers): the sh installer writes the team's servers into it without touching a comment, the
    doctor lists them from it, a reinstall after an admin takes one server away drops only that
    entry, and --uninstall gives back the original file byte for byte."""
    server, up = portal
    servers = {}
    for slug in ("docs", "tracker"):
        servers[slug] = make_server(slug=slug, url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
        check_server(servers[slug].pk)
        grant(servers[slug], tool="echo", user=alice)
    home = tmp_path / "home"
    config = home / ".config" / "zed" / "settings.json"
    config.parent.mkdir(parents=True)
    config.write_text(ZED_MY_SERVERS)
    install(server, home, alice, "zed")
    text = config.read_text()
    assert text.startswith(ZED_HEADER)
    for mine in ("// my theme", "/* the binary */", '// "my-old": { "url": "http://127.0.0.1:9/mcp" },'):
        assert mine in text
    assert list(inst.jsonc_loads(text)["context_servers"]) == ["my-own", "my-remote", "teamgw-docs", "teamgw-tracker"]
    script = fetch(server.url + "/connect/install.sh")

    check = run_sh(script, home, "--check", "zed")
    assert "✓ MCP server teamgw-docs: you may call echo" in check.stdout, check.stdout + check.stderr
    assert "✓ MCP server teamgw-tracker: you may call echo" in check.stdout
    assert "my-own" not in check.stdout and "my-remote" not in check.stdout  # the developer's own

    McpGrant.objects.filter(server=servers["docs"], user=alice).delete()
    install(server, home, alice, "zed")
    servers_now = inst.jsonc_loads(config.read_text())["context_servers"]
    assert list(servers_now) == ["my-own", "my-remote", "teamgw-tracker"]
    assert "// my theme" in config.read_text()

    gone = run_sh(script, home, "--uninstall", "zed", "--yes")
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert config.read_text() == ZED_MY_SERVERS  # byte-identical
