"""The gateway keeps its contract with real model servers (issue 24): a non-streaming answer is
bounded by liveness (first token, gaps between tokens), not a headers wall; the output reserved
holds against an upstream that ignores max_tokens, streamed or not; usage an upstream reports is
bounded; and the relay is faithful (request ids, no usage the client did not ask for, our own
error events). Real uvicorn in front of fake upstreams on 127.0.0.1, the `openai` SDK as client."""

from __future__ import annotations

import time

import httpx
import openai
import orjson
import pytest

from keys.models import UsageRecord
from keys.services import issue_key
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, ThreadServer, add_channel, wait_for

pytestmark = [pytest.mark.slow]

MESSAGES = [{"role": "user", "content": "abcd"}]
BODY = {"model": "qwen3-32b", "messages": MESSAGES, "max_tokens": 5}


@pytest.fixture
def gateway(transactional_db, settings):
    """Deadlines far below the defaults, so a test proves which one holds without waiting long."""
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_HEADERS_TIMEOUT = 1.0
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 30.0
    settings.GATEWAY_IDLE_TIMEOUT = 30.0
    server = ThreadServer().start()
    yield server.url
    server.stop()


@pytest.fixture
def backup(setup):
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        add_channel(up, "backup", priority=-1, model=setup.model)
        yield up


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def post(url: str, key: str, body=BODY) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def stream_text(url: str, key: str, body) -> tuple[int, str]:
    with httpx.stream(
        "POST",
        url + "/v1/chat/completions",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    ) as r:
        return r.status_code, r.read().decode()


def chunks_of(text: str) -> list[dict]:
    return [orjson.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


# --- liveness, not a wall ---------------------------------------------------------------------


def test_a_non_streaming_answer_slower_than_the_headers_timeout_succeeds(setup, upstream, gateway):
    """vLLM sends a non-streaming answer's headers only once it is generated: here after 3 s,
    three times GATEWAY_HEADERS_TIMEOUT (1 s). Asked for as a stream, the server sends its headers
    at once and a token every 0.5 s, so the answer arrives whole, and the client's call succeeds."""
    upstream.behave(tokens=6, token_delay=0.5)
    started = time.monotonic()
    raw = sdk(gateway, setup.plaintext).chat.completions.with_raw_response.create(
        model="qwen3-32b", messages=MESSAGES, max_tokens=10
    )
    took = time.monotonic() - started
    reply = raw.parse()
    assert reply.choices[0].message.content == "tok0 tok1 tok2 tok3 tok4 tok5"
    assert reply.choices[0].finish_reason == "stop" and reply.usage.completion_tokens == 6
    assert took > 2.5  # longer than the headers deadline: it was not what bounded the call
    sent = upstream.requests[-1].json
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "ok" and not record.estimated and record.completion_tokens == 6
    assert record.ttft_ms is not None and record.ttft_ms < record.latency_ms
    assert raw.headers["x-request-id"] == record.request_id == reply._request_id
    assert record.upstream_request_id.startswith("up-")


@pytest.mark.parametrize("ignoring", [False, True])
def test_a_long_answer_read_in_batches_arrives_whole_and_cut_where_reserved(
    setup, upstream, gateway, unread_gaps, ignoring
):
    """Over real sockets, the rest of a fast stream is read in batches (`call._unread_for`: the
    upstream's connection left unread between reads, through aiohttp's flow control): 300 tokens
    3 ms apart arrive whole and in order, the upstream's usage recorded; from an upstream that
    ignores max_tokens the answer is cut at the reservation, its connection closed."""
    upstream.behave(tokens=300, token_delay=0.003, ignore_max_tokens=ignoring)
    r = post(gateway, setup.plaintext, {**BODY, "max_tokens": 200 if ignoring else 400})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == " ".join(f"tok{i}" for i in range(200 if ignoring else 300))
    assert choice["finish_reason"] == ("length" if ignoring else "stop")
    assert unread_gaps and max(unread_gaps) <= 0.1  # it was read in batches
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "ok" and record.completion_tokens == (200 if ignoring else 300)


def test_a_burst_that_ends_the_stream_after_a_gap_is_read_whole(setup, upstream, gateway, settings):
    """A server writes an event a token; over a network a burst of them reaches the gateway in one
    read. Here 150 tokens come 3 ms apart (read in batches by then), then, after 0.3 s, longer than
    any batch's gap, the other 50, the last event and the body's end in one write, each event an
    HTTP chunk of its own, and the connection stays open: the whole answer, through the gateway.
    (A guard: the timing that made a reader paused through aiohttp's parser stall on such a burst
    is pinned in test_assemble_batches.py.)"""
    settings.GATEWAY_IDLE_TIMEOUT = 5.0
    upstream.behave(tokens=200, token_delay=0.003, mode="coalesced_end", stall_after=150, split_pause=0.3)
    r = post(gateway, setup.plaintext, {**BODY, "max_tokens": 300})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == " ".join(f"tok{i}" for i in range(200))
    assert choice["finish_reason"] == "stop" and r.json()["usage"]["completion_tokens"] == 200


def test_the_assembled_answer_keeps_every_field(setup, upstream, gateway):
    upstream.behave(tokens=3, reasoning="let me think", system_fingerprint="fp_abc")
    data = post(gateway, setup.plaintext, {**BODY, "max_tokens": 20, "logprobs": True}).json()
    choice = data["choices"][0]
    assert data["object"] == "chat.completion" and data["system_fingerprint"] == "fp_abc"
    assert choice["message"]["content"] == "tok0 tok1 tok2"
    assert choice["message"]["reasoning_content"] == "let me think"
    assert [t["token"] for t in choice["logprobs"]["content"]] == ["tok0", " tok1", " tok2"]
    assert data["usage"]["completion_tokens"] == 6 and "usage" not in choice

    upstream.behave(mode="tool_call")
    message = sdk(gateway, setup.plaintext).chat.completions.create(model="qwen3-32b", messages=MESSAGES).choices[0]
    assert message.finish_reason == "tool_calls"
    call = message.message.tool_calls[0]
    assert call.function.name == "get_weather" and orjson.loads(call.function.arguments)["city"] == "Paris"
    assert call.id.startswith("call_")


def test_a_tool_call_streamed_without_index_is_assembled_as_one_call(setup, upstream, gateway):
    """Some servers leave `index` out of a call's deltas, sending one call per run of chunks: its
    argument pieces belong to the call they follow, not to calls of their own."""
    upstream.behave(mode="tool_call", tool_index=False)
    message = sdk(gateway, setup.plaintext).chat.completions.create(model="qwen3-32b", messages=MESSAGES).choices[0]
    (call,) = message.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}


