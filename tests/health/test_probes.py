"""Probing real fake upstreams over TCP: what gets recorded, discovered and decided."""

import asyncio
import datetime as dt
import re
import time

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.html import escape

from channels.choices import ChannelStatus
from channels.health import services
from channels.health.probe import Target, probe_many
from channels.models import Channel, Model, ModelRoute, ProbeResult
from tests.fakes.llamacpp import LlamaServer
from tests.services import free_port

pytestmark = pytest.mark.django_db
CJK = re.compile(r"[\u4e00-\u9fff]")


def status(ch: Channel) -> str:
    ch.refresh_from_db()
    return ch.status


def test_a_healthy_vllm_channel_becomes_healthy_with_timings_and_sends_its_key(upstream, make_channel):
    up = upstream(max_model_len=32768, api_key="sk-upstream")
    up.behave(tokens=3)
    ch = make_channel("vllm-a", up.base_url, api_key="sk-upstream", probe_max_tokens=3)

    [done] = services.run_round()

    assert done.new_status == ChannelStatus.HEALTHY and status(ch) == ChannelStatus.HEALTHY
    probe = ProbeResult.objects.get(channel=ch)
    assert probe.ok and probe.http_status == 200 and probe.model == "fake-model"
    assert probe.ttft_ms is not None and probe.ttfb_ms is not None and probe.total_ms >= probe.ttft_ms
    assert probe.connect_ms is not None and probe.tokens == 3
    paths = [r.path for r in up.requests]
    assert paths == ["/health", "/v1/models", "/v1/chat/completions"]
    assert all(r.headers.get("Authorization") == "Bearer sk-upstream" for r in up.requests[1:])
    chat = up.requests[-1].json
    assert chat["stream"] is True and chat["max_tokens"] == 3
    route = ModelRoute.objects.get(channel=ch)
    assert route.discovered_context_window == 32768 and route.discovered_at is not None
    assert route.context_mismatch  # configured 4096 vs discovered 32768


def test_an_sglang_channel_is_probed_at_health_and_its_window_discovered(upstream, make_channel):
    up = upstream(max_model_len=65536)
    ch = make_channel("sglang-a", up.base_url, kind="sglang")

    services.run_round()

    assert [r.path for r in up.requests][:2] == ["/health", "/v1/models"]
    assert ModelRoute.objects.get(channel=ch).discovered_context_window == 65536
    assert status(ch) == ChannelStatus.HEALTHY


def test_llamacpp_context_comes_from_props(upstream, make_channel):
    up = upstream(flavour="llamacpp", max_model_len=16384)
    ch = make_channel("llama", up.base_url, kind="llamacpp")

    services.run_round()

    assert [r.path for r in up.requests][:3] == ["/health", "/v1/models", "/props"]
    assert ModelRoute.objects.get(channel=ch).discovered_context_window == 16384
    assert status(ch) == ChannelStatus.HEALTHY


def test_a_llama_server_without_an_alias_gives_its_window_to_a_route_named_otherwise(make_channel):
    """`llama-server -m model.gguf` lists the file's path and answers any model name with its one
    model: the route an admin named `tiny` is served with that window (512 a slot here)."""
    with LlamaServer(ctx=1024, parallel=2, alias=None) as server:
        assert server.model_id.endswith(".gguf")
        ch = make_channel("llama", server.base_url, kind="llamacpp", model="tiny")

        services.run_round()

        route = ModelRoute.objects.get(channel=ch)
        assert route.discovered_context_window == 512 and route.effective_context_window == 512
        probe = ProbeResult.objects.get(channel=ch)
        assert probe.ok
        assert not route.upstream_unlisted


