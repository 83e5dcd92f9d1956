"""Request logs through the real gateway: off by default, on per key or per user, bodies redacted
by the payload writer's thread (never the event loop) and stored compressed."""

from __future__ import annotations

import datetime as dt
import threading
import zlib

import httpx
import orjson
import pytest

from gateway.state import process
from keys.models import PayloadLogging, RequestPayload, UsageRecord
from keys.payloads.redact import Redactor
from tests.gateway.conftest import wait_for

OPENAI_KEY = "sk-proj-" + "Ab3dEf6hIj" * 2 + "T3BlbkFJ" + "Qr5tUv8xYz" * 2
AWS_ACCESS = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw"
PEM = "\n".join(
    [
        "-----BEGIN RSA PRIVATE KEY-----",
        PEM_BODY,
        "7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs",
        "-----END RSA PRIVATE KEY-----",
    ]
)
GITHUB = "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"
PROMPT = (
    "Why does my deploy fail? Here is my env:\n"
    f"OPENAI_API_KEY={OPENAI_KEY}\n"
    f"aws_access_key_id = {AWS_ACCESS}\n"
    f'aws_secret_access_key = "{AWS_SECRET}"\n'
    f"and the server key:\n{PEM}\n"
    "Thanks, the weather is nice today."
)
SECRETS = (OPENAI_KEY, AWS_ACCESS, AWS_SECRET, PEM_BODY, GITHUB)


def chat(url: str, key: str, *, stream: bool = False, content: str = PROMPT) -> httpx.Response:
    body = {"model": "qwen3-32b", "messages": [{"role": "user", "content": content}], "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def stored() -> list[RequestPayload]:
    return list(RequestPayload.objects.order_by("id"))


def decompressed(blob) -> str:
    return zlib.decompress(bytes(blob)).decode()


@pytest.fixture
def redaction_threads(monkeypatch) -> list[str]:
    """The names of the threads that ran the redactor (it must never be the event loop's)."""
    names: list[str] = []
    original = Redactor.text

    def spy(self, value):
        names.append(threading.current_thread().name)
        return original(self, value)

    monkeypatch.setattr(Redactor, "text", spy)
    return names


def test_nothing_is_stored_and_no_writer_runs_when_logging_is_off(setup, gateway_url):
    assert chat(gateway_url, setup.plaintext).status_code == 200
    assert chat(gateway_url, setup.plaintext, stream=True).status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 2)
    assert stored() == []
    assert process.payloads._thread is None  # not even a thread for a gateway that logs nothing


def test_a_logged_key_stores_its_bodies_redacted_and_compressed(setup, gateway_url, redaction_threads):
    PayloadLogging.objects.create(key=setup.key, retention_days=3)
    r = chat(gateway_url, setup.plaintext)
    assert r.status_code == 200
    request_id = wait_for(lambda: UsageRecord.objects.first()).request_id
    (row,) = wait_for(stored)
    assert row.request_id == request_id and row.key_id == setup.key.pk and row.user_id == setup.key.owner_id
    assert not row.stream and row.http_status == 200
    assert row.expires_at - row.created == dt.timedelta(days=3)
    request, response = decompressed(row.request_body), decompressed(row.response_body)
    for secret in SECRETS:
        assert secret not in request
    content = orjson.loads(request)["messages"][0]["content"]
    assert "[REDACTED OpenAI Token]" in content
    assert "[REDACTED AWS Access Key]" in content
    assert "[REDACTED Private Key]" in content and "-----END RSA" not in content
    assert "Why does my deploy fail?" in content and "the weather is nice today" in content
    assert row.redactions >= 4
    assert orjson.loads(response) == r.json()  # the answer as the client got it
    assert row.request_bytes > len(PROMPT) and row.response_bytes == len(r.content)
    assert redaction_threads and set(redaction_threads) == {"payload-writer"}