def test_llamacpp_timings_are_kept(setup, gateway, transactional_db):
    with FakeUpstream(api_key=UPSTREAM_KEY, flavour="llamacpp") as llama:
        setup.channel.base_url = llama.base_url
        setup.channel.save()
        llama.behave(tokens=2, cached=1)
        data = post(gateway, setup.plaintext).json()
    assert data["timings"]["predicted_n"] == 2 and data["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_stream_longer_than_the_idle_timeout_with_short_gaps_is_answered(setup, upstream, gateway, settings, stream):
    """The idle timeout bounds each gap, not the answer: 12 tokens 0.25 s apart (3 s in all)
    under a 2 s idle timeout, through the gateway's one timer per stream (`call.StreamWaits`),
    which a wait moves on."""
    settings.GATEWAY_IDLE_TIMEOUT = 2.0
    upstream.behave(tokens=12, token_delay=0.25)
    body = {**BODY, "max_tokens": 20}
    started = time.monotonic()
    if stream:
        status, text = stream_text(gateway, setup.plaintext, body)
        assert status == 200 and text.rstrip().endswith("data: [DONE]"), text
        assert "error" not in text and "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks_of(text) if c.get("choices")
        ) == " ".join(f"tok{i}" for i in range(12))
    else:
        r = post(gateway, setup.plaintext, body)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == " ".join(f"tok{i}" for i in range(12))
    assert time.monotonic() - started > 2.0  # longer than the idle timeout: it did not bound the answer


@pytest.mark.parametrize("stream", [False, True])
def test_a_stall_between_tokens_names_the_idle_timeout(setup, upstream, gateway, settings, stream):
    settings.GATEWAY_IDLE_TIMEOUT = 1.0
    upstream.behave(mode="stall", stall_after=2)
    if stream:
        status, text = stream_text(gateway, setup.plaintext, BODY)
        assert status == 200 and "GATEWAY_IDLE_TIMEOUT" in text and text.rstrip().endswith("data: [DONE]")
    else:
        r = post(gateway, setup.plaintext)
        assert r.status_code == 504 and "GATEWAY_IDLE_TIMEOUT" in r.json()["error"]["message"], r.text


def test_a_server_that_never_starts_answering_names_the_first_token_timeout(setup, upstream, gateway, settings):
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 1.0
    upstream.behave(mode="stall", stall_after=0)  # headers, then nothing
    r = post(gateway, setup.plaintext)
    assert r.status_code == 504 and "GATEWAY_FIRST_TOKEN_TIMEOUT" in r.json()["error"]["message"], r.text