def test_a_route_a_vllm_server_does_not_list_is_flagged_on_its_pages_and_in_the_api(
    upstream, make_channel, admin_client
):
    """vLLM answers only the names it lists (404 otherwise): a route asking for another name gets
    no window from it and is flagged where the admin looks, until the id is corrected."""
    up = upstream(max_model_len=32768)
    ch = make_channel("vllm-typo", up.base_url, model="fake-modell")

    services.run_round()

    route = ModelRoute.objects.get(channel=ch)
    assert route.discovered_context_window is None
    assert route.unlisted_upstream_id == "fake-modell" and route.upstream_unlisted
    for page in (reverse("channel_detail", args=[ch.pk]), reverse("model_detail", args=[route.model_id])):
        html = admin_client.get(page).content.decode()
        assert "not served" in html and "does not list <code>fake-modell</code>" in html, page
        assert reverse("channel_served_models", args=[ch.pk]) in html
    assert "not served" in admin_client.get(reverse("channel-health", args=[ch.pk])).content.decode()
    [api_route] = admin_client.get(f"/api/models/{route.model_id}/").json()["routes"]
    assert api_route["upstream_unlisted"] is True
    dashboard = admin_client.get(reverse("dashboard")).content.decode()
    assert "public-fake-modell → vllm-typo" in dashboard and "does not list fake-modell" in dashboard

    ModelRoute.objects.filter(pk=route.pk).update(upstream_model="fake-model")  # the admin fixes the typo
    route.refresh_from_db()
    assert not route.upstream_unlisted  # at once, before the next check
    assert "not served" not in admin_client.get(reverse("channel_detail", args=[ch.pk])).content.decode()
    assert "does not list fake-modell" not in admin_client.get(reverse("dashboard")).content.decode()
    services.run_round()
    route.refresh_from_db()
    assert route.unlisted_upstream_id == "" and route.discovered_context_window == 32768


def test_a_mistyped_route_does_not_put_its_channel_down(upstream, make_channel):
    """The latency probe asked for the channel's first route: a typo there (vLLM: 404) made the
    whole channel look down although its other models answered. It asks for a served one."""
    up = upstream(strict_models=True)
    ch = make_channel("vllm-two", up.base_url)
    typo = Model.objects.create(name="a-typo")  # sorts first: the route the probe used to ask for
    ModelRoute.objects.create(model=typo, channel=ch, upstream_model="fake-modell")

    for _round in range(2):  # the first discovers the typo; the next starts from the served route
        services.run_round()
        assert status(ch) == ChannelStatus.HEALTHY
        assert ProbeResult.objects.filter(channel=ch).latest("id").model == "fake-model"
    assert ModelRoute.objects.get(model=typo).upstream_unlisted
    assert not any(r.json.get("model") == "fake-modell" for r in up.requests if r.path == "/v1/chat/completions")


def test_sglang_answers_any_name_so_its_one_models_window_serves_every_route(upstream, make_channel):
    """SGLang's OpenAI routes do not check the model name (sgl-project/sglang#7035, #31404)."""
    up = upstream(max_model_len=65536)
    ch = make_channel("sglang-b", up.base_url, kind="sglang", model="named-otherwise")

    services.run_round()

    route = ModelRoute.objects.get(channel=ch)
    assert route.discovered_context_window == 65536 and not route.upstream_unlisted


def test_a_cloud_providers_list_flags_no_route(upstream, make_channel):
    """A cloud provider accepts names its list leaves out (Anthropic's aliases of dated ids)."""
    up = upstream(max_model_len=32768)
    ch = make_channel("cloud", up.base_url, kind="openai", model="not-in-the-list")

    services.run_round()

    assert "/v1/models" in [r.path for r in up.requests]  # its list was read
    assert not ModelRoute.objects.get(channel=ch).upstream_unlisted
    assert ProbeResult.objects.get(channel=ch).model == "not-in-the-list"  # never another of its models


def test_an_openai_channel_is_checked_through_v1_models(upstream, make_channel):
    up = upstream()
    ch = make_channel("cloud", up.base_url, kind="openai", probe_inference=False)

    services.run_round()

    assert [r.path for r in up.requests] == ["/v1/models"]  # no paid completion when inference is off
    probe = ProbeResult.objects.get(channel=ch)
    assert probe.ok and probe.ttft_ms is None
    assert status(ch) == ChannelStatus.HEALTHY


