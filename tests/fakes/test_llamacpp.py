"""Real llama.cpp (xllamacpp) on the tiny GGUF: the fixture the launch and gateway tests rely on."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import openai
import pytest

from tests.fakes.llamacpp import REPO_ROOT, LlamaServer, install_llama_server, tiny_gguf_path
from tests.services import free_port

# The tiny model has random weights and may emit EOS at once; llama.cpp's ignore_eos makes the
# number of generated tokens exactly max_tokens, so usage can be asserted to the token.
EXACT = {"ignore_eos": True}


@pytest.fixture(scope="module")
def llama():
    with LlamaServer(ctx=1024, api_key="test-upstream-key") as server:
        yield server


def test_chat_completion_reports_usage(llama):
    client = openai.OpenAI(base_url=llama.base_url, api_key="test-upstream-key")
    reply = client.chat.completions.create(
        model=llama.model_id, messages=[{"role": "user", "content": "hello world"}], max_tokens=4, extra_body=EXACT
    )
    assert reply.usage.completion_tokens == 4
    assert reply.usage.prompt_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 4


def test_streamed_chat_completion_reports_usage_when_asked(llama):
    client = openai.OpenAI(base_url=llama.base_url, api_key="test-upstream-key")
    chunks = list(
        client.chat.completions.create(
            model=llama.model_id,
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=3,
            extra_body=EXACT,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_it_rejects_a_wrong_api_key_but_serves_health_without_one(llama):
    client = openai.OpenAI(base_url=llama.base_url, api_key="wrong")
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert httpx.get(llama.root_url + "/health").json() == {"status": "ok"}


def test_it_reports_the_context_window_and_the_alias(llama):
    headers = {"Authorization": "Bearer test-upstream-key"}
    props = httpx.get(llama.root_url + "/props", headers=headers).json()
    models = httpx.get(llama.base_url + "/models", headers=headers).json()
    assert props["default_generation_settings"]["n_ctx"] == 1024
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["meta"]["n_ctx_train"] == 4096


def test_cli_wrapper_exits_with_llama_servers_message_when_the_port_is_taken(tmp_path):
    script = install_llama_server(tmp_path / "bin")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [str(script), "-m", str(tiny_gguf_path()), "-c", "512", "--port", str(port), "-t", "1"],
            capture_output=True,
            timeout=60,
            text=True,
        )
    assert run.returncode == 1
    assert "couldn't bind HTTP server socket" in run.stderr


def test_cli_wrapper_exits_when_the_model_file_is_missing(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "tests.fakes.llamacpp", "-m", str(tmp_path / "nope.gguf"), "--port", str(free_port())],
        capture_output=True,
        timeout=60,
        text=True,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 1
    assert "nope.gguf" in run.stderr