@pytest.fixture
def llama_busy(setup, transactional_db):
    """A llama.cpp-like server whose one slot is busy: like llama-server, it sends a stream's
    headers with its first token, so a request waiting 3 s for the slot (three times the 1 s
    GATEWAY_HEADERS_TIMEOUT) gets no byte, not even headers, before then (measured on the real
    server, xllamacpp with `-np 1`: a request queued behind a 3,000-token answer got its headers
    after 3.05 s, with its first token)."""
    with FakeUpstream(api_key=UPSTREAM_KEY, flavour="llamacpp") as llama:
        setup.channel.kind = "llamacpp"
        setup.channel.base_url = llama.base_url
        setup.channel.save()
        llama.behave(tokens=3, delay=3.0)
        yield llama


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_waiting_for_a_busy_llamacpp_slot_is_answered(setup, llama_busy, gateway, stream):
    """Before, the headers deadline (30 s by default) cut every request that waited longer for a
    slot or for a long prompt's prefill, whatever the first token's deadline (which scales with
    the prompt) allowed, and put the busy channel on its cooldown as if it hung."""
    started = time.monotonic()
    if stream:
        status, text = stream_text(gateway, setup.plaintext, BODY)
        assert status == 200 and text.rstrip().endswith("data: [DONE]"), text
        assert "error" not in text
    else:
        r = post(gateway, setup.plaintext)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2"
    assert time.monotonic() - started > 2.5  # it waited past the headers deadline
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "ok" and record.ttft_ms is not None and record.ttft_ms > 2500
    assert len(llama_busy.requests) == 1  # one attempt: no failover, no retry


def test_a_server_that_sends_no_headers_names_the_first_token_timeout(setup, upstream, gateway, settings):
    """A stream's headers wait as long as its first token: the error names that setting."""
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 2.0
    upstream.behave(mode="slow", delay=60)
    r = post(gateway, setup.plaintext)
    assert r.status_code == 504, r.text
    assert "sent no first token within GATEWAY_FIRST_TOKEN_TIMEOUT" in r.json()["error"]["message"]


def test_an_answer_that_is_not_a_stream_keeps_the_headers_deadline(setup, upstream, gateway):
    """Embeddings cannot be streamed: their headers come with the whole answer, within
    GATEWAY_HEADERS_TIMEOUT (1 s here), however long the first token's deadline (30 s)."""
    upstream.behave(mode="slow", delay=60)
    started = time.monotonic()
    r = httpx.post(
        gateway + "/v1/embeddings",
        json={"model": "qwen3-32b", "input": "abcd"},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=60,
    )
    assert r.status_code == 504 and "GATEWAY_HEADERS_TIMEOUT" in r.json()["error"]["message"], r.text
    assert time.monotonic() - started < 25  # not the first token's 30 s


