"""The real clients that run headless here (Qwen Code, Kilo CLI, Aider; Claude Code, Cline CLI,
Continue CLI, OpenCode, Codex, llm; GitHub Copilot CLI, pi, Factory Droid, Mistral Vibe, OpenHands),
configured only by the portal's installer in a throwaway HOME, complete a request through the
gateway to the fake upstream, with the default model and limits the files set; the newer ones also
a tool round trip (their own file-reading tool) and a second install that switches the default.
Continue CLI, Qwen Code and Codex also walk the journey past a refused file: broken, named, fixed by
the user, installed again, answering.
Claude Code also walks two turns on a real llama.cpp server (xllamacpp), its window discovered from
the server, translated Messages -> Chat Completions end to end.
JetBrains (Junie's CLI comes from JetBrains' site, AI Assistant is an IDE plugin), Goose, Zed, Roo,
Crush and CC Switch cannot run here: test_formats.py checks their files.

Each runs in its own network namespace (`unshare -rn`) that has nothing but loopback, so no request
can reach a vendor; `tests/fakes/nsbridge.py` carries its connections to the portal through a Unix
socket, on the very URL the generated files hold. The clients are pinned and installed by .ci/run
into throwaway folders (PORTAL_REAL_CLIENTS for npm; PORTAL_AIDER, PORTAL_LLM, PORTAL_VIBE and
PORTAL_OPENHANDS for the PyPI clients' venvs).
Two models: `qwen3-32b` (the default: largest window) and `tool-bot` (a smaller window and output
cap), served upstream as `fake-model` and `fake-small`, so a request shows which one a client chose.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from channels.models import Channel, Model, ModelRoute
from clientconfigs import services
from clientconfigs.models import KeyMode
from tests.fakes.nsbridge import UnixToTcp
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ThreadServer
from tests.services import require_binary, unavailable

from .test_installer import backups, fetch, run_sh
from .test_installer_unreadable import FIXED

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
BRIDGE = Path(__file__).resolve().parents[1] / "fakes" / "nsbridge.py"
UPSTREAM_KEY = "sk-upstream-real-clients"
WINDOW, OUTPUT = 65536, 8192  # large enough for every client's own prompt
SMALL_WINDOW, SMALL_OUTPUT = 40960, 1024
PROMPT = "Reply with the word pong."


@pytest.fixture
def gateway(transactional_db, settings, monkeypatch):
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "ccreal-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""
    with FakeUpstream(api_key=UPSTREAM_KEY, max_model_len=WINDOW) as up:
        channel = Channel.objects.create(
            name="gpu", kind="vllm", base_url=up.base_url, api_key=UPSTREAM_KEY, status="healthy"
        )
        model = Model.objects.create(name="qwen3-32b")
        ModelRoute.objects.create(
            model=model, channel=channel, upstream_model="fake-model", context_window=WINDOW, max_output_tokens=OUTPUT
        )
        small = Model.objects.create(name="tool-bot")
        ModelRoute.objects.create(
            model=small,
            channel=channel,
            upstream_model="fake-small",
            context_window=SMALL_WINDOW,
            max_output_tokens=SMALL_OUTPUT,
        )
        server = ThreadServer().start()
        try:
            yield server, up
        finally:
            server.stop()


def tool(env: str, *parts: str) -> Path:
    folder = os.environ.get(env, "")
    path = Path(folder, *parts)
    if not folder or not path.exists():
        unavailable(f"{env} does not point at the pinned client installed by .ci/run ({'/'.join(parts)})")
    return path


def run_isolated(server, home: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `argv` in a loopback-only network namespace whose 127.0.0.1:PORT leads to the portal."""
    require_binary("unshare", "util-linux")
    require_binary("ip", "iproute2")
    sock = str(home.parent / f"portal-{uuid.uuid4().hex[:8]}.sock")
    bridge = UnixToTcp(sock, server.port)
    log = home.parent / "bridge.log"
    script = (
        "set -e; ip link set lo up; "
        f"python3 {shlex.quote(str(BRIDGE))} {server.port} {shlex.quote(sock)} > {shlex.quote(str(log))} 2>&1 & "
        "trap 'kill $! 2>/dev/null' EXIT; "
        f"until grep -q ready {shlex.quote(str(log))}; do sleep 0.05; done; " + " ".join(shlex.quote(a) for a in argv)
    )
    base = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "dumb"}
    try:
        return subprocess.run(
            ["unshare", "-rn", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=240,
            env={**base, **env},
            cwd=home,
            stdin=subprocess.DEVNULL,
        )
    finally:
        bridge.close()
        kill_strays(home)


def kill_strays(home: Path) -> None:
    """Clients that leave a daemon behind (Cline's hub) must not outlive the test: kill every
    process whose HOME is this test's throwaway one."""
    import signal

    marker = f"HOME={home}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def run_installer(server, home: Path, user, client: str, default: str = "") -> subprocess.CompletedProcess:
    """A new one-line install command from the Connect page, run: a download token works once."""
    _, token = services.issue_download_token(user, client, key_mode=KeyMode.MINT, key_name="ci", default_model=default)
    return run_sh(fetch(server.url + "/connect/install.sh"), home, token)


def install(server, home: Path, user, client: str, default: str = "") -> None:
    result = run_installer(server, home, user, client, default)
    assert result.returncode == 0, result.stdout + result.stderr


def chat_requests(up: FakeUpstream) -> list[dict]:
    return [r.json for r in up.requests if r.path.endswith("/chat/completions")]


def test_qwen_code_answers_through_the_gateway_from_the_installed_files(gateway, tmp_path, alice):
    server, up = gateway
    qwen = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "qwen")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "qwen-code")
    done = run_isolated(
        server,
        home,
        [str(qwen), "-p", PROMPT, "--approval-mode", "yolo", "--output-format", "text"],
        {"QWEN_USAGE_STATISTICS_ENABLED": "false", "QWEN_TELEMETRY_ENABLED": "false"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    [first, *_] = chat_requests(up)
    assert first["model"] == "fake-model" and first["stream"] is True
    assert 0 < first["max_tokens"] <= OUTPUT  # Qwen clamps its cap to what the window leaves


def test_kilo_cli_answers_through_the_gateway_from_the_installed_files(gateway, tmp_path, alice):
    server, up = gateway
    kilo = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "kilo")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "kilo")
    opt_out = dict(kv.split("=", 1) for kv in "KILO_TELEMETRY_LEVEL=off KILO_DISABLE_AUTOUPDATE=1".split())
    env = {**opt_out, "KILO_DISABLE_MODELS_FETCH": "1", "KILO_DISABLE_SHARE": "1", "KILO_DISABLE_LSP_DOWNLOAD": "1"}
    done = run_isolated(server, home, [str(kilo), "run", "--auto", PROMPT], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    sent = chat_requests(up)
    assert sent and all(r["model"] == "fake-model" for r in sent)
    assert OUTPUT in {r.get("max_tokens") for r in sent}  # limit.output is what Kilo sends


def test_aider_answers_through_the_gateway_from_the_installed_files(gateway, tmp_path, alice):
    server, up = gateway
    aider = tool("PORTAL_AIDER", "bin", "aider")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "aider")
    done = run_isolated(
        server,
        home,
        [str(aider), "--message", PROMPT, "--yes-always", "--no-pretty", "--no-git", "--no-stream"],
        {"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    assert chat_requests(up) and chat_requests(up)[0]["model"] == "fake-model"
    assert "unknown context window" not in done.stdout.lower()  # the metadata file was read


def test_continue_cli_uses_the_chosen_default_and_a_reinstall_keeps_one_entry_per_model(gateway, tmp_path, alice):
    server, up = gateway
    cn = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "cn")
    home = tmp_path / "home"
    home.mkdir()
    # An embedding model too: listed in Continue's `embed` role, which cn must accept beside the chat models.
    embedder = Model.objects.create(name="code-embed", kind="embedding")
    ModelRoute.objects.create(model=embedder, channel=Channel.objects.get(name="gpu"), upstream_model="fake-embed")
    for default, upstream_model in (("tool-bot", "fake-small"), ("qwen3-32b", "fake-model")):
        install(server, home, alice, "continue", default=default)
        done = run_isolated(server, home, [str(cn), "-p", PROMPT], {"CONTINUE_CLI_DISABLE_TELEMETRY": "1"})
        config = home / ".continue" / "config.yaml"
        # The file cn read, in the failure message: it refused a generated one once in CI.
        assert done.returncode == 0, done.stdout + done.stderr + "\n" + (config.read_text() if config.exists() else "")
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        last = chat_requests(up)[-1]
        assert last["model"] == upstream_model, (default, last["model"])  # `cn -p` took the default
        assert last["max_tokens"] == (SMALL_OUTPUT if default == "tool-bot" else OUTPUT)
    text = (home / ".continue" / "config.yaml").read_text()
    assert text.count("model: qwen3-32b") == 1 and text.count("model: tool-bot") == 1
    assert text.count("model: code-embed") == 1 and "  - embed\n" in text.split("model: code-embed", 1)[1]


def test_cline_cli_answers_on_the_default_model_and_on_a_second_one(gateway, tmp_path, alice):
    """providers.json carries no provider-wide window or cap (it would override every model's own in
    models.json); Cline 3.0.65 then still answers on both models. It sends no max_tokens, so the cap
    itself is not visible on the wire: the assertion only rules out the default model's."""
    server, up = gateway
    cline = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "cline")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "cline")
    done = run_isolated(server, home, [str(cline), "--json", PROMPT], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    assert chat_requests(up)[-1]["model"] == "fake-model"
    again = run_isolated(server, home, [str(cline), "--json", "-m", "tool-bot", PROMPT], {})
    assert again.returncode == 0, again.stdout + again.stderr
    last = chat_requests(up)[-1]
    assert last["model"] == "fake-small"
    assert last.get("max_tokens") in (None, SMALL_OUTPUT)


def test_opencode_answers_through_the_gateway_from_the_installed_files(gateway, tmp_path, alice):
    server, up = gateway
    opencode = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "opencode")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "opencode")
    env = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_SHARE": "1"}
    done = run_isolated(server, home, [str(opencode), "run", PROMPT], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    sent = chat_requests(up)
    assert sent and OUTPUT in {r.get("max_tokens") for r in sent if r["model"] == "fake-model"}


def test_claude_code_answers_through_the_gateway_from_the_installed_settings(gateway, tmp_path, alice):
    server, up = gateway
    claude = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "claude")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "claude-code")
    env = {"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    done = run_isolated(server, home, [str(claude), "-p", PROMPT], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    assert any(r.json and r.json.get("model") == "fake-model" for r in up.requests)
    # Another model with its own window: the per-model settings layer over settings.json.
    done = run_isolated(
        server, home, [str(claude), "--settings", f"{home}/.claude/teamgw-tool-bot.json", "-p", PROMPT], env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sent = [r.json for r in up.requests if r.path.endswith("/chat/completions") and r.json.get("model") == "fake-small"]
    assert sent and all(r["max_tokens"] <= SMALL_OUTPUT for r in sent)


@pytest.fixture
def llama_gateway(transactional_db, settings, monkeypatch, alice):
    """The gateway in front of a real llama.cpp server (xllamacpp) whose window the route took
    from the server (/props), as an admin's registration records it."""
    from tests.fakes.llamacpp import LlamaServer, tiny_gguf_path
    from tests.gateway.test_llamacpp import LLAMA_KEY, served

    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "ccllama-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""
    with LlamaServer(ctx=LLAMA_WINDOW, api_key=LLAMA_KEY, model_path=tiny_gguf_path(LLAMA_WINDOW)) as llama:
        served(llama, "gpu", "local-coder", alice, "served")
        assert ModelRoute.objects.get().discovered_context_window == LLAMA_WINDOW
        server = ThreadServer().start()
        try:
            yield server, llama
        finally:
            server.stop()


LLAMA_WINDOW = 32768  # Claude Code's own prompt is ~21k tokens of the tiny model's byte-level vocabulary


def test_claude_code_on_a_real_llamacpp_server_answers_and_its_next_turn_reuses_the_servers_cache(
    llama_gateway, tmp_path, alice
):
    """The whole journey on a real model server: Claude Code configured only by the installer,
    its Messages request (system blocks, ~20 tools, thinking, cache_control) translated to Chat
    Completions and rendered by llama.cpp's own chat template (`--jinja`). The answer is the server's
    count of the whole prompt; the next turn (`--continue`) finds that prompt in llama.cpp's cache,
    which holds only when the translation renders an unchanged conversation to the same bytes."""
    from django.utils import timezone

    from keys.models import UsageRecord
    from tests.gateway.conftest import wait_for

    server, llama = llama_gateway
    claude = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "claude")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "claude-code")
    env = {"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    first = run_isolated(server, home, [str(claude), "-p", PROMPT], env)
    assert first.returncode == 0 and first.stdout.strip(), first.stdout + first.stderr + llama.log()[-3000:]
    # On a loaded machine the prefill of the ~20k-token prompt can outlast Claude Code's own patience:
    # it gives a request up and sends it again (llama.cpp then finds the prompt in its cache). What
    # it gave up is on the record as such; the turn's answer is the ok one.
    wait_for(lambda: UsageRecord.objects.filter(status="ok").exists(), timeout=30)
    first_turn = list(UsageRecord.objects.order_by("created"))
    seen = [(r.status, r.latency_ms, r.ttft_ms, r.prompt_tokens, r.error) for r in first_turn]
    assert {r.status for r in first_turn} <= {"ok", "client_disconnected"}, seen
    one = next(r for r in first_turn if r.status == "ok")
    assert (one.model, one.surface, one.status, one.estimated) == ("local-coder", "messages", "ok", False), seen
    assert 15_000 < one.prompt_tokens < LLAMA_WINDOW, one.prompt_tokens  # the whole prompt, by the server
    assert one.completion_tokens > 0

    # A turn may take more than one request (the model's answer a tool call Claude Code runs, then
    # its result sent back): a record is the first turn's when it was made before the second began.
    second_turn = timezone.now()
    again = run_isolated(server, home, [str(claude), "-p", "And now?", "--continue"], env)
    assert again.returncode == 0 and again.stdout.strip(), again.stdout + again.stderr + llama.log()[-3000:]
    two = wait_for(lambda: UsageRecord.objects.filter(created__gte=second_turn).order_by("created").first(), timeout=30)
    last = UsageRecord.objects.filter(created__lt=second_turn).order_by("-prompt_tokens").first()
    assert two.status == "ok" and two.prompt_tokens > last.prompt_tokens
    # The second turn's prompt begins with the first's last, token for token, so llama.cpp reads the
    # first turn from its cache (a reordered tool list or rewritten system block would miss it).
    assert two.cached_tokens >= last.prompt_tokens - 64, (last.prompt_tokens, two.cached_tokens)


def test_codex_answers_over_responses_and_its_file_notes_the_dropped_tools(gateway, tmp_path, alice):
    server, up = gateway
    codex = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "codex")
    home = tmp_path / "home"
    home.mkdir()
    install(server, home, alice, "codex")
    config = (home / ".codex" / "config.toml").read_text()
    # The fake upstream is a Chat Completions channel: the gateway translates Responses and drops
    # Codex's web_search and multi-agent tools, and the file says so.
    assert "# Team gateway note: qwen3-32b is served through Chat Completions" in config
    assert "[analytics]\nenabled = false" in config
    run = (
        f". {home}/.config/team-gateway/env && exec {shlex.quote(str(codex))} exec --skip-git-repo-check "
        + shlex.quote(PROMPT)
    )
    done = run_isolated(server, home, ["sh", "-c", run], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    sent = chat_requests(up)
    assert sent and sent[-1]["model"] == "fake-model"
    assert not any(t.get("type") == "web_search" for t in sent[-1].get("tools", []))
    # Another model through its profile, which carries that model's own window.
    done = run_isolated(
        server, home, ["sh", "-c", run.replace(" exec --skip", " --profile teamgw-tool-bot exec --skip")], {}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert chat_requests(up)[-1]["model"] == "fake-small"


def test_llm_cli_completes_a_tool_round_trip_and_a_second_install_keeps_it_working(gateway, tmp_path, alice):
    """Simon Willison's llm (pinned in .ci/run): our default model answers, the built-in
    `llm_version` tool goes to the model and its result comes back, and a reinstall leaves one
    entry per model next to the user's own."""
    server, up = gateway
    llm = tool("PORTAL_LLM", "bin", "llm")
    home = tmp_path / "home"
    user_dir = home / ".config" / "io.datasette.llm"
    user_dir.mkdir(parents=True)
    (user_dir / "extra-openai-models.yaml").write_text("- model_id: mine\n  model_name: m\n  api_base: http://x/v1\n")
    install(server, home, alice, "llm")
    done = run_isolated(server, home, [str(llm), PROMPT], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    assert chat_requests(up)[-1]["model"] == "fake-model"

    install(server, home, alice, "llm", default="tool-bot")
    models = yaml.safe_load((user_dir / "extra-openai-models.yaml").read_text())
    assert sorted(m["model_id"] for m in models) == ["mine", "teamgw/qwen3-32b", "teamgw/tool-bot"]
    up.enqueue(mode="tool_call", tool_name="llm_version", tool_arguments="{}")
    done = run_isolated(server, home, [str(llm), "-T", "llm_version", "Which llm version is this?"], {})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    asked, answered = chat_requests(up)[-2:]
    assert asked["model"] == answered["model"] == "fake-small"  # the new default
    assert [t["function"]["name"] for t in asked["tools"]] == ["llm_version"]
    result = [m for m in answered["messages"] if m["role"] == "tool"]
    assert len(result) == 1 and result[0]["content"] == "0.36"  # llm ran the tool and sent its answer back


def sourced(home: Path, *argv: str) -> list[str]:
    """`argv` run by a shell that has loaded the installed environment file first, as a profile would."""
    return ["sh", "-c", f". {home}/.config/team-gateway/env && exec " + " ".join(shlex.quote(a) for a in argv)]


MARKER = "gateway-tool-result-7f3a"


def ask_for_a_tool(up: FakeUpstream, home: Path, name: str, **arguments) -> None:
    """The next answer calls the client's own file-reading tool on note.txt in its working directory."""
    (home / "note.txt").write_text(MARKER + "\n")
    args = {k: (str(home / "note.txt") if v == "NOTE" else v) for k, v in arguments.items()}
    up.enqueue(mode="tool_call", tool_name=name, tool_arguments=json.dumps(args))


def assert_tool_round_trip(up: FakeUpstream, name: str, model: str) -> None:
    """The model was offered the tool, called it, and got the file's content back in the next request."""
    asked, answered = chat_requests(up)[-2:]
    assert asked["model"] == answered["model"] == model
    assert name in [t["function"]["name"] for t in asked["tools"]]
    results = [m for m in answered["messages"] if m["role"] == "tool"]
    assert results and MARKER in json.dumps(results), answered["messages"][-2:]


def test_copilot_cli_completes_a_tool_round_trip_and_a_reinstall_switches_its_model(gateway, tmp_path, alice):
    """GitHub Copilot CLI reads its provider from the environment file only: no GitHub sign-in."""
    server, up = gateway
    copilot = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "copilot")
    home = tmp_path / "home"
    (home / ".config" / "team-gateway").mkdir(parents=True)
    (home / ".config" / "team-gateway" / "env").write_text("export MY_OWN=1\n")
    env = {"COPILOT_DISABLE_TELEMETRY": "1", "NO_UPDATE_NOTIFIER": "1"}
    for default, upstream_model, cap in (("qwen3-32b", "fake-model", OUTPUT), ("tool-bot", "fake-small", SMALL_OUTPUT)):
        install(server, home, alice, "copilot-cli", default=default)
        ask_for_a_tool(up, home, "view", path="NOTE")
        done = run_isolated(server, home, sourced(home, str(copilot), "-p", PROMPT, "--allow-all-tools"), env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        assert_tool_round_trip(up, "view", upstream_model)
        assert chat_requests(up)[-1].get("max_tokens", cap) <= cap
    assert "export MY_OWN=1" in (home / ".config" / "team-gateway" / "env").read_text()


def test_pi_completes_a_tool_round_trip_next_to_the_users_own_provider(gateway, tmp_path, alice):
    server, up = gateway
    pi = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "pi")
    home = tmp_path / "home"
    agent = home / ".pi" / "agent"
    agent.mkdir(parents=True)
    ollama = {"baseUrl": "http://localhost:11434/v1", "api": "openai-completions", "apiKey": "ollama"}
    mine = {"providers": {"ollama": {**ollama, "models": [{"id": "llama3.1:8b"}]}}}
    (agent / "models.json").write_text(json.dumps(mine))
    for default, upstream_model, cap in (("qwen3-32b", "fake-model", OUTPUT), ("tool-bot", "fake-small", SMALL_OUTPUT)):
        install(server, home, alice, "pi", default=default)
        ask_for_a_tool(up, home, "read", path="note.txt")
        done = run_isolated(server, home, [str(pi), "-p", PROMPT], {"PI_SKIP_VERSION_CHECK": "1"})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        assert_tool_round_trip(up, "read", upstream_model)
        assert chat_requests(up)[-1].get("max_tokens", cap) <= cap
    assert json.loads((agent / "models.json").read_text())["providers"]["ollama"] == mine["providers"]["ollama"]


def test_factory_droid_completes_a_tool_round_trip_and_a_reinstall_keeps_one_entry_per_model(gateway, tmp_path, alice):
    """Droid runs its custom models without a Factory sign-in; the id it gives ours is in the file."""
    server, up = gateway
    droid = tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", "droid")
    home = tmp_path / "home"
    (home / ".factory").mkdir(parents=True)
    mine = {"model": "m", "displayName": "Mine", "baseUrl": "http://x/v1", "apiKey": "k", "provider": "openai"}
    (home / ".factory" / "settings.json").write_text(json.dumps({"customModels": [mine]}))
    for default, upstream_model in (("tool-bot", "fake-small"), ("qwen3-32b", "fake-model")):
        install(server, home, alice, "factory-droid", default=default)
        settings = json.loads((home / ".factory" / "settings.json").read_text())
        model = settings["sessionDefaultSettings"]["model"]
        ask_for_a_tool(up, home, "Read", file_path="NOTE")
        done = run_isolated(server, home, [str(droid), "exec", "-m", model, PROMPT], {})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        assert_tool_round_trip(up, "Read", upstream_model)
    names = [m["displayName"] for m in settings["customModels"]]
    assert sorted(names) == ["Mine", "qwen3-32b [Team Gateway]", "tool-bot [Team Gateway]"]


def test_mistral_vibe_completes_a_tool_round_trip_next_to_the_users_own_models(gateway, tmp_path, alice):
    server, up = gateway
    vibe = tool("PORTAL_VIBE", "bin", "vibe")
    home = tmp_path / "home"
    (home / ".vibe").mkdir(parents=True)
    (home / ".vibe" / "config.toml").write_text(
        'vim_keybindings = true\n\n[[providers]]\nname = "llamacpp"\napi_base = "http://127.0.0.1:8080/v1"\n\n'
        '[[models]]\nname = "devstral"\nprovider = "llamacpp"\nalias = "devstral"\n'
    )
    for default, upstream_model, cap in (("qwen3-32b", "fake-model", OUTPUT), ("tool-bot", "fake-small", SMALL_OUTPUT)):
        install(server, home, alice, "mistral-vibe", default=default)
        ask_for_a_tool(up, home, "read_file", path="note.txt")
        done = run_isolated(server, home, [str(vibe), "-p", PROMPT, "--trust", "--auto-approve"], {})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        assert_tool_round_trip(up, "read_file", upstream_model)
        assert chat_requests(up)[-1].get("max_tokens", cap) <= cap
    text = (home / ".vibe" / "config.toml").read_text()
    assert text.count('name = "teamgw"') == 1 and 'alias = "devstral"' in text and "vim_keybindings = true" in text


def test_openhands_cli_completes_a_tool_round_trip_and_a_reinstall_keeps_the_users_settings(gateway, tmp_path, alice):
    server, up = gateway
    openhands = tool("PORTAL_OPENHANDS", "bin", "openhands")
    home = tmp_path / "home"
    env = {"OPENHANDS_SUPPRESS_BANNER": "1"}
    for default, upstream_model in (("tool-bot", "fake-small"), ("qwen3-32b", "fake-model")):
        install(server, home, alice, "openhands", default=default)
        path = home / ".openhands" / "agent_settings.json"
        settings = json.loads(path.read_text())
        settings["condenser"]["max_size"] = 120  # the user's own setting, beside ours
        path.write_text(json.dumps(settings))
        ask_for_a_tool(up, home, "file_editor", command="view", path="NOTE", security_risk="LOW")
        done = run_isolated(server, home, [str(openhands), "--headless", "-t", PROMPT], env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
        assert_tool_round_trip(up, "file_editor", upstream_model)
    settings = json.loads(path.read_text())
    assert settings["condenser"]["max_size"] == 120 and settings["llm"]["model"] == "openai/qwen3-32b"


# How each client answers one prompt headless, from the files alone (as the tests above run it).
HEADLESS = {
    "continue": (lambda home, bin: [bin, "-p", PROMPT], "cn", {"CONTINUE_CLI_DISABLE_TELEMETRY": "1"}),
    "codex": (lambda home, bin: sourced(home, bin, "exec", "--skip-git-repo-check", PROMPT), "codex", {}),
    "qwen-code": (
        lambda home, bin: [bin, "-p", PROMPT, "--approval-mode", "yolo", "--output-format", "text"],
        "qwen",
        {"QWEN_USAGE_STATISTICS_ENABLED": "false", "QWEN_TELEMETRY_ENABLED": "false"},
    ),
}


@pytest.mark.parametrize(("client", "name", "broken", "problem", "fixed", "theirs", "ours"), FIXED)
def test_a_user_who_fixes_the_file_the_installer_refused_gets_answers_after_installing_again(
    gateway, tmp_path, alice, client, name, broken, problem, fixed, theirs, ours
):
    """The whole journey past a refusal, with the real client: the user's YAML, JSONC or TOML file
    holds their own settings and comments and one broken line. The installer leaves it byte for
    byte and names the line; the user fixes that line and runs a new install command, which merges
    ours in beside theirs; a third run changes nothing (no second backup); the client, configured
    by these files alone, answers through the gateway and the request is in the usage records."""
    from keys.models import UsageRecord
    from tests.gateway.conftest import wait_for

    server, up = gateway
    argv, binary, env = HEADLESS[client]
    client_bin = str(tool("PORTAL_REAL_CLIENTS", "node_modules", ".bin", binary))
    home = tmp_path / "home"
    target = home / name
    target.parent.mkdir(parents=True)
    target.write_text(broken)

    refused = run_installer(server, home, alice, client)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"{target}: left unchanged, the installer cannot edit it safely ({problem}" in refused.stdout
    assert "Fix that and run a new install command from the Connect page" in refused.stdout
    assert target.read_text() == broken and backups(target) == []

    target.write_text(fixed)  # the user fixes the line named, and keeps the rest
    install(server, home, alice, client)
    merged = target.read_text()
    assert theirs in merged and merged.count(ours) == 1
    [backup] = backups(target)
    install(server, home, alice, client)
    assert target.read_text() == merged
    assert backups(target) == [backup] and backup.read_text() == fixed  # the user's own file, still there

    done = run_isolated(server, home, argv(home, client_bin), env)
    assert done.returncode == 0, done.stdout + done.stderr + "\n" + merged
    assert "tok0 tok1 tok2 tok3 tok4" in done.stdout
    assert chat_requests(up)[-1]["model"] == "fake-model"
    record = wait_for(lambda: UsageRecord.objects.filter(user=alice, model="qwen3-32b").first(), timeout=30)
    assert (record.status, record.key.name, record.key.is_active) == ("ok", f"{client}@ci", True)
