"""The fake upstream itself: a broken fake would make every gateway test meaningless."""

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream


@pytest.fixture
def upstream():
    with FakeUpstream() as up:
        yield up


def test_non_stream_reports_usage(upstream):
    r = httpx.post(
        upstream.base_url + "/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "one two three"}]},
    )
    body = r.json()
    assert r.status_code == 200
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    assert body["choices"][0]["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"


def test_stream_sends_usage_only_when_asked(upstream):
    def events(extra):
        with httpx.stream(
            "POST",
            upstream.base_url + "/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}], **extra},
        ) as r:
            return [line for line in r.iter_lines() if line.startswith("data: ")]

    plain = events({})
    with_usage = events({"stream_options": {"include_usage": True}})
    assert plain[-1] == "data: [DONE]" and '"usage"' not in "".join(plain)
    assert '"completion_tokens": 5' in with_usage[-2]


def test_queued_status_then_back_to_normal(upstream):
    upstream.enqueue(mode="status", status=429)
    first = httpx.post(upstream.base_url + "/chat/completions", json={"model": "m", "messages": []})
    second = httpx.post(upstream.base_url + "/chat/completions", json={"model": "m", "messages": []})
    assert (first.status_code, second.status_code) == (429, 200)


def test_disconnect_mid_stream_breaks_the_connection(upstream):
    upstream.behave(mode="disconnect", disconnect_after=2)
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream(
            "POST", upstream.base_url + "/chat/completions", json={"model": "m", "stream": True, "messages": []}
        ) as r:
            list(r.iter_lines())


def test_tokenize_counts_llamacpp_content_and_vllm_prompt(upstream):
    for field in ("content", "prompt"):
        r = httpx.post(upstream.root_url + "/tokenize", json={field: "one two three"})
        assert len(r.json()["tokens"]) == 3


def test_native_messages_and_responses_answer_for_pass_through(upstream):
    m = httpx.post(
        upstream.base_url + "/messages",
        json={"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "one two"}]},
        headers={"anthropic-version": "2023-06-01"},
    ).json()
    assert m["content"][0]["text"] == "tok0 tok1 tok2 tok3 tok4" and m["usage"]["input_tokens"] == 2
    assert upstream.requests[-1].headers["anthropic-version"] == "2023-06-01"
    r = httpx.post(upstream.base_url + "/responses", json={"model": "m", "input": "one two three"}).json()
    assert r["output"][0]["content"][0]["text"] == "tok0 tok1 tok2 tok3 tok4" and r["usage"]["input_tokens"] == 3
    with httpx.stream(
        "POST",
        upstream.base_url + "/messages",
        json={"model": "m", "stream": True, "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]},
    ) as s:
        kinds = [line[7:] for line in s.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_reasoning_comes_first_as_reasoning_content(upstream):
    upstream.behave(reasoning="let me think")
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    whole = httpx.post(upstream.base_url + "/chat/completions", json=body).json()
    assert whole["choices"][0]["message"]["reasoning_content"] == "let me think"
    assert whole["usage"]["completion_tokens"] == 5 + 3
    with httpx.stream("POST", upstream.base_url + "/chat/completions", json={**body, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: {")]
    assert '"reasoning_content": "let"' in lines[0] and '"tok0"' in "".join(lines[3:])


def test_messages_refuses_tool_ids_outside_anthropics_pattern(upstream):
    turns = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "functions.get:0", "name": "w", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "functions.get:0", "content": "18"}]},
    ]
    r = httpx.post(upstream.base_url + "/messages", json={"model": "m", "max_tokens": 5, "messages": turns})
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("messages.1.content.0.tool_use.id: String should match pattern")