def test_a_large_embedding_input_gets_its_prefill_before_the_headers_deadline(setup, upstream, gateway, settings):
    """Embeddings cannot be streamed: the headers come with the whole answer, and reading the
    input is all of it. 2,000 estimated tokens at 100 a second may take 20 s more than
    GATEWAY_HEADERS_TIMEOUT (1 s here); a server that answers after 3 s is waited for (it was a 504
    at 1 s: a CPU server indexing Continue's 64 chunks of 500 tokens never answered in time)."""
    settings.GATEWAY_PREFILL_TOKENS_PER_SECOND = 100.0
    upstream.behave(mode="slow", delay=3)
    r = httpx.post(
        gateway + "/v1/embeddings",
        json={"model": "qwen3-32b", "input": ["word " * 800, "word " * 800]},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 2
    # A server that never answers is still cut off, and the error says the deadline grew with the input.
    upstream.behave(mode="slow", delay=120)
    r = httpx.post(
        gateway + "/v1/embeddings",
        json={"model": "qwen3-32b", "input": "word " * 400},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=60,
    )
    assert r.status_code == 504, r.text
    message = r.json()["error"]["message"]
    assert "within GATEWAY_HEADERS_TIMEOUT plus the prompt at GATEWAY_PREFILL_TOKENS_PER_SECOND (6 s)" in message


def test_a_streams_headers_wait_for_the_longer_of_the_two_deadlines(settings):
    from gateway.call import headers_deadline
    from gateway.errors import Failure

    assert headers_deadline(True, 30.0, 420.0, 300.0) == (Failure.FIRST_TOKEN_TIMEOUT, 420.0)
    assert headers_deadline(False, 30.0, 420.0) == (Failure.HEADERS_TIMEOUT, 30.0)
    assert headers_deadline(True, 30.0, 10.0, 300.0) == (Failure.HEADERS_TIMEOUT, 30.0)
    # An answer that cannot be streamed: the headers come with it, after the whole input's prefill.
    assert headers_deadline(False, 30.0, 420.0, 300.0) == (Failure.HEADERS_TIMEOUT, 330.0)


def test_the_first_token_deadline_scales_with_the_prompt(settings):
    from gateway.call import first_token_timeout

    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 120.0
    settings.GATEWAY_PREFILL_TOKENS_PER_SECOND = 100.0
    assert first_token_timeout(0) == 120.0 and first_token_timeout(30_000) == 420.0


# --- the reservation holds --------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_ignoring_max_tokens_is_cut_exactly_and_the_quota_holds(setup, upstream, gateway, alice, stream):
    """60 tokens a day, each request reserves 1 + 5; the upstream generates 40 whatever it is
    asked. Every answer is cut at exactly 5 tokens with finish reason `length`, and what is spent
    stays within one reservation of the quota."""
    upstream.behave(tokens=40, ignore_max_tokens=True)
    key, plain = issue_key(owner=alice, name="daily", tokens_per_day=60)
    statuses = []
    for _ in range(14):
        if stream:
            status, text = stream_text(gateway, plain, BODY)
            statuses.append(status)
            if status == 200:
                chunks = chunks_of(text)
                words = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
                assert [w for w in words if w] == ["tok0", " tok1", " tok2", " tok3", " tok4"]
                assert chunks[-1]["choices"][0]["finish_reason"] == "length"
                assert text.rstrip().endswith("data: [DONE]")
        else:
            r = post(gateway, plain)
            statuses.append(r.status_code)
            if r.status_code == 200:
                choice = r.json()["choices"][0]
                assert choice["message"]["content"] == "tok0 tok1 tok2 tok3 tok4"
                assert choice["finish_reason"] == "length"
    # Each answer is charged ≈10 (the upstream's tokenizer counts the prompt with its template).
    assert statuses.count(200) >= 5 and statuses.count(429) >= 1
    wait_for(lambda: UsageRecord.objects.filter(key=key, status="ok").count() == statuses.count(200))
    spent = sum(r.total_tokens for r in UsageRecord.objects.filter(key=key))
    assert spent <= 60 + 6, spent


@pytest.mark.parametrize("stream", [False, True])
def test_absurd_upstream_usage_is_bounded_and_flagged(setup, upstream, gateway, alice, stream):
    upstream.behave(tokens=3, usage_override={"prompt_tokens": 10**18, "completion_tokens": 10**18})
    key, plain = issue_key(owner=alice, name="daily", tokens_per_day=100_000)
    for _ in range(2):  # the first did not lock the key out for the day
        if stream:
            assert stream_text(gateway, plain, BODY)[0] == 200
        else:
            assert post(gateway, plain).status_code == 200
    records = wait_for(
        lambda: list(UsageRecord.objects.filter(key=key)) if UsageRecord.objects.filter(key=key).count() == 2 else None
    )
    for record in records:
        assert record.estimated and "implausible" in record.error
        assert record.completion_tokens <= 5 and record.prompt_tokens < 10_000


def _answer_usage(gateway: str, key: str, surface: str) -> tuple[int, int]:
    """Prompt and output tokens a non-streaming answer on `surface` shows its client."""
    headers = {"Authorization": f"Bearer {key}"}
    if surface == "messages":
        body = {"model": "qwen3-32b", "max_tokens": 5, "messages": MESSAGES}
        r = httpx.post(gateway + "/v1/messages", json=body, headers=headers, timeout=60)
        usage = r.json()["usage"]
        read, written = usage.get("cache_read_input_tokens") or 0, usage.get("cache_creation_input_tokens") or 0
        return usage["input_tokens"] + read + written, usage["output_tokens"]
    if surface == "responses":
        body = {"model": "qwen3-32b", "max_output_tokens": 5, "input": "abcd"}
        r = httpx.post(gateway + "/v1/responses", json=body, headers=headers, timeout=60)
        return r.json()["usage"]["input_tokens"], r.json()["usage"]["output_tokens"]
    usage = post(gateway, key).json()["usage"]
    return usage["prompt_tokens"], usage["completion_tokens"]


@pytest.mark.parametrize("surface", ["chat", "messages", "responses"])
def test_an_implausible_usage_is_shown_to_the_client_as_it_is_charged(setup, upstream, gateway, surface):
    """Regression (probe): the record was bounded, the answer's body still said 10^18 tokens (on
    Messages and Responses, more output than max_tokens): the client sees what it is charged."""
    upstream.behave(tokens=3, usage_override={"prompt_tokens": 10**18, "completion_tokens": 10**18})
    shown = _answer_usage(gateway, setup.plaintext, surface)
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert "implausible" in record.error and record.completion_tokens <= 5
    assert shown == (record.prompt_tokens, record.completion_tokens)


@pytest.mark.parametrize("surface", ["messages", "responses"])
def test_an_answer_without_usage_is_estimated_alike_on_every_surface(setup, upstream, gateway, surface):
    """Regression (probe): an answer without usage was charged by the stream's output events on
    Chat, by an estimate of its text on Messages and Responses (Messages adding two characters a
    text block, the JSON of a missing tool input). A cloud channel: no tokenizer of the upstream's
    counts the answer again."""
    setup.channel.kind = "openai"
    setup.channel.save()
    upstream.behave(tokens=40, mode="omit_usage")
    _answer_usage(gateway, setup.plaintext, "chat")
    chat = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    shown = _answer_usage(gateway, setup.plaintext, surface)
    other = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).exclude(pk=chat.pk).first())
    assert chat.estimated and other.estimated
    assert shown[1] == other.completion_tokens == chat.completion_tokens, (shown, chat.completion_tokens)


