"""The gateway keeps its promises when an upstream misbehaves: stalls before its headers, trickles,
redirects, answers invalid JSON or 50 MB, rate limits with Retry-After, ignores max_tokens, or
stays silent for a long time mid-stream. Real uvicorn in front of fake upstreams on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import httpx
import openai
import orjson
import pytest

from channels.health import passive
from channels.models import Model
from keys.models import UsageRecord
from keys.services import issue_key
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, ThreadServer, add_channel, leave_once, retry_locked, wait_for

pytestmark = [pytest.mark.slow]

BODY = {"model": "qwen3-32b", "messages": [{"role": "user", "content": "abcd"}], "max_tokens": 5}


@pytest.fixture
def backup(setup):
    """A second channel for the same model, tried after the primary."""
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        add_channel(up, "backup", priority=-1, model=setup.model)
        yield up


@pytest.fixture
def gateway(transactional_db, settings):
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_HEADERS_TIMEOUT = 1.0
    settings.GATEWAY_TOTAL_TIMEOUT = 3.0
    settings.GATEWAY_MAX_RESPONSE_BYTES = 1024 * 1024
    server = ThreadServer().start()
    yield server.url
    server.stop()


def post(url: str, key: str, body=BODY, timeout: float = 30) -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
    )


def test_a_header_stall_fails_over_within_the_first_tokens_deadline(setup, upstream, backup, gateway, settings):
    """The primary stalls far past the call's 3 s total deadline: only the 1 s deadline of a
    stream's headers (the first token's, as llama.cpp sends them with it) can fail over in time
    for the backup to answer (waiting for the stall would end in a 504)."""
    settings.GATEWAY_FIRST_TOKEN_TIMEOUT = 1.0
    upstream.behave(mode="slow", delay=60)
    r = post(gateway, setup.plaintext)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
    assert (len(upstream.requests), len(backup.requests)) == (1, 1)


@pytest.mark.parametrize("mode", ["redirect", "invalid_json", "huge"])
def test_a_redirect_invalid_json_or_a_huge_answer_fails_over(setup, upstream, backup, gateway, mode):
    upstream.behave(mode=mode)
    r = post(gateway, setup.plaintext)
    assert r.status_code == 200, r.text
    assert len(backup.requests) == 1


@pytest.mark.parametrize(
    ("mode", "code"),
    [("redirect", "upstream_error"), ("invalid_json", "upstream_invalid_response"), ("huge", "upstream_too_large")],
)
def test_alone_they_are_clean_502s(setup, upstream, gateway, mode, code):
    upstream.behave(mode=mode)
    r = post(gateway, setup.plaintext)
    assert r.status_code == 502 and r.json()["error"]["code"] == code, r.text
    assert "127.0.0.1:9" not in r.text  # the redirect's target was never followed nor shown


def test_a_reset_connection_is_a_502_in_words_not_a_library_name(setup, upstream, backup, gateway):
    """Regression (probe): the answer named aiohttp's exception ("failed (ClientOSError)")."""
    upstream.behave(mode="reset")
    assert post(gateway, setup.plaintext).status_code == 200 and len(backup.requests) == 1  # failed over
    backup.behave(mode="reset")
    upstream.behave(mode="reset")
    r = post(gateway, setup.plaintext)
    assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_protocol", r.text
    message = r.json()["error"]["message"]
    assert message == "The upstream for this model broke the connection or its HTTP answer.", message


@pytest.mark.parametrize(("mode", "stream"), [("html_page", False), ("html_page", True), ("error_200", False)])
def test_a_200_that_is_not_the_answer_asked_for_fails_over(setup, upstream, backup, gateway, mode, stream):
    """A captive portal's page or an error object, each said with a 200, is a failed attempt (tried
    elsewhere, on the record), never relayed as the client's answer. (A Chat answer to a stream is
    one: tests/gateway_surfaces/test_ignored_stream.py.)"""
    upstream.behave(mode=mode)
    r = post(gateway, setup.plaintext, {**BODY, "stream": stream})  # (a stream read whole)
    if stream:
        assert r.headers["content-type"].startswith("text/event-stream") and "data: [DONE]" in r.text, r.text
    else:
        assert r.json()["choices"][0]["message"]["content"], r.text
    assert r.status_code == 200 and len(backup.requests) == 1
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.status == "ok" and "failover after" in " ".join(record.route_explanation)


@pytest.mark.parametrize("mode", ["html_page", "error_200"])
def test_alone_a_200_that_is_not_an_answer_is_a_clean_502(setup, upstream, gateway, mode):
    upstream.behave(mode=mode, error_message="boom")
    r = post(gateway, setup.plaintext)
    assert r.status_code == 502 and r.json()["error"]["type"], r.text
    assert "captive" not in r.text and "boom" not in r.text