def test_a_logged_users_stream_stores_the_relayed_text_redacted(setup, gateway_url, upstream):
    upstream.behave(reasoning=f"Your token {GITHUB} leaked.", tokens=4)
    PayloadLogging.objects.create(user=setup.key.owner, retention_days=1)
    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        json={"model": "qwen3-32b", "messages": [{"role": "user", "content": PROMPT}], "stream": True},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=10,
    ) as r:
        relayed = b"".join(r.iter_bytes())
    assert r.status_code == 200 and GITHUB.encode() in relayed  # the client gets its answer untouched
    (row,) = wait_for(stored)
    assert row.stream and not row.truncated
    text = decompressed(row.response_body)
    assert text.startswith("Your token [REDACTED GitHub Token] leaked.")
    assert "tok0 tok1 tok2 tok3" in text and "data:" not in text
    request = decompressed(row.request_body)
    assert not any(secret in request for secret in SECRETS)


def test_a_stream_that_splits_every_secret_of_the_corpus_across_events_is_stored_without_them(
    setup, gateway_url, upstream
):
    """Through the real gateway: the upstream streams the whole corpus five characters an event,
    so nearly every secret is cut across events; the stored text has none of them."""
    from tests.keys.test_redaction_corpus import CORPUS, assert_gone

    text = "\n".join(f"{name}: {context}" for name, _, context in CORPUS)
    upstream.behave(reasoning=text, reasoning_chunk=5, tokens=2)
    PayloadLogging.objects.create(key=setup.key, retention_days=1)
    with httpx.stream(
        "POST",
        f"{gateway_url}/v1/chat/completions",
        json={"model": "qwen3-32b", "messages": [{"role": "user", "content": "hi"}], "stream": True},
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=30,
    ) as r:
        relayed = b"".join(r.iter_bytes())
    assert r.status_code == 200 and relayed.count(b"data:") > len(text) // 5  # really split
    (row,) = wait_for(stored)
    stored_text = decompressed(row.response_body)
    for name, secret, _ in CORPUS:
        assert_gone(secret, stored_text, name)
        assert f"{name}: " in stored_text  # the text around each secret is kept
    assert row.redactions >= len(CORPUS)


def test_logging_turned_on_reaches_the_running_gateway_and_a_key_can_be_kept_out(setup, gateway_url):
    assert chat(gateway_url, setup.plaintext, content="first").status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 1)
    policy = PayloadLogging.objects.create(user=setup.key.owner, retention_days=2)
    assert chat(gateway_url, setup.plaintext, content="second").status_code == 200
    (row,) = wait_for(stored)
    assert "second" in decompressed(row.request_body)
    opt_out = PayloadLogging.objects.create(key=setup.key, enabled=False)
    assert chat(gateway_url, setup.plaintext, content="third").status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 3)
    assert len(stored()) == 1
    opt_out.delete()
    policy.delete()
    assert chat(gateway_url, setup.plaintext, content="fourth").status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 4)
    assert len(stored()) == 1


def test_a_teams_logging_covers_its_members_and_a_member_can_be_kept_out(setup, gateway_url, alice):
    from accounts.models import Team

    team = Team.objects.create(name="platform")
    PayloadLogging.objects.create(team=team, retention_days=5)
    assert chat(gateway_url, setup.plaintext, content="before joining").status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 1)
    assert stored() == []  # alice is in no team yet
    alice.team = team
    alice.save()
    assert chat(gateway_url, setup.plaintext, content="as a member").status_code == 200
    (row,) = wait_for(stored)
    assert "as a member" in decompressed(row.request_body)
    assert (row.expires_at - row.created).days == 5  # the team's retention
    PayloadLogging.objects.create(user=alice, enabled=False)  # the user's own switch wins over the team's
    assert chat(gateway_url, setup.plaintext, content="kept out").status_code == 200
    wait_for(lambda: UsageRecord.objects.count() == 3)
    assert len(stored()) == 1


def test_a_body_over_the_bound_is_cut_and_marked(setup, gateway_url, settings):
    settings.GATEWAY_PAYLOAD_MAX_BYTES = 2048
    PayloadLogging.objects.create(key=setup.key, retention_days=1)
    assert chat(gateway_url, setup.plaintext, content="x" * 10_000).status_code == 200
    (row,) = wait_for(stored)
    assert row.truncated and row.request_bytes > 10_000
    assert len(decompressed(row.request_body)) <= 2048