@pytest.mark.parametrize("n", [0, 129, "100", True, 2.0])
def test_an_n_the_gateway_cannot_count_is_refused(setup, upstream, gateway, n):
    """The body goes upstream as sent: an `n` the gateway would count as one choice (while a
    server such as vLLM answers `"100"` with a hundred) would make every other choice free."""
    r = post(gateway, setup.plaintext, {**BODY, "n": n})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "n" and "1 to 128" in r.json()["error"]["message"]
    assert upstream.requests == []


def test_each_choice_is_reserved_against_a_token_limit(setup, upstream, gateway, alice):
    _key, plain = issue_key(owner=alice, name="per-minute", tokens_per_minute=500)
    refused = post(gateway, plain, {**BODY, "n": 100, "max_tokens": 10})
    assert refused.status_code == 429 and "× 100 choices" in refused.json()["error"]["message"]
    admitted = post(gateway, plain, {**BODY, "n": 2, "max_tokens": 10})
    assert admitted.status_code == 200 and len(admitted.json()["choices"]) == 2
    assert int(admitted.headers["x-ratelimit-remaining-tokens"]) <= 500 - 2 * 10


def test_a_request_that_no_wait_could_admit_is_not_retried_by_the_sdk(setup, upstream, gateway, alice):
    """Regression (probe): max_tokens over a key's whole 100 tokens a minute was a 429 with
    Retry-After: 60, which the SDKs wait on and retry, for a request that can never fit."""
    _key, plain = issue_key(owner=alice, name="per-minute", tokens_per_minute=100)
    sent: list[httpx.Request] = []
    client = openai.OpenAI(
        base_url=gateway + "/v1",
        api_key=plain,
        max_retries=2,
        http_client=httpx.Client(event_hooks={"request": [sent.append]}, timeout=60),
    )
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="qwen3-32b", messages=MESSAGES, max_tokens=200)
    assert len(sent) == 1  # not retried
    answer = raised.value.response
    assert answer.headers["x-should-retry"] == "false" and "retry-after" not in answer.headers
    error = answer.json()["error"]
    assert error["code"] == "request_too_large"
    assert "tokens per minute limit of this key (100)" in error["message"] and "at most 99." in error["message"], error


def test_without_max_tokens_the_output_reserved_fits_the_token_limit(setup, upstream, gateway, alice):
    """The default output (4,096) is shrunk to what the key's 100 tokens a minute leave after the
    prompt: the first call without max_tokens is answered, not refused for a default it never sent."""
    _key, plain = issue_key(owner=alice, name="per-minute", tokens_per_minute=100)
    upstream.behave(tokens=3)
    admitted = post(gateway, plain, {"model": "qwen3-32b", "messages": MESSAGES})
    assert admitted.status_code == 200, admitted.text
    assert admitted.json()["choices"][0]["message"]["content"] == "tok0 tok1 tok2"
    assert 0 <= int(admitted.headers["x-ratelimit-remaining-tokens"]) < 100


