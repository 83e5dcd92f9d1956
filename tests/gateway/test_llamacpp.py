"""The gateway in front of a real llama.cpp server (xllamacpp on a tiny generated GGUF)."""

from __future__ import annotations

import re

import anthropic
import httpx
import openai
import pytest

from channels.health import passive
from channels.models import Channel, Model, ModelRoute
from keys.models import UsageRecord
from keys.services import issue_key
from tests.fakes.llamacpp import LlamaServer
from tests.gateway.conftest import leave_once, retry_locked, wait_for

LLAMA_KEY = "llama-upstream-key"
CTX = 256

# The tiny model has random weights and may emit EOS at once; llama.cpp's ignore_eos makes the
# number of generated tokens exactly max_tokens, so usage can be asserted to the token.
EXACT = {"ignore_eos": True}


@pytest.fixture(scope="module")
def llama():
    with LlamaServer(ctx=CTX, api_key=LLAMA_KEY) as server:
        yield server


def served(server: LlamaServer, channel: str, model: str, owner, key: str):
    """A channel for the server, a model routed to it with the window discovery records from the
    server's own metadata (/props n_ctx), and a key for `owner`: (key, plaintext)."""
    props = httpx.get(server.root_url + "/props", headers={"Authorization": f"Bearer {LLAMA_KEY}"}).json()
    ModelRoute.objects.create(
        model=Model.objects.create(name=model),
        channel=Channel.objects.create(
            name=channel, kind="llamacpp", base_url=server.base_url, api_key=LLAMA_KEY, status="healthy"
        ),
        upstream_model=server.model_id,
        discovered_context_window=props["default_generation_settings"]["n_ctx"],
    )
    return issue_key(owner=owner, name=key)


@pytest.fixture
def llama_key(transactional_db, llama, alice):
    return served(llama, "llama", "tiny-chat", alice, "llama")


@pytest.fixture
def client(llama_key, gateway_url):
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=llama_key[1], max_retries=0)


def test_real_usage_is_relayed_and_recorded_exactly(llama_key, client):
    reply = client.chat.completions.create(
        model="tiny-chat", messages=[{"role": "user", "content": "hello world"}], max_tokens=4, extra_body=EXACT
    )
    assert reply.usage.completion_tokens == 4 and reply.usage.prompt_tokens > 0
    record = wait_for(lambda: UsageRecord.objects.filter(key=llama_key[0]).first())
    assert (record.prompt_tokens, record.completion_tokens) == (reply.usage.prompt_tokens, 4)
    assert record.estimated is False


def test_real_stream_usage_chunk_is_recorded_and_hidden_unless_asked(llama_key, client):
    chunks = list(
        client.chat.completions.create(
            model="tiny-chat",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=3,
            extra_body=EXACT,
            stream=True,
        )
    )
    assert all(c.usage is None for c in chunks)
    record = wait_for(lambda: UsageRecord.objects.filter(key=llama_key[0], stream=True).first())
    assert record.completion_tokens == 3 and record.estimated is False

    asked = list(
        client.chat.completions.create(
            model="tiny-chat",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=3,
            extra_body=EXACT,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert asked[-1].usage is not None and asked[-1].usage.completion_tokens == 3


def test_a_prompt_beyond_the_discovered_window_is_refused_before_llamacpp(llama_key, client):
    """The gateway knows the server's n_ctx (discovered), so it answers the 400 itself, naming it."""
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "word " * (CTX * 2)}], max_tokens=4
        )
    err = caught.value.response.json()["error"]
    assert caught.value.status_code == 400 and err["code"] == "context_length_exceeded"
    assert f"its largest context window is {CTX} tokens" in err["message"]


def test_exceeding_an_unknown_window_is_a_clean_400_from_llamacpp(llama_key, client):
    """Where the gateway does not know the window, llama.cpp's refusal is OpenAI's error for it."""
    ModelRoute.objects.filter(model__name="tiny-chat").update(context_window=None, discovered_context_window=None)
    Model.objects.get(name="tiny-chat").save()  # reload the gateway's catalog
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "word " * (CTX * 2)}], max_tokens=4
        )
    body = caught.value.body
    assert caught.value.status_code == 400
    assert body["code"] == "context_length_exceeded" and "maximum context length is" in body["message"]