@pytest.mark.parametrize("status", [400, 429, 500])
def test_an_upstream_error_that_echoes_the_channels_key_is_scrubbed(setup, upstream, gateway, status):
    """An upstream (or a proxy before it) whose error repeats the request's Authorization header:
    the team's key reaches neither the developer nor the usage record."""
    upstream.behave(mode="status", status=status, error_message=f"bad header: Bearer {UPSTREAM_KEY}")
    r = post(gateway, setup.plaintext)
    assert r.status_code == (502 if status == 500 else status), r.text
    assert UPSTREAM_KEY not in r.text and "[redacted by the gateway]" in r.text
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.error and UPSTREAM_KEY not in record.error


@pytest.mark.parametrize(("status", "code"), [(429, "upstream_rate_limited"), (500, "upstream_error")])
def test_when_every_route_fails_the_answer_is_the_upstream_that_answered(setup, upstream, gateway, status, code):
    """The primary answers 429 (with when to retry) or 500; the route tried after it cannot be
    reached. The client learns what the upstream said, not that the last channel was down."""
    from channels.models import Channel, ModelRoute

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        down = Channel.objects.create(
            name="down", kind="vllm", base_url=f"http://127.0.0.1:{closed.getsockname()[1]}/v1", priority=-1
        )
    ModelRoute.objects.create(model=setup.model, channel=down, upstream_model="fake-model", context_window=8192)
    upstream.behave(mode="status", status=status, retry_after="7", error_message="the model is warming up")
    r = post(gateway, setup.plaintext)
    assert (r.status_code, r.json()["error"]["code"]) == (429 if status == 429 else 502, code), r.text
    assert r.headers.get("retry-after") == ("7" if status == 429 else None)
    assert status == 429 or "warming up" in r.json()["error"]["message"]
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.route_explanation[-2].startswith("failover after connect from down")


@pytest.mark.parametrize("shape", ["nested", "flat", "string"])
@pytest.mark.parametrize(("status", "answered"), [(404, 404), (429, 429), (500, 502), (503, 502)])
def test_the_upstreams_words_reach_the_client_in_each_servers_error_shape(
    setup, upstream, gateway, shape, status, answered
):
    """SGLang (and vLLM before 0.10) write an error flat, `{"object": "error", "message": …}`, and
    Ollama as a string, `{"error": "…"}`: the developer reads what the server said either way
    (it was "no details" / "not found" for the flat shape)."""
    upstream.behave(mode="status", status=status, error_shape=shape, error_message="KV cache is full, try later")
    r = post(gateway, setup.plaintext)
    assert r.status_code == answered, r.text
    assert "KV cache is full, try later" in r.json()["error"]["message"], r.text
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert "KV cache is full" in record.error


def test_a_trickling_upstream_ends_at_the_total_deadline(setup, upstream, gateway):
    """The trickle never ends and never goes silent for the headers deadline: the answer can only
    come from the call's total deadline (3 s), never before it, however slow the machine."""
    upstream.behave(mode="trickle", trickle_delay=0.1)
    started = time.monotonic()
    r = post(gateway, setup.plaintext, timeout=120)
    took = time.monotonic() - started
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout", r.text
    assert "GATEWAY_TOTAL_TIMEOUT" in r.json()["error"]["message"], r.text
    assert took > 2.9  # the deadline runs from when the gateway took the call, after we sent it


@pytest.mark.parametrize("mode", ["split_done", "no_done"])
def test_a_complete_answer_goes_out_while_the_upstream_still_holds_its_stream_open(
    setup, upstream, gateway, settings, mode
):
    """The stream's last event arrived (its `[DONE]` in two writes, after no usage chunk; or the
    usage chunk after the finish with no `[DONE]` ever) but the upstream keeps the connection
    open: the non-streaming answer goes out, and the gateway closes the upstream's connection,
    while the upstream still holds it (no deadline of the gateway's could end the wait sooner
    than the hold)."""
    settings.GATEWAY_TOTAL_TIMEOUT = settings.GATEWAY_IDLE_TIMEOUT = 120.0
    upstream.behave(mode=mode, tokens=3, hold=30.0)
    r = post(gateway, setup.plaintext, body={**BODY, "max_tokens": 100}, timeout=90)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["choices"][0]["message"]["content"] == "tok0 tok1 tok2"
    assert answer["choices"][0]["finish_reason"] == "stop"
    if mode == "no_done":
        assert answer["usage"]["completion_tokens"] == 3
    assert wait_for(lambda: upstream.holds, timeout=60) == ["closed by the client"]