def test_without_max_tokens_a_partly_used_token_limit_still_answers_with_what_is_left(setup, upstream, gateway, alice):
    """The default output shrinks to what the key's 100 tokens a day have left, not to the whole
    limit: once a call has used part of it, the next one without max_tokens is answered (it was
    refused 429 until the next UTC day for a default it never sent), cut at what is left."""
    _key, plain = issue_key(owner=alice, name="per-day", tokens_per_day=100)
    upstream.behave(tokens=3)
    first = post(gateway, plain, {"model": "qwen3-32b", "messages": MESSAGES})
    assert first.status_code == 200, first.text
    used = first.json()["usage"]["total_tokens"]
    upstream.behave(tokens=200, ignore_max_tokens=True)
    second = post(gateway, plain, {"model": "qwen3-32b", "messages": MESSAGES})
    assert second.status_code == 200, second.text
    answer = second.json()
    assert answer["choices"][0]["finish_reason"] == "length"
    # Cut within what was left after the prompt (as the gateway estimates it before sending).
    assert 0 < answer["usage"]["completion_tokens"] < 100 - used, (used, answer["usage"])
    spent = post(gateway, plain, {"model": "qwen3-32b", "messages": MESSAGES})
    assert spent.status_code == 429 and spent.json()["error"]["code"] == "quota_exceeded", spent.text
    assert "cannot hold this request's prompt" in spent.json()["error"]["message"]  # no smaller max_tokens helps


@pytest.mark.parametrize("stream", [False, True])
def test_every_prompt_of_a_completions_prompt_list_is_reserved_and_charged(setup, upstream, gateway, stream):
    """A prompt list is answered one choice a prompt (vLLM): each is charged, none bounded away."""
    body = {"model": "qwen3-32b", "prompt": ["a", "b", "c", "d"], "max_tokens": 3, "stream": stream}
    r = httpx.post(
        gateway + "/v1/completions", json=body, headers={"Authorization": f"Bearer {setup.plaintext}"}, timeout=60
    )
    assert r.status_code == 200, r.text
    if not stream:
        assert sorted(c["index"] for c in r.json()["choices"]) == [0, 1, 2, 3]
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.completion_tokens, record.estimated, record.error) == (12, False, "")


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_cut_at_the_reservation_carries_the_usage_charged(setup, upstream, gateway, stream):
    """The upstream ignores max_tokens; the gateway cuts the answer at 5 tokens, before the
    upstream's usage: the client that asked for usage (every non-streaming one) gets what was
    charged, through the official SDK."""
    upstream.behave(tokens=40, ignore_max_tokens=True)
    client = sdk(gateway, setup.plaintext)
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="qwen3-32b", messages=MESSAGES, max_tokens=5, stream=True, stream_options={"include_usage": True}
            )
        )
        assert chunks[-2].choices[0].finish_reason == "length" and not chunks[-1].choices
        usage = chunks[-1].usage
        assert chunks[-1].id == chunks[0].id
    else:
        answer = client.chat.completions.create(model="qwen3-32b", messages=MESSAGES, max_tokens=5)
        assert answer.choices[0].finish_reason == "length"
        usage = answer.usage
    assert usage is not None and usage.completion_tokens == 5
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (usage.prompt_tokens, usage.completion_tokens) == (record.prompt_tokens, record.completion_tokens)


def test_a_stream_whose_upstream_sent_no_usage_gets_the_estimate_when_asked(setup, upstream, gateway):
    upstream.behave(mode="omit_usage")
    stream = sdk(gateway, setup.plaintext).chat.completions.create(
        model="qwen3-32b", messages=MESSAGES, max_tokens=5, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usages) == 1 and usages[0].completion_tokens == 5
    assert (chunks[-1].id, chunks[-1].model, chunks[-1].object) == (chunks[0].id, chunks[0].model, chunks[0].object)


# --- a faithful relay -------------------------------------------------------------------------


def test_no_usage_is_injected_into_chunks_the_client_did_not_ask_for(setup, upstream, gateway):
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and '"usage"' not in text
    status, text = stream_text(gateway, setup.plaintext, {**BODY, "stream_options": {"include_usage": True}})
    assert chunks_of(text)[-1]["usage"]["completion_tokens"] == 5


def test_a_mid_stream_error_is_replaced_by_ours(setup, upstream, gateway):
    upstream.behave(mode="stream_error", stall_after=2, error_message="boom sk-upstream-secret-0000")
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and "sk-upstream" not in text and "boom" not in text
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert f"request {record.request_id}" in text and record.status == "upstream_error"


