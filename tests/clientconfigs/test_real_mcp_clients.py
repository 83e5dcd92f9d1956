"""Real Claude Code, Codex, Continue, Copilot CLI and OpenHands CLI, configured only by the portal's
installer, call a team MCP tool through the gateway in a headless run: the fake model asks for the
tool, the client calls it on the gateway's `/mcp/<slug>` with the developer's key, the gateway
forwards it with the team's own credential to a real MCP server (the official SDK's,
tests/fakes/mcp_upstream.py), which records the call, and the tool's answer goes back to the model.
The user's own MCP server entry stays, and the doctor lists what this developer may call. Same rig as
test_real_clients.py (loopback-only namespace, pinned clients in PORTAL_REAL_CLIENTS, PORTAL_OPENHANDS)."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from mcpservers.services import check_server
from tests.mcpservers.conftest import ROOT, UPSTREAM_TOKEN, running_upstream
from tests.mcpservers.factories import grant, make_server

from .test_installer import fetch, run_sh
from .test_real_clients import chat_requests, gateway, install, run_isolated, tool  # noqa: F401 - the fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
ASK = "Use the echo tool of the tracker to echo the word hello."
MINE = {"type": "http", "url": "http://127.0.0.1:9/my-own-mcp"}


@pytest.fixture
def tracker(gateway, tmp_path, alice):  # noqa: F811 - the fixture
    """The team's `tracker` MCP server (it needs its own bearer), echo granted to alice."""
    with running_upstream(tmp_path) as up:
        server = make_server(slug="tracker", url=up.url, tools=(), auth="bearer", bearer_token=UPSTREAM_TOKEN)
        check_server(server.pk)
        grant(server, tool="echo", user=alice)
        yield up


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def assert_called_once_with_the_teams_credential(tracker, text: str) -> None:
    assert tracker.calls() == [
        {"tool": "echo", "arguments": {"text": text}, "authorization": f"Bearer {UPSTREAM_TOKEN}"}
    ]


def assert_the_round_trip(done, up, tracker, text: str, context: object = None) -> None:
    """The client answered, the team's tool ran once with the team's credential, and its result
    went back to the model in the client's next request."""
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout, (done.stdout, context)
    assert_called_once_with_the_teams_credential(tracker, text)
    assert any(text in json.dumps(c) for c in tool_results(chat_requests(up)[-1]))


def assert_the_doctor_lists_echo(server, home, client: str, *, exits_clean: bool = True) -> None:
    check = run_sh(fetch(server.url + "/connect/install.sh"), home, "--check", client)
    assert not exits_clean or check.returncode == 0, check.stdout + check.stderr
    assert "✓ MCP server teamgw-tracker: you may call echo" in check.stdout, check.stdout


def test_claude_code_calls_a_team_mcp_tool_through_the_gateway(gateway, tracker, tmp_path, alice):  # noqa: F811
    server, up = gateway
    claude = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "claude")
    home = tmp_path / "home"
    home.mkdir()
    state = home / ".claude.json"
    state.write_text(json.dumps({"mcpServers": {"my-own": MINE}}, indent=2) + "\n")
    install(server, home, alice, "claude-code")
    servers = json.loads(state.read_text())["mcpServers"]
    assert servers["my-own"] == MINE and set(servers) == {"my-own", "teamgw-tracker"}

    name = "mcp__teamgw-tracker__echo"
    up.enqueue(mode="tool_call", tool_name=name, tool_arguments='{"text": "hello from claude"}')
    env = {"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    done = run_isolated(server, home, [str(claude), "-p", ASK, "--allowedTools", name], env)
    assert_the_round_trip(done, up, tracker, "hello from claude")
    assert_the_doctor_lists_echo(server, home, "claude-code")


def test_codex_calls_a_team_mcp_tool_through_the_gateway(gateway, tracker, tmp_path, alice):  # noqa: F811
    server, up = gateway
    codex = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "codex")
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    config = home / ".codex" / "config.toml"
    config.write_text('[mcp_servers.my-own]\nurl = "http://127.0.0.1:9/my-own-mcp"\n')
    install(server, home, alice, "codex")
    text = config.read_text()
    assert "[mcp_servers.my-own]" in text and "[mcp_servers.teamgw-tracker]" in text
    assert "gp-" not in text  # the key stays in the env file: bearer_token_env_var names it

    # Codex sends an MCP server's tools as one Responses `namespace` (`mcp__teamgw_tracker`): the
    # gateway offers them to the Chat upstream as flat functions and splits the call back.
    up.enqueue(mode="tool_call", tool_name="mcp__teamgw_tracker__echo", tool_arguments='{"text": "hello from codex"}')
    # `codex exec` never asks, and refuses an MCP call that needs approval: the test approves this
    # server's tools for the run (the installer leaves approvals to the developer).
    approve = "mcp_servers.teamgw-tracker.default_tools_approval_mode=approve"
    run = (
        f". {home}/.config/team-gateway/env && exec {shlex.quote(str(codex))} exec --skip-git-repo-check "
        f"-c {approve} " + shlex.quote(ASK)
    )
    done = run_isolated(server, home, ["sh", "-c", run], {})
    assert_the_round_trip(done, up, tracker, "hello from codex")
    asked = next(r for r in chat_requests(up) if "mcp__teamgw_tracker__echo" in json.dumps(r.get("tools")))
    assert "delete_everything" not in json.dumps(asked["tools"])  # not allowed: the gateway never lists it

    assert_the_doctor_lists_echo(server, home, "codex")