def test_connection_refused_goes_down_only_after_three_failures(make_channel):
    ch = make_channel("gone", f"http://127.0.0.1:{free_port()}/v1")
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY)

    services.run_round()
    assert status(ch) == ChannelStatus.DEGRADED
    services.run_round()
    assert status(ch) == ChannelStatus.DEGRADED
    services.run_round()
    assert status(ch) == ChannelStatus.DOWN
    assert "3 checks in a row failed" in ch.status_message and "cannot connect" in ch.status_message
    assert set(ProbeResult.objects.filter(channel=ch).values_list("error", flat=True)) == {"connect"}


def test_a_down_channel_needs_two_successes_to_be_healthy_again(upstream, make_channel):
    up = upstream()
    ch = make_channel("back", up.base_url)
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.DOWN, consecutive_failures=5)

    services.run_round()
    assert status(ch) == ChannelStatus.DOWN and "1 of 2" in ch.status_message
    services.run_round()
    assert status(ch) == ChannelStatus.HEALTHY


def test_401_marks_credentials_rejected_and_rounds_leave_it_alone_until_the_key_is_edited(upstream, make_channel):
    up = upstream(api_key="right")
    ch = make_channel("badkey", up.base_url, api_key="wrong")

    services.run_round()
    assert status(ch) == ChannelStatus.CREDENTIALS_REJECTED
    assert "API key" in ch.status_message
    assert ProbeResult.objects.get(channel=ch).error == "auth"

    before = len(up.requests)
    services.run_round()
    assert len(up.requests) == before  # not hammered with a bad key

    ch.api_key = "right"
    ch.save()
    assert status(ch) == ChannelStatus.UNKNOWN
    services.run_round()
    assert status(ch) == ChannelStatus.HEALTHY


def test_check_now_clears_credentials_rejected_when_the_key_works_again(upstream, make_channel):
    up = upstream()
    ch = make_channel("fixed-upstream", up.base_url, api_key="k")
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.CREDENTIALS_REJECTED)

    done = services.check_channel(ch.pk)

    assert done.result.ok and status(ch) == ChannelStatus.HEALTHY


def test_500_from_the_completion_is_an_http_5xx_failure(upstream, make_channel):
    up = upstream()
    up.enqueue(mode="ok").enqueue(mode="ok").enqueue(mode="status", status=500, error_message="CUDA OOM")
    ch = make_channel("oom", up.base_url)

    services.run_round()

    probe = ProbeResult.objects.get(channel=ch)
    assert not probe.ok and probe.error == "http_5xx" and probe.http_status == 500
    assert "CUDA OOM" in probe.error_message
    assert status(ch) == ChannelStatus.UNKNOWN  # one failure on a new channel proves nothing yet