def test_what_came_before_a_mid_stream_error_in_the_same_read_reaches_the_client(setup, upstream, gateway):
    """Regression (probe): the events read with an upstream's error event were dropped with it, so
    a client got our error without the text the model had already written (a Messages client not
    even its `message_start`)."""
    upstream.behave(mode="coalesced_error", stall_after=3, error_message="boom")
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and "boom" not in text
    words = [c["choices"][0]["delta"].get("content") for c in chunks_of(text) if c.get("choices")]
    assert [w for w in words if w] == ["tok0", " tok1"]
    assert text.index("tok1") < text.index("upstream_stream_error")
    with httpx.stream(
        "POST",
        gateway + "/v1/messages",
        json={"model": "qwen3-32b", "max_tokens": 5, "messages": MESSAGES, "stream": True},
        headers={"x-api-key": setup.plaintext, "anthropic-version": "2023-06-01"},
        timeout=60,
    ) as r:
        text = r.read().decode()
    assert r.status_code == 200 and "boom" not in text
    kinds = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "error", kinds
    assert '"tok0"' in text and '" tok1"' in text


def test_invalid_json_on_a_stream_fails_over_before_the_first_byte(setup, upstream, backup, gateway):
    upstream.behave(mode="stream_junk", stall_after=0)
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and "tok4" in text and len(backup.requests) == 1


def test_invalid_json_after_the_first_byte_is_an_error(setup, upstream, gateway):
    upstream.behave(mode="stream_junk", stall_after=3)
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and "upstream_stream_error" in text
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "upstream_error" and "invalid_json" in record.error


def test_a_chat_stream_that_ends_before_its_done_is_an_error(setup, upstream, gateway):
    upstream.behave(mode="truncate", stall_after=3)
    status, text = stream_text(gateway, setup.plaintext, BODY)
    assert status == 200 and "upstream_truncated" in text and text.rstrip().endswith("data: [DONE]")
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "upstream_error" and "truncated" in record.error, record.error


def test_a_non_streaming_answer_whose_stream_ends_before_its_done_fails_over(setup, upstream, backup, gateway):
    upstream.behave(mode="truncate", stall_after=3)
    r = post(gateway, setup.plaintext)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].endswith("tok4")
    assert len(backup.requests) == 1


def test_an_overloaded_upstream_is_503_with_retry_after(setup, upstream, gateway):
    upstream.behave(mode="status", status=529, error_type="overloaded_error", retry_after="3")
    r = post(gateway, setup.plaintext)
    assert r.status_code == 503 and r.headers["retry-after"] == "3"
    assert r.json()["error"]["code"] == "upstream_overloaded"


def test_a_llamacpp_server_loading_its_weights_is_503_with_retry_after(setup, upstream, gateway):
    """llama-server answers 503 `unavailable_error` "Loading model" for the minute or more it loads
    its weights after a restart: a wait, as an overloaded upstream's, not a 502 an SDK retries at
    once (Claude Code, on the Messages surface, backs off on 529)."""
    import anthropic

    upstream.behave(mode="status", status=503, error_type="unavailable_error", error_message="Loading model")
    r = post(gateway, setup.plaintext)
    assert (r.status_code, r.headers.get("retry-after")) == (503, "5"), r.text
    assert r.json()["error"]["code"] == "upstream_overloaded" and "Loading model" in r.json()["error"]["message"]
    client = anthropic.Anthropic(base_url=gateway, api_key=setup.plaintext, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=MESSAGES)
    assert raised.value.status_code == 529 and raised.value.body["error"]["type"] == "overloaded_error"


def test_every_answer_has_a_request_id_and_our_own_rate_headers(setup, upstream, gateway, alice):
    refused = httpx.post(gateway + "/v1/chat/completions", json=BODY, headers={"Authorization": "Bearer nope"})
    assert refused.status_code == 401 and refused.headers["x-request-id"]
    _key, plain = issue_key(owner=alice, name="limited", requests_per_minute=7)
    r = post(gateway, plain)
    assert r.status_code == 200 and r.headers["x-ratelimit-limit-requests"] == "7"
    status, _ = stream_text(gateway, plain, BODY)
    assert status == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/keys/", "/login/"])