def test_an_assembled_answer_read_to_its_end_leaves_its_connection_to_the_next_call(setup, upstream, gateway):
    """A non-streaming answer is read from a stream; once that stream ended, its connection goes
    back to the pool as a relayed stream's does, though the body's end came after the answer's
    last event (a new connection per request costs more than the assembly)."""
    upstream.behave(end_pause=0.1)  # the [DONE] and the body's end in two writes, 0.1 s apart
    for _ in range(2):
        r = post(gateway, setup.plaintext)
        assert r.status_code == 200, r.text
        wait_for(lambda: upstream.open_streams == 0)  # the body ended
    assert upstream.requests[0].peer == upstream.requests[1].peer


def test_the_upstreams_retry_after_is_passed_through(setup, upstream, gateway):
    upstream.behave(mode="status", status=429, retry_after="7")
    r = post(gateway, setup.plaintext)
    assert r.status_code == 429 and r.headers["retry-after"] == "7"


def test_an_upstream_ignoring_max_tokens_cannot_overspend_a_quota(setup, upstream, gateway, alice):
    """60 tokens a day; each stream reserves 1 + 5. The upstream sends 40 tokens whatever it is
    asked: the gateway cuts each stream at max_tokens, so the quota holds at 10 streams."""
    upstream.behave(tokens=40, ignore_max_tokens=True)
    key, plain = issue_key(owner=alice, name="daily", tokens_per_day=60)
    statuses, contents = [], []
    for _ in range(14):
        with httpx.stream(
            "POST",
            gateway + "/v1/chat/completions",
            json={**BODY, "stream": True},
            headers={"Authorization": f"Bearer {plain}"},
            timeout=30,
        ) as r:
            text = r.read().decode()
            statuses.append(r.status_code)
            if r.status_code == 200:
                assert text.rstrip().endswith("data: [DONE]"), text[-300:]
                contents.append(text.count('"content":"') + text.count('"content": "') - 1)  # minus the role chunk
    # Each stream is charged ≈10 (the upstream's tokenizer counts the prompt with its template).
    assert statuses.count(200) >= 5 and statuses.count(429) >= 1
    assert max(contents) == 5  # exactly max_tokens, never 40
    wait_for(lambda: UsageRecord.objects.filter(key=key, status="ok").count() == statuses.count(200))
    spent = sum(r.total_tokens for r in UsageRecord.objects.filter(key=key))
    assert spent <= 60 + 6, spent  # within one request's slack of the quota (it was 170 before)


def test_a_long_upstream_silence_is_kept_alive_with_sse_comments(setup, upstream, gateway, monkeypatch):
    from gateway import relay

    monkeypatch.setattr(relay, "KEEPALIVE_SECONDS", 0.3)
    upstream.behave(tokens=3, token_delay=1.0)
    with httpx.stream(
        "POST",
        gateway + "/v1/chat/completions",
        json={**BODY, "stream": True},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=30,
    ) as r:
        text = r.read().decode()
    assert r.status_code == 200 and ": keep-alive" in text and text.rstrip().endswith("data: [DONE]")


