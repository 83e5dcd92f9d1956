"""Requests recorded from the real clients (Claude Code 2.1.197, Codex 0.171.0) against a gateway
on 127.0.0.1; long strings trimmed, ids redacted. Both clients were then run end to end through
the gateway (text, and a tool call the client executed) with these translations."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.translate import anthropic_request, responses_request

FIXTURES = Path(__file__).parent / "fixtures"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def test_claude_codes_request_translates_with_all_its_tools_and_one_system_prompt():
    body = load("claude_code_2.1.197_request.json")["body"]
    chat = anthropic_request.to_chat_request(body)
    roles = [m["role"] for m in chat["messages"]]
    assert roles == ["system", "user"]  # the mid-conversation system message joined the first
    system = chat["messages"][0]["content"]
    assert system.startswith("x-anthropic-billing-header") and "Available agent types" in system
    assert [t["function"]["name"] for t in chat["tools"]] == [t["name"] for t in body["tools"]]
    assert chat["max_tokens"] == 32000 and chat["stream"] is True
    assert set(chat) == {"model", "messages", "max_tokens", "tools", "stream", "stream_options"}


def test_codexs_request_keeps_function_tools_and_folds_developer_messages_into_system():
    body = load("codex_0.171.0_request.json")["body"]
    chat = responses_request.to_chat_request(body)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "user"]
    function_tools = [t["name"] for t in body["tools"] if t["type"] == "function"]
    assert [t["function"]["name"] for t in chat["tools"]] == function_tools
    assert {t["type"] for t in body["tools"]} - {"function"} == {"namespace", "web_search"}
    assert chat["tool_choice"] == "auto" and chat["parallel_tool_calls"] is True
    assert "reasoning_effort" not in chat and "store" not in chat