def test_a_body_that_never_arrives_gets_408(setup, gateway, settings, path):
    import socket

    settings.PORTAL_BODY_TIMEOUT = 1.0
    port = int(gateway.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"model"')  # a tenth of the body, then nothing
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    if path.startswith("/v1/"):  # the gateway's answers all carry their request id
        assert b"\r\nx-request-id: " in answer, answer[:300]


@pytest.mark.parametrize("key", [None, "gp-not-a-real-key"])
def test_a_large_body_is_read_only_for_a_valid_key(setup, gateway, key):
    """50 MB announced without a valid key: 401 at once, not after the body (up to 64 MB buffered
    for anyone, then its 401; or its 408 after the body deadline, a connection held meanwhile)."""
    import socket

    port = int(gateway.rsplit(":", 1)[1])
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"{auth}Content-Length: 50000000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head.encode() + b'{"model": "qwen3-32b", "messages": [' + b" " * 100_000)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]
    # With a valid key the same size is read and judged on its content (here: too long a prompt).
    big = {**BODY, "messages": [{"role": "user", "content": "word " * 400_000}]}
    read = post(gateway, setup.plaintext, big)
    assert read.status_code == 400 and read.json()["error"]["code"] == "context_length_exceeded", read.text


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices_are_cut_each_at_the_reservation(setup, upstream, gateway, stream):
    upstream.behave(tokens=40, ignore_max_tokens=True)
    body = {**BODY, "n": 2, "max_tokens": 3}
    if stream:
        status, text = stream_text(gateway, setup.plaintext, body)
        assert status == 200
        got: dict[int, list[str]] = {0: [], 1: []}
        finish: dict[int, str] = {}
        for chunk in chunks_of(text):
            for choice in chunk["choices"]:
                if choice["delta"].get("content"):
                    got[choice["index"]].append(choice["delta"]["content"])
                if choice["finish_reason"]:
                    finish[choice["index"]] = choice["finish_reason"]
        assert got == {0: ["tok0", " tok1", " tok2"], 1: ["tok0", " tok1", " tok2"]}
        assert finish == {0: "length", 1: "length"}
    else:
        choices = post(gateway, setup.plaintext, body).json()["choices"]
        assert [(c["message"]["content"], c["finish_reason"]) for c in choices] == [("tok0 tok1 tok2", "length")] * 2


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices_on_llamacpp_are_charged_for_every_choice(setup, gateway, stream):
    """Regression (probe): llama.cpp ends each of n choices with a usage chunk of its own (the
    prompt, and that choice's output); each replaced the last, so two choices of 3 tokens were
    charged 3. The prompt is counted once; a client that asked for usage gets one usage chunk."""
    with FakeUpstream(api_key=UPSTREAM_KEY, flavour="llamacpp") as llama:
        setup.channel.base_url = llama.base_url
        setup.channel.save()
        llama.behave(tokens=3)
        body = {**BODY, "n": 2, "max_tokens": 3}
        if stream:
            status, text = stream_text(gateway, setup.plaintext, {**body, "stream_options": {"include_usage": True}})
            usages = [c["usage"] for c in chunks_of(text) if c.get("usage")]
            assert status == 200 and len(usages) == 1, usages
            shown = usages[0]
        else:
            shown = post(gateway, setup.plaintext, body).json()["usage"]
        sent = llama.requests[-1].json
        assert sent["stream"] is True and sent["stream_options"]["include_usage"] is True
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.prompt_tokens, record.completion_tokens) == (shown["prompt_tokens"], 6)
    assert shown["completion_tokens"] == 6 and shown["total_tokens"] == record.prompt_tokens + 6


def test_an_overloaded_anthropic_upstream_is_529_on_the_messages_surface(setup, upstream, gateway):
    import anthropic

    setup.channel.kind = "anthropic"
    setup.channel.save()
    upstream.behave(mode="status", status=529, error_type="overloaded_error")
    client = anthropic.Anthropic(base_url=gateway, api_key=setup.plaintext, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="qwen3-32b", max_tokens=5, messages=MESSAGES)
    assert raised.value.status_code == 529 and raised.value.body["error"]["type"] == "overloaded_error"
    assert raised.value.response.headers["x-request-id"] == raised.value.request_id  # `request-id`, as Anthropic's
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.http_status == 529  # what the client was answered


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_anthropic_sdk_sees_the_request_id_of_answers_and_errors(setup, upstream, gateway, kind):
    """Anthropic's SDKs read `request-id` (the id a user quotes from `_request_id` or an error),
    not OpenAI's `x-request-id`: both are sent on the Messages surface, native or translated."""
    import anthropic

    setup.channel.kind = kind
    setup.channel.save()
    client = anthropic.Anthropic(base_url=gateway, api_key=setup.plaintext, max_retries=0)
    message = client.messages.with_raw_response.create(model="qwen3-32b", max_tokens=5, messages=MESSAGES)
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert message.parse()._request_id == message.headers["x-request-id"] == record.request_id
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="no-such-model", max_tokens=5, messages=MESSAGES)
    assert raised.value.request_id and raised.value.request_id == raised.value.response.headers["x-request-id"]