def test_a_non_streaming_client_that_leaves_cancels_the_upstream_call(setup, upstream, gateway, settings):
    # The upstream is slow, not stalled, and no deadline of the gateway's ends the call for two
    # minutes: only the client's leaving can, so a record within the wait's 30 s is the leaving's.
    settings.GATEWAY_HEADERS_TIMEOUT = settings.GATEWAY_TOTAL_TIMEOUT = 120.0
    upstream.behave(mode="slow", delay=60.0)

    leave_once(gateway, setup.plaintext, BODY, lambda: upstream.requests)  # forwarded, however slowly
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first(), timeout=30)
    assert record.http_status == 499 and "client disconnected" in record.error


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_cut_by_the_gateways_shutdown_is_recorded_interrupted(
    setup, upstream, settings, caplog, upstream_reads, stream
):
    """In flight when the shutdown's grace ends: a stream ends with our error event, a request not
    answered yet gets our JSON 503 (not the server's plain-text 500); both are on the record as
    interrupted, and the server logs no exception for them. Both pay for what the upstream
    generated: an answer being assembled (the gateway asks for a stream even for a client that did
    not) was recorded with 0 tokens, though a paid upstream bills them."""
    import threading

    import uvicorn

    from portal.asgi import application
    from tests.services import free_port

    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            application, host="127.0.0.1", port=port, lifespan="on", log_level="warning", timeout_graceful_shutdown=1
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=20)
    logging.getLogger("uvicorn.error").addHandler(caplog.handler)  # (uvicorn's loggers do not propagate)
    upstream.behave(mode="stall", stall_after=4, tokens=50)  # its role and 3 tokens, then generating on
    got: list[bytes] = []

    answer: list[httpx.Response] = []

    def client() -> None:
        try:
            with httpx.stream(
                "POST",
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={**BODY, "max_tokens": 50, "stream": stream},
                headers={"Authorization": f"Bearer {setup.plaintext}"},
                timeout=30,
            ) as r:
                answer.append(r)
                for chunk in r.iter_bytes():
                    got.append(chunk)
        except httpx.HTTPError:
            pass

    reader = threading.Thread(target=client, daemon=True)
    reader.start()
    if stream:
        wait_for(lambda: b"tok2" in b"".join(got), timeout=10)
    else:  # the answer is being assembled from the upstream's stream
        wait_for(lambda: b"tok2" in b"".join(upstream_reads), timeout=10)
    server.should_exit = True  # shutdown mid-answer; in-flight requests get 1 s, then are cancelled
    thread.join(20)
    reader.join(20)
    record = UsageRecord.objects.get(key=setup.key)
    assert record.status == "interrupted" and "shutdown" in record.error and record.http_status == 503
    assert record.completion_tokens == 3 and record.prompt_tokens >= 1 and record.estimated
    assert record.channel_id == setup.channel.id
    text = b"".join(got).decode()
    if stream:
        assert "shutting down" in text and f"request {record.request_id}" in text, text[-300:]
    else:
        assert answer[0].status_code == 503 and answer[0].headers["x-request-id"] == record.request_id
        assert orjson.loads(text)["error"]["code"] == "shutdown"
    logging.getLogger("uvicorn.error").removeHandler(caplog.handler)
    assert not [r for r in caplog.records if "Exception in ASGI application" in r.getMessage()]


def _rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_four_50_mb_answers_at_once_leave_the_gateways_memory_bounded(setup, upstream, spawn_gateway):
    """Before the size cap one 50 MB answer took a gateway from 149 to 284 MB and four to 418 MB.
    With the cap (8 MiB here) the answers are refused as upstream_too_large and the process grows by
    at most the four capped buffers and change, whatever the machine's speed."""
    cap_mib = 8
    (server,) = spawn_gateway(1, GATEWAY_MAX_RESPONSE_BYTES=str(cap_mib * 1024 * 1024))
    for _ in range(3):  # warm: code paths, connection pools, caches
        assert post(server.url, setup.plaintext).status_code == 200
    before = _rss_mib(server.proc.pid)
    upstream.behave(mode="huge")

    async def four() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:
            headers = {"Authorization": f"Bearer {setup.plaintext}"}
            calls = [client.post(server.url + "/v1/chat/completions", json=BODY, headers=headers) for _ in range(4)]
            return await asyncio.gather(*calls)

    answers = asyncio.run(four())
    assert [r.json()["error"]["code"] for r in answers] == ["upstream_too_large"] * 4
    grown = _rss_mib(server.proc.pid) - before
    assert grown < 4 * cap_mib + 24, f"RSS grew by {grown:.1f} MiB"
    upstream.behave()
    assert post(server.url, setup.plaintext).status_code == 200


def test_a_model_servers_idle_connection_is_let_go_before_the_server_closes_it(setup, gateway_url):
    """llama-server, vLLM and SGLang close a connection idle for 5 s, and a request written on one
    as the server closes it is lost unread (aiohttp replays no POST): the client got a 502
    `upstream_protocol`, the channel a failure, its breaker opened. The gateway now lets a model
    server's idle connection go after 4 s, and keeps a cloud's (a new TLS connection costs tens of
    milliseconds). The fake closes a connection idle 4.2 s the moment a request arrives on it."""
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=setup.plaintext, max_retries=0)
    retry_locked(passive.collect)  # start from an empty health window
    with FakeUpstream(api_key=UPSTREAM_KEY, idle_close=4.2) as server, FakeUpstream(api_key=UPSTREAM_KEY) as cloud:
        vllm, _ = add_channel(server, "vllm", model=Model.objects.create(name="bge-m3"))
        add_channel(cloud, "cloud", model=Model.objects.create(name="text-embedding-3-small"), kind="openai")
        for model in ("bge-m3", "text-embedding-3-small"):
            client.embeddings.create(model=model, input="hello")
        time.sleep(4.5)  # idle longer than the gateway keeps a model server's connection
        for model in ("bge-m3", "text-embedding-3-small"):
            assert client.embeddings.create(model=model, input="hello").data  # was 502 for bge-m3

        assert server.closed_idle == 0
        assert len({r.peer for r in server.requests}) == 2  # a new connection after the wait
        assert len({r.peer for r in cloud.requests}) == 1  # the cloud's kept
    assert passive.collect()[vllm.id].fail_count == 0
