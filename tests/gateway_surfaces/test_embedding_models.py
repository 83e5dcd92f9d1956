"""A model marked as an embedding model (channels.choices.ModelKind): the gateway serves it on
/v1/embeddings and refuses a conversation with it before any upstream sees one."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from channels.models import Model
from keys.models import UsageRecord
from tests.gateway.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def embedder(setup):
    setup.model.kind = "embedding"
    setup.model.save()  # through the model, so the gateway's catalog hears of it
    return setup


def test_a_conversation_with_an_embedding_model_is_a_400_naming_it_and_no_upstream_sees_it(
    embedder, upstream, gateway_url
):
    client = openai.OpenAI(base_url=gateway_url + "/v1", api_key=embedder.plaintext, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="qwen3-32b", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "model_not_supported" and refused.value.param == "model"
    assert "'qwen3-32b' is an embedding model: it answers /v1/embeddings only" in refused.value.message
    messages = anthropic.Anthropic(base_url=gateway_url, api_key=embedder.plaintext, max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as too:
        messages.messages.create(model="qwen3-32b", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert too.value.body["error"]["type"] == "invalid_request_error"
    assert "is an embedding model" in too.value.body["error"]["message"]
    assert not [r for r in upstream.requests if r.path.endswith(("/chat/completions", "/messages"))]
    records = wait_for(lambda: (r := list(UsageRecord.objects.order_by("id"))) and len(r) >= 2 and r)
    assert {(r.http_status, r.model) for r in records} == {(400, "qwen3-32b")}

    done = client.embeddings.create(model="qwen3-32b", input="hello")
    assert done.data and done.data[0].embedding


def test_the_model_lists_say_what_a_model_is_and_anthropics_leaves_an_embedding_model_out(embedder, gateway_url):
    auth = {"Authorization": f"Bearer {embedder.plaintext}"}
    [listed] = httpx.get(gateway_url + "/v1/models", headers=auth).json()["data"]
    assert (listed["id"], listed["kind"]) == ("qwen3-32b", "embedding")
    anthropic_list = httpx.get(gateway_url + "/v1/models", headers={**auth, "anthropic-version": "2023-06-01"}).json()
    assert anthropic_list["data"] == []  # Claude Code's model picker offers no embedding model
    Model.objects.create(name="chatty").routes.create(channel=embedder.channel, upstream_model="fake-model")
    anthropic_list = wait_for(
        lambda: (
            (d := httpx.get(gateway_url + "/v1/models", headers={**auth, "anthropic-version": "2023-06-01"}).json())[
                "data"
            ]
            and d
        )
    )
    assert [m["id"] for m in anthropic_list["data"]] == ["chatty"]