def test_models_show_the_servers_context_window(llama, client):
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny-chat"]
    assert models[0].model_dump()["max_model_len"] == CTX


def test_a_repeated_prompt_records_llamacpps_prompt_cache_hits(llama_key, gateway_url):
    messages = [{"role": "user", "content": "the same long prefix of an agent session " * 4}]
    body = {"model": "tiny-chat", "messages": messages, "max_tokens": 2, **EXACT}
    headers = {"Authorization": f"Bearer {llama_key[1]}"}
    answers = [httpx.post(gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=60).json()]
    answers.append(httpx.post(gateway_url + "/v1/chat/completions", json=body, headers=headers, timeout=60).json())
    second = answers[1]
    # llama.cpp says it in `timings.cache_n` (newer builds also in prompt_tokens_details).
    reported = second.get("timings", {}).get("cache_n") or second["usage"].get("prompt_tokens_details", {}).get(
        "cached_tokens"
    )
    assert reported and 0 < reported < second["usage"]["prompt_tokens"]
    records = wait_for(
        lambda: (
            (r := list(UsageRecord.objects.filter(key=llama_key[0]).order_by("created", "id"))) and len(r) == 2 and r
        )
    )
    assert records[1].cached_tokens == reported


@pytest.fixture(scope="module")
def llama512():
    with LlamaServer(ctx=512, api_key=LLAMA_KEY) as server:
        yield server


def test_a_newcomers_first_call_without_max_tokens_on_a_512_token_model_answers(
    transactional_db, llama512, alice, gateway_url
):
    """The openai SDK sends no max_tokens: the gateway reserves what the 512-token window leaves
    after the prompt (not GATEWAY_DEFAULT_MAX_TOKENS, which no route could hold) and answers 200."""
    key, plaintext = served(llama512, "llama512", "tiny-512", alice, "first")
    assert ModelRoute.objects.get(model__name="tiny-512").discovered_context_window == 512
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=plaintext, max_retries=0)
    reply = client.chat.completions.create(
        model="tiny-512", messages=[{"role": "user", "content": "Hello! What can you do?"}]
    )
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.completion_tokens > 0
    record = wait_for(lambda: UsageRecord.objects.filter(key=key).first())
    assert record.http_status == 200 and record.status == "ok"


def test_a_prompt_the_server_counts_past_its_window_is_the_error_clients_compact_on(llama_key, client, gateway_url):
    """The gateway's estimate (≈4 characters a token) let the prompt through; this model's tokenizer
    counts several times more, and llama.cpp refused it in its own words (`exceed_context_size_error`),
    which no coding client recognises: it got no chance to compact the conversation and try again."""
    text = "hello world " * 40  # ≈120 tokens by the gateway's estimate, more than the window by the server's
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": text}], max_tokens=4)
    error = caught.value.body
    assert error["code"] == "context_length_exceeded", error
    said = re.match(
        r"This model's maximum context length is (\d+) tokens; the prompt is (\d+) tokens",
        error["message"],
    )
    assert said and int(said[1]) <= CTX < int(said[2]), error["message"]

    messages = anthropic.Anthropic(base_url=gateway_url, api_key=llama_key[1], max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as caught:
        messages.messages.create(model="tiny-chat", max_tokens=4, messages=[{"role": "user", "content": text}])
    message = caught.value.body["error"]["message"]
    assert re.fullmatch(rf"prompt is too long: \d+ tokens > {said[1]} maximum", message), message


# A one-pixel PNG: llama.cpp without `--mmproj` refuses any image before reading it.
PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def test_what_the_server_was_not_started_for_is_a_400_that_spares_its_health(llama_key, client, gateway_url):
    """llama.cpp answers 501 to embeddings without `--embeddings` and 500 to an image without
    `--mmproj`: as a 5xx an SDK retried them (Claude Code for minutes) and the channel's health
    counted each as a failure of a server that is well. Now a 400 in the server's words."""
    route = ModelRoute.objects.get(channel__name="llama")
    route.context_window = 8192  # room for the gateway's estimate of an image (1,600 tokens)
    route.save()
    channel_id = route.channel_id
    retry_locked(passive.collect)  # start from an empty health window

    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="tiny-chat", input="hello")
    assert caught.value.body["code"] == "unsupported_by_upstream"
    assert "does not support embeddings. Start it with `--embeddings`" in caught.value.body["message"]

    image = [{"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": PNG}}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny-chat", messages=[{"role": "user", "content": image}], max_tokens=2)
    assert "image input is not supported" in caught.value.body["message"]

    claude = anthropic.Anthropic(base_url=gateway_url, api_key=llama_key[1], max_retries=0)
    source = {"type": "base64", "media_type": "image/png", "data": PNG.split(",", 1)[1]}
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model="tiny-chat",
            max_tokens=2,
            messages=[
                {"role": "user", "content": [{"type": "image", "source": source}, {"type": "text", "text": "?"}]}
            ],
        )
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "image input is not supported" in refused.value.body["error"]["message"]

    records = wait_for(lambda: (r := list(UsageRecord.objects.filter(key=llama_key[0]))) and len(r) == 3 and r)
    assert [(r.status, r.http_status) for r in records] == [("client_error", 400)] * 3
    assert channel_id not in passive.collect()  # nothing counted against the channel's health