@pytest.mark.parametrize("refused", [400, 501])  # vLLM before and after it raised NotImplementedError
def test_an_embedding_model_that_refuses_a_chat_is_healthy_on_an_embedding(
    upstream, make_channel, refused, admin_client
):
    """vLLM serving an embedding model answers a chat "The model does not support Chat Completions
    API": the probe counted that as the channel's failure, so a server answering every embedding
    asked of it went down, its alerts sent. Now the probe times an embedding instead."""
    up = upstream(models=["bge-m3"])
    cannot = {"mode": "status", "status": refused, "error_message": "The model does not support Chat Completions API"}
    up.enqueue(mode="ok").enqueue(mode="ok").enqueue(**cannot).enqueue(mode="ok")  # health, models, chat, embedding
    ch = make_channel("embedder", up.base_url)

    [done] = services.run_round()

    assert done.new_status == ChannelStatus.HEALTHY and status(ch) == ChannelStatus.HEALTHY
    assert [r.path for r in up.requests] == ["/health", "/v1/models", "/v1/chat/completions", "/v1/embeddings"]
    assert up.requests[-1].json == {"model": "bge-m3", "input": "Reply with the single word: ok"}
    probe = ProbeResult.objects.get(channel=ch)
    assert probe.ok and probe.http_status == 200 and probe.total_ms is not None and probe.ttft_ms is None
    assert "an embedding model" in str(probe.error_message)
    html = admin_client.get(reverse("channel-health", args=[ch.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    note = zh("%(step)s: an embedding model, timed on an embedding", step=zh("latency probe"))
    assert CJK.search(note) and escape(note) in html  # the admin reads why, in their language


def test_a_model_marked_as_an_embedding_model_is_probed_on_an_embedding_without_a_chat(upstream, make_channel):
    """A server that answers a chat for an embedding model with words the probe does not know (TEI,
    Infinity, a proxy's own 400) stays healthy when the admin says what the model is."""
    up = upstream(models=["bge-m3"])
    up.enqueue(mode="ok").enqueue(mode="ok").enqueue(mode="ok")  # health, models, embedding
    ch = make_channel("embedder", up.base_url, model="bge-m3")
    Model.objects.filter(name="public-bge-m3").update(kind="embedding")

    [done] = services.run_round()

    assert done.new_status == ChannelStatus.HEALTHY
    assert [r.path for r in up.requests] == ["/health", "/v1/models", "/v1/embeddings"]
    probe = ProbeResult.objects.get(channel=ch)
    assert probe.ok and probe.ttft_ms is None and "an embedding model" in str(probe.error_message)


@pytest.mark.parametrize(
    ("said", "asked_to_embed"),
    [
        ("max_tokens must be at least 8", False),  # a chat model's own refusal: no embedding asked
        ("The model does not support Chat Completions API", True),  # and it embeds nothing either
    ],
)
def test_any_other_refusal_of_the_chat_is_the_channels_failure(upstream, make_channel, said, asked_to_embed):
    up = upstream()
    cannot = {"mode": "status", "status": 400, "error_message": said}
    up.enqueue(mode="ok").enqueue(mode="ok").enqueue(**cannot).enqueue(mode="status", status=404)
    ch = make_channel("picky", up.base_url)

    services.run_round()

    assert ("/v1/embeddings" in [r.path for r in up.requests]) is asked_to_embed
    probe = ProbeResult.objects.get(channel=ch)
    assert not probe.ok and probe.error == "http_4xx" and probe.http_status == 400
    assert said in str(probe.error_message)


def test_a_stream_stalling_after_the_first_chunk_is_recorded_as_stalled(upstream, make_channel):
    up = upstream()
    up.behave(mode="stall", stall_after=1)
    ch = make_channel("stall", up.base_url)

    started = time.monotonic()
    services.run_round()

    assert time.monotonic() - started < 5
    probe = ProbeResult.objects.get(channel=ch)
    assert not probe.ok and probe.error == "stalled" and probe.ttfb_ms is not None


def test_a_slow_first_token_degrades_the_channel(upstream, make_channel, settings):
    # Far apart on both sides of the threshold, so a busy machine cannot push a fast answer over it
    # and the slow one never hits the probe timeout.
    settings.PORTAL_PROBE_TIMEOUT = 10.0
    up = upstream()
    up.behave(mode="slow", delay=1.5)
    ch = make_channel("slow", up.base_url, ttft_degraded_ms=1000)
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY)

    services.run_round()

    assert status(ch) == ChannelStatus.DEGRADED
    assert "time to first token" in ch.status_message and ch.last_ttft_ms >= 300
    up.behave(mode="ok")
    services.run_round()
    assert status(ch) == ChannelStatus.DEGRADED  # one fast answer is not enough
    services.run_round()
    assert status(ch) == ChannelStatus.HEALTHY


def test_a_llamacpp_server_whose_every_slot_is_generating_stays_healthy(upstream, make_channel, settings, admin_client):
    """llama.cpp sends a stream's headers with its first token: while every slot generates, the
    latency probe would wait for one without a byte and time out on a server that is only busy
    (one slot and a long answer: down after three rounds, and its alerts sent). Its `/slots` says
    so, and the probe is not sent; with a slot free it is sent as before."""
    settings.PORTAL_PROBE_TIMEOUT = 1.0
    up = upstream(flavour="llamacpp")
    up.behave(mode="slow", delay=60, slots_busy=True)  # a chat would wait a minute for a slot
    ch = make_channel("busy-llama", up.base_url, kind="llamacpp")
    Channel.objects.filter(pk=ch.pk).update(status=ChannelStatus.HEALTHY)

    for _ in range(3):
        services.run_round()

    assert status(ch) == ChannelStatus.HEALTHY
    probe = ProbeResult.objects.filter(channel=ch, source="active").first()
    assert probe.ok and probe.ttft_ms is None and probe.model == "fake-model"
    assert probe.error_message == "latency probe: not sent, every slot of the server is generating"
    assert "/v1/chat/completions" not in [r.path for r in up.requests]
    with translation.override("zh-hans"):
        assert CJK.search(ProbeResult.objects.get(pk=probe.pk).error_message_text)
    page = admin_client.get(reverse("channel-health", args=[ch.pk])).content.decode()
    assert "not sent, every slot of the server is generating" in page  # under "ok" in the check log

    up.behave(slots_busy=False)  # a slot is free: the latency probe is sent as before
    services.run_round()
    probe = ProbeResult.objects.filter(channel=ch, source="active").first()
    assert probe.ok and probe.ttft_ms is not None and probe.error_message == ""
    assert [r.path for r in up.requests][-2:] == ["/slots", "/v1/chat/completions"]


def test_a_flapping_channel_ends_down_by_error_ratio(upstream, make_channel):
    up = upstream()
    ch = make_channel("flappy", up.base_url)
    seen = []
    with override_settings(PORTAL_HEALTH_DOWN_MIN_SAMPLES=6):
        for i in range(8):
            up.behave(mode="ok" if i % 2 == 0 else "status", status=502)
            services.run_round()
            seen.append(status(ch))
    assert ChannelStatus.DOWN in seen
    assert seen[-1] == ChannelStatus.DOWN  # never two successes in a row, so it stays down
    assert "failed" in ch.status_message


def test_disabled_channels_are_not_probed(upstream, make_channel):
    up = upstream()
    make_channel("off", up.base_url, enabled=False)

    assert services.run_round() == []
    assert up.requests == []


async def test_probes_run_concurrently_not_one_after_another(upstream):
    """Every upstream holds its probe for a minute: only probes sent together are all in within the
    half minute we wait (one after another, the second would not have been sent yet)."""
    ups = [upstream() for _ in range(10)]
    for up in ups:
        up.behave(mode="slow", delay=60)
    targets = [Target(i, "openai", up.base_url, model="fake-model") for i, up in enumerate(ups)]

    probes = asyncio.create_task(probe_many(targets, concurrency=20, timeout=120))
    deadline = time.monotonic() + 30
    while not all(up.requests for up in ups):
        assert time.monotonic() < deadline and not probes.done(), [len(up.requests) for up in ups]
        await asyncio.sleep(0.05)
    probes.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probes


async def test_the_semaphore_bounds_probes_in_flight(upstream):
    up = upstream()
    up.behave(mode="slow", delay=0.2)
    targets = [Target(i, "openai", up.base_url, model="fake-model", inference=True) for i in range(6)]

    started = time.monotonic()
    await probe_many(targets, concurrency=2, timeout=5)

    assert time.monotonic() - started >= 0.55  # 3 waves of 2 x 0.2 s


def test_a_status_change_bumps_the_gateway_route_generation(upstream, make_channel, django_capture_on_commit_callbacks):
    import redis

    from gateway.cache import generation_keys
    from tests.services import require_redis

    url = require_redis()
    up = upstream()
    make_channel("gen", up.base_url)
    client = redis.Redis.from_url(url)
    _, gen_routes = generation_keys()
    with override_settings(REDIS_URL=url):
        before = client.get(gen_routes)
        with django_capture_on_commit_callbacks(execute=True):
            services.run_round()  # unknown → healthy, and the context window was discovered
        after = client.get(gen_routes)
    assert after is not None and after != before


def test_limits_are_rediscovered_hourly_not_every_round(upstream, make_channel):
    up = upstream(max_model_len=16384)
    ch = make_channel("steady", up.base_url)
    services.run_round()
    up.requests.clear()

    services.run_round()  # healthy, limits fresh: liveness and latency only
    assert [r.path for r in up.requests] == ["/health", "/v1/chat/completions"]

    ModelRoute.objects.filter(channel=ch).update(discovered_at=timezone.now() - dt.timedelta(hours=2))
    up.requests.clear()
    services.run_round()
    assert "/v1/models" in [r.path for r in up.requests]

    up.requests.clear()
    services.check_channel(ch.pk)  # an admin's Check now always looks
    assert "/v1/models" in [r.path for r in up.requests]


def test_a_channel_deleted_during_the_round_does_not_break_it(upstream, make_channel):
    from channels.health.services import _insert_for_live_channels

    up = upstream()
    keep, gone = make_channel("keep", up.base_url), make_channel("gone-mid-round", up.base_url)
    rows = [ProbeResult(channel=c, created=timezone.now(), ok=True) for c in (keep, gone)]
    Channel.objects.filter(pk=gone.pk).delete()

    _insert_for_live_channels(rows, [])

    assert list(ProbeResult.objects.values_list("channel_id", flat=True)) == [keep.pk]


def test_tokens_per_second_is_measured_over_tokens_that_arrived_apart(upstream, make_channel):
    """A rate from chunks delivered together divided by microseconds (a 10,034 tokens/s outlier
    in the probe log); one is only reported over at least three chunks spread in time."""
    up = upstream()
    up.behave(tokens=1)
    one = make_channel("one-token", up.base_url, probe_max_tokens=4)
    services.run_round([one.pk])
    probe = ProbeResult.objects.get(channel=one)
    assert probe.ok and probe.tokens == 1 and probe.tokens_per_s is None

    up.behave(tokens=4, token_delay=0.05)
    spaced = make_channel("spaced", up.base_url, model="fake-model", probe_max_tokens=4)
    services.run_round([spaced.pk])
    probe = ProbeResult.objects.get(channel=spaced)
    # 3 tokens after the first, 50 ms apart: about 20 tokens/s (less on a loaded machine); the bound
    # is far from both that and the thousands a batched stream would give.
    assert probe.ok and probe.tokens_per_s is not None and 0 < probe.tokens_per_s < 100


def zh(msgid: str, **params) -> str:
    with translation.override("zh-hans"):
        return translation.gettext(msgid) % params if params else translation.gettext(msgid)


def test_the_probes_own_error_is_a_msgid_and_the_upstreams_words_stay_as_sent(upstream, make_channel, admin_client):
    """Our sentence ("cannot connect: …", "liveness: HTTP 500 (…)") is stored as a msgid with its
    values and read in the reader's language, inside the channel's status message too; what the
    network library or the upstream said is a value, shown as it is."""
    gone = make_channel("gone", f"http://127.0.0.1:{free_port()}/v1")
    Channel.objects.filter(pk=gone.pk).update(status=ChannelStatus.HEALTHY)
    for _ in range(3):
        services.run_round([gone.pk])

    probe = ProbeResult.objects.filter(channel=gone).first()
    assert probe.error_message_code == "cannot connect: %(reason)s"
    reason = probe.error_message_params["reason"]
    assert probe.error_message == f"cannot connect: {reason}"  # English, as before
    gone.refresh_from_db()
    assert gone.status == ChannelStatus.DOWN and probe.error_message in gone.status_message
    last_error = gone.status_message_params["why"]["params"]["error"]
    assert last_error == {"code": "cannot connect: %(reason)s", "params": {"reason": reason}}

    html = admin_client.get(reverse("channel-health", args=[gone.pk]), HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    ours = zh("cannot connect: %(reason)s", reason=reason)
    assert escape(ours) in html  # the probe log
    why = zh("%(why)s; last error: %(error)s", why=zh("%(count)s checks in a row failed", count=3), error=ours)
    assert escape(why) in html  # inside the status message
    assert CJK.search(why)

    up = upstream()
    up.behave(mode="status", status=500, error_message="CUDA OOM")
    oom = make_channel("oom", up.base_url)
    services.run_round([oom.pk])
    probe = ProbeResult.objects.get(channel=oom)
    assert (probe.error_message_code, probe.error_message_params) == (
        "%(step)s: HTTP %(status)s (%(detail)s)",
        {"step": {"code": "liveness", "params": {}}, "status": 500, "detail": "CUDA OOM"},
    )
    assert probe.error_message == "liveness: HTTP 500 (CUDA OOM)"
    [row] = admin_client.get(f"/api/health/channels/{oom.pk}/probes/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()["results"]
    step = zh("liveness")
    assert row["error_message"] == zh(
        "%(step)s: HTTP %(status)s (%(detail)s)", step=step, status=500, detail="CUDA OOM"
    )
    assert "CUDA OOM" in row["error_message"] and step in row["error_message"]  # the upstream's words, as sent
    assert (row["error_message_code"], row["error_message_params"]) == (
        probe.error_message_code,
        probe.error_message_params,
    )


def test_a_stored_key_no_header_can_carry_puts_its_channel_down_and_the_round_checks_the_others(upstream, make_channel):
    """A key stored before such keys were refused (`ключ`) cannot go into a header; the round used
    to end in a UnicodeEncodeError, so no channel's health was updated any more."""
    up = upstream()
    fine = make_channel("fine", up.base_url)
    cyrillic = make_channel("cyrillic", up.base_url, kind="openai")
    Channel.objects.filter(pk=cyrillic.pk).update(api_key="ключ-секрет")

    services.run_round()

    assert status(fine) == ChannelStatus.HEALTHY
    assert status(cyrillic) == ChannelStatus.DOWN  # no retry can help: down at once, not after three rounds
    assert "cannot be sent in an HTTP header" in cyrillic.status_message
    assert ProbeResult.objects.get(channel=cyrillic).error == "config"
    assert all(r.headers.get("Authorization") is None for r in up.requests)  # nothing half-sent

    cyrillic.api_key = "sk-ascii"
    cyrillic.save()  # the edit resets the verdict
    assert status(cyrillic) == ChannelStatus.UNKNOWN


def test_an_unexpected_error_probing_one_channel_is_that_channels_failure_not_the_rounds(upstream, make_channel):
    up = upstream()
    fine = make_channel("fine", up.base_url)
    # An address httpx cannot parse (stored before base URLs were checked): httpx.InvalidURL is
    # no HTTPError, so nothing caught it.
    broken = make_channel("broken", "http://[::1/v1", kind="openai")

    services.run_round()

    assert status(fine) == ChannelStatus.HEALTHY
    probe = ProbeResult.objects.get(channel=broken)
    assert not probe.ok and probe.error == "internal" and "InvalidURL" in probe.error_message
    broken.refresh_from_db()
    assert broken.last_checked is not None and "InvalidURL" in broken.status_message


def test_probe_many_answers_for_every_target_when_one_raises(upstream):
    up = upstream()
    targets = [
        Target(1, "openai", "http://[::1/v1", inference=False),  # httpx.InvalidURL, no HTTPError
        Target(2, "openai", up.base_url, inference=False),
    ]
    outcomes = asyncio.run(probe_many(targets, connect_timeout=1, timeout=1))
    assert [(o.channel_id, o.ok, o.error) for o in outcomes] == [(1, False, "internal"), (2, True, "")]