def test_continue_cli_calls_a_team_mcp_tool_through_the_gateway(gateway, tracker, tmp_path, alice):  # noqa: F811
    server, up = gateway
    cn = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "cn")
    home = tmp_path / "home"
    (home / ".continue").mkdir(parents=True)
    config = home / ".continue" / "config.yaml"
    # The developer's own server must load too (`cn -p` stops when one fails): a local stdio one.
    mine = f"  - name: my-own\n    command: {sys.executable}\n    args: [-m, tests.fakes.mcp_stdio]\n    cwd: {ROOT}\n"
    config.write_text("name: Mine\nversion: 1.0.0\nschema: v1\nmcpServers:\n" + mine)
    install(server, home, alice, "continue")
    text = config.read_text()
    assert mine in text and "name: teamgw-tracker" in text
    assert "gp-" not in text  # the MCP entry reads the key from ~/.continue/.env like the models do

    up.enqueue(mode="tool_call", tool_name="echo", tool_arguments='{"text": "hello from continue"}')
    done = run_isolated(server, home, [str(cn), "-p", ASK, "--allow", "echo"], {"CONTINUE_CLI_DISABLE_TELEMETRY": "1"})
    assert_the_round_trip(done, up, tracker, "hello from continue")
    asked = next(r for r in chat_requests(up) if "echo" in json.dumps(r.get("tools")))
    assert "my_note" in json.dumps(asked["tools"])  # the developer's own server, beside ours
    assert "delete_everything" not in json.dumps(asked["tools"])  # not allowed: the gateway never lists it

    assert_the_doctor_lists_echo(server, home, "continue")


def test_copilot_cli_calls_a_team_mcp_tool_through_the_gateway(gateway, tracker, tmp_path, alice):  # noqa: F811
    server, up = gateway
    copilot = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "copilot")
    home = tmp_path / "home"
    (home / ".copilot").mkdir(parents=True)
    config = home / ".copilot" / "mcp-config.json"
    config.write_text(json.dumps({"mcpServers": {"my-own": MINE}}, indent=2) + "\n")
    install(server, home, alice, "copilot-cli")
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["my-own"] == MINE and set(servers) == {"my-own", "teamgw-tracker"}
    assert "gp-" not in config.read_text()  # `${TEAM_GATEWAY_API_KEY}`, from the environment file

    name = "teamgw-tracker-echo"
    up.enqueue(mode="tool_call", tool_name=name, tool_arguments='{"text": "hello from copilot"}')
    env = {"COPILOT_DISABLE_TELEMETRY": "1", "NO_UPDATE_NOTIFIER": "1"}
    run = f". {home}/.config/team-gateway/env && exec {shlex.quote(str(copilot))}"
    run += f" -p {shlex.quote(ASK)} --allow-all-tools"
    done = run_isolated(server, home, ["sh", "-c", run], env)
    offered = [t["function"]["name"] for r in chat_requests(up) for t in r.get("tools") or []]
    assert_the_round_trip(done, up, tracker, "hello from copilot", offered)
    assert name in offered, offered  # Copilot names an MCP tool `<server>-<tool>`
    assert_the_doctor_lists_echo(server, home, "copilot-cli", exits_clean=False)


def test_openhands_cli_calls_a_team_mcp_tool_through_the_gateway(gateway, tracker, tmp_path, alice):  # noqa: F811
    server, up = gateway
    openhands = tool("PORTAL_OPENHANDS", "bin", "openhands")
    home = tmp_path / "home"
    (home / ".openhands").mkdir(parents=True)
    config = home / ".openhands" / "mcp.json"
    mine = {**MINE, "transport": "http", "enabled": False}  # theirs, switched off: OpenHands skips it
    config.write_text(json.dumps({"mcpServers": {"my-own": mine}}, indent=2) + "\n")
    install(server, home, alice, "openhands", default="qwen3-32b")
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["my-own"] == mine and set(servers) == {"my-own", "teamgw-tracker"}
    assert config.stat().st_mode & 0o777 == 0o600  # no variables in its headers: the key is in it

    # OpenHands asks the model for every call's risk and takes it out before the tool sees the arguments.
    arguments = '{"text": "hello from openhands", "security_risk": "LOW"}'
    up.enqueue(mode="tool_call", tool_name="echo", tool_arguments=arguments)
    env = {"OPENHANDS_SUPPRESS_BANNER": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = run_isolated(server, home, [str(openhands), "--headless", "-t", ASK], env)
    offered = [t["function"]["name"] for r in chat_requests(up) for t in r.get("tools") or []]
    assert "echo" in offered, offered  # one enabled server: fastmcp leaves its tools' names alone
    assert_the_round_trip(done, up, tracker, "hello from openhands", offered)
    assert_the_doctor_lists_echo(server, home, "openhands")