def test_answers_name_the_model_asked_for_not_the_path_of_its_weights(llama_key, client, gateway_url):
    """llama-server started without an alias answers with the path of its weights on its host as the
    model: every developer saw it (and a model name other than the one they asked for, which the
    translated surfaces already answered with)."""
    with LlamaServer(ctx=CTX, api_key=LLAMA_KEY, alias=None) as bare:
        route = ModelRoute.objects.select_related("channel").get(channel__name="llama")
        route.channel.base_url = bare.base_url
        route.channel.save()
        route.upstream_model = bare.model_id
        route.save()
        direct = httpx.post(
            bare.base_url + "/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
            headers={"Authorization": f"Bearer {LLAMA_KEY}"},
        ).json()
        assert direct["model"].endswith(".gguf")  # what the server says of itself

        reply = client.chat.completions.create(
            model="tiny-chat", messages=[{"role": "user", "content": "hi"}], max_tokens=2, extra_body=EXACT
        )
        assert reply.model == "tiny-chat"
        chunks = list(
            client.chat.completions.create(
                model="tiny-chat",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=2,
                extra_body=EXACT,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        assert {c.model for c in chunks} == {"tiny-chat"} and chunks[-1].usage.completion_tokens == 2
        legacy = client.completions.create(model="tiny-chat", prompt="hi", max_tokens=2, extra_body=EXACT)
        assert legacy.model == "tiny-chat"
        with httpx.stream(
            "POST",
            gateway_url + "/v1/chat/completions",
            json={
                "model": "tiny-chat",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
                "stream": True,
            },
            headers={"Authorization": f"Bearer {llama_key[1]}"},
        ) as r:
            assert r.status_code == 200 and ".gguf" not in r.read().decode()


@pytest.fixture(scope="module")
def roomy_llama():
    with LlamaServer(ctx=4096, api_key=LLAMA_KEY) as server:  # the tiny model's whole window, one slot
        yield server


def the_slot(server: LlamaServer) -> dict:
    """The one slot as llama.cpp's `/slots` shows it: `n_prompt_tokens` counts what it holds, the
    prompt and every token generated so far (3,526 after a 27-token prompt and 3,500 tokens)."""
    answer = httpx.get(server.root_url + "/slots", headers={"Authorization": f"Bearer {LLAMA_KEY}"})
    return answer.json()[0]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_frees_the_servers_one_slot_at_once(
    transactional_db, roomy_llama, alice, gateway_url, stream
):
    """A developer stops their agent (Ctrl-C) mid-answer: on a one-slot server every colleague waits
    behind that slot, so the generation nobody reads must stop when the client leaves, not run to
    its max_tokens. The answer asked for is 3,900 tokens; llama.cpp stops only when a write finds
    its client gone, so it stops early only if the gateway closes its upstream call at once."""
    key, plaintext = served(roomy_llama, "roomy", "tiny-roomy", alice, "agent")
    asked = 3900
    body = {
        "model": "tiny-roomy",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": asked,
        "stream": stream,
    }
    wait_for(lambda: not the_slot(roomy_llama)["is_processing"], timeout=60)  # (the other case's answer)

    def generating() -> bool:
        slot = the_slot(roomy_llama)
        return slot["is_processing"] and slot["next_token"][0]["n_decoded"] > 0

    leave_once(gateway_url, plaintext, {**body, **EXACT}, generating)
    slot = wait_for(lambda: (s := the_slot(roomy_llama)) and not s["is_processing"] and s, timeout=60)
    assert slot["n_prompt_tokens"] < asked // 2, slot  # stopped, not run to the end (≈ 3,930 held then)
    record = wait_for(lambda: UsageRecord.objects.filter(key=key).first())
    assert record.http_status == 499 and "client disconnected" in record.error


@pytest.mark.parametrize("stream", [False, True])
def test_a_legacy_completion_of_several_prompts_answers_each_and_is_charged_for_all(llama, llama_key, client, stream):
    """For a legacy Completions request of several prompts llama.cpp streams each prompt's chunks,
    its finish carrying that prompt's usage, then `data: null`. The gateway (which asks for a
    stream) took the null for invalid JSON and answered 502 to a request the server served, and
    would have kept the last prompt's usage only (llama.cpp's own answer without a stream reports
    the first's). Now each prompt is answered and the request charged for all of them; a client
    that asked for usage gets the total once, on a chunk of its own at the end, as OpenAI sends it
    (it got each prompt's own on that prompt's finish)."""
    prompts = ["Once upon a time", "The quick brown fox"]
    extra = {**EXACT, "cache_prompt": False}  # counts the same whatever the server's cache holds
    each = [
        httpx.post(
            llama.base_url + "/completions",
            json={"prompt": prompt, "max_tokens": 3, **extra},
            headers={"Authorization": f"Bearer {LLAMA_KEY}"},
        ).json()["usage"]["prompt_tokens"]
        for prompt in prompts
    ]
    if stream:
        chunks = list(
            client.completions.create(
                model="tiny-chat",
                prompt=prompts,
                max_tokens=3,
                stream=True,
                stream_options={"include_usage": True},
                extra_body=extra,
            )
        )
        finishes = {
            c.choices[0].index: c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
        }
        usages = [c.usage for c in chunks if c.usage is not None]
        assert len(usages) == 1 and chunks[-1].usage is usages[0] and chunks[-1].choices == []
        assert (usages[0].prompt_tokens, usages[0].completion_tokens) == (sum(each), 6)
        raw = httpx.post(
            str(client.base_url) + "completions",
            json={"model": "tiny-chat", "prompt": prompts, "max_tokens": 3, "stream": True, **extra},
            headers={"Authorization": f"Bearer {llama_key[1]}"},
        ).text
        assert raw.count("[DONE]") == 1 and "data: null" not in raw  # what an SDK cannot parse
    else:
        answer = client.completions.create(model="tiny-chat", prompt=prompts, max_tokens=3, extra_body=extra)
        finishes = {c.index: c.finish_reason for c in answer.choices}
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (sum(each), 6)
    assert finishes == {0: "length", 1: "length"}

    records = wait_for(lambda: (r := list(UsageRecord.objects.filter(key=llama_key[0]))) and len(r) == 1 + stream and r)
    assert {(r.status, r.estimated, r.prompt_tokens, r.completion_tokens) for r in records} == {
        ("ok", False, sum(each), 6)
    }


@pytest.fixture(scope="module")
def two_slots():
    with LlamaServer(ctx=2 * CTX, parallel=2, api_key=LLAMA_KEY) as server:  # (n is at most its slots)
        yield server


@pytest.mark.parametrize("stream", [False, True])
def test_n_chat_choices_on_llamacpp_are_charged_for_every_choice(
    transactional_db, two_slots, alice, gateway_url, stream
):
    """llama.cpp runs each of n Chat choices as a task of its own, and ends each with a usage chunk
    of its own (the prompt, and that choice's output). The gateway kept the last, charging two
    choices of 3 tokens for 3; now it charges 6 and the prompt once, and a client that asked for
    usage gets the total once, at the end, as OpenAI sends it."""
    llama_key = served(two_slots, "llama", "tiny-chat", alice, "llama")
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=llama_key[1], max_retries=0)
    messages = [{"role": "user", "content": "hello world"}]
    extra = {**EXACT, "cache_prompt": False}
    prompt = httpx.post(
        two_slots.base_url + "/chat/completions",
        json={"messages": messages, "max_tokens": 3, **extra},
        headers={"Authorization": f"Bearer {LLAMA_KEY}"},
    ).json()["usage"]["prompt_tokens"]
    ask = {"model": "tiny-chat", "messages": messages, "n": 2, "max_tokens": 3, "extra_body": extra}
    if stream:
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        usages = [c.usage for c in chunks if c.usage is not None]
        assert len(usages) == 1 and chunks[-1].usage is usages[0] and chunks[-1].choices == []
        shown = usages[0]
    else:
        answer = client.chat.completions.create(**ask)
        assert sorted(c.index for c in answer.choices) == [0, 1]
        shown = answer.usage
    assert shown is not None and (shown.prompt_tokens, shown.completion_tokens) == (prompt, 6)
    record = wait_for(lambda: UsageRecord.objects.filter(key=llama_key[0]).first())
    assert (record.status, record.estimated, record.prompt_tokens, record.completion_tokens) == ("ok", False, prompt, 6)


@pytest.fixture(scope="module")
def embedder():
    """An embedding server (`--embeddings --pooling mean`): 512 tokens of window and of physical batch."""
    with LlamaServer(ctx=512, api_key=LLAMA_KEY, embeddings=True) as server:
        yield server


@pytest.fixture
def embed_key(transactional_db, embedder, alice):
    return served(embedder, "embedder", "tiny-embed", alice, "indexer")


def test_an_embedding_input_longer_than_the_servers_batch_is_a_400_that_spares_its_health(embed_key, gateway_url):
    """An embedding model reads each input in one batch, and llama.cpp answers 500 "input (N tokens)
    is too large to process. increase the physical batch size" to a longer one. That was a 502 the
    SDK sent three times, and a failure on the channel's health for each: one indexer with long
    chunks made the team's embedding server look down. Now a 400 on the input, in figures."""
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=embed_key[1], max_retries=0)
    channel_id = Channel.objects.get(name="embedder").id
    retry_locked(passive.collect)  # start from an empty health window

    answer = client.embeddings.create(model="tiny-embed", input=["hello world", "x"])
    assert len(answer.data) == 2 and answer.usage.prompt_tokens > 0

    # The tiny model's vocabulary spends ~8 tokens on "hello ": within the window by the gateway's
    # estimate (≈450 tokens), past the server's batch by its own count.
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="tiny-embed", input="hello " * 300)
    error = caught.value.body
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")
    assert re.fullmatch(
        r"The input is [\d,]+ tokens \(the model server's count\); the server reads at most 512 tokens per input "
        r"\(llama\.cpp's physical batch, --ubatch-size\)\. Shorten or split the input, or start the server with a "
        r"larger --ubatch-size \(and --batch-size\)\.",
        error["message"],
    ), error["message"]

    # Past the window by the gateway's own estimate: refused before the server, about the input too.
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="tiny-embed", input="hello " * 600)
    error = caught.value.body
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")
    assert error["message"].endswith("its largest context window is 512 tokens. Shorten or split the input.")

    records = wait_for(lambda: (r := list(UsageRecord.objects.filter(key=embed_key[0]))) and len(r) == 3 and r)
    assert sorted((r.status, r.http_status) for r in records) == [("client_error", 400)] * 2 + [("ok", 200)]
    health = passive.collect()[channel_id]  # the answer counted for the channel, the refusals not against it
    assert (health.ok_count, health.fail_count) == (1, 0)
    assert client.embeddings.create(model="tiny-embed", input="hello").data  # and it serves the next one
