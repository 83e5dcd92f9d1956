"""The redaction corpus: one realistic fake per secret format of SECURITY.md's list, each asserted
gone, whole (no 8 characters of it left), from the stored request log and from every place an admin
reads it (the list page, the detail page, the API), in a request body, a response body, and a stream
split at every position of the secret (redaction runs on the assembled text, never per chunk).

The fakes have the real shapes (prefix, length, alphabet) but are drawn from a seeded generator.
"""

from __future__ import annotations

import base64
import random
import string
import zlib

import orjson
import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from gateway.payloads import _assembled
from keys.models import Key, RequestPayload
from keys.payloads.redact import Redactor
from keys.payloads.services import Captured, build
from keys.services import issue_key

_rng = random.Random(26)
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"
B64 = ALNUM + "+/"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def b64(n: int) -> str:
    return base64.b64encode(_rng.randbytes(n)).decode()


def b64url(n: int) -> str:
    return base64.urlsafe_b64encode(_rng.randbytes(n)).decode().rstrip("=")


def pem(kind: str, lines: int) -> str:
    body = b64(48 * lines)
    rows = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}PRIVATE KEY-----", *rows, f"-----END {kind}PRIVATE KEY-----"])


def jwt() -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT","kid":"k1"}').decode().rstrip("=")
    claims = b'{"sub":"1234567890","name":"Jane Doe","iat":1790000000,"exp":1790003600}'
    payload = base64.urlsafe_b64encode(claims).decode().rstrip("=")
    return f"{header}.{payload}.{b64url(256)}"


AWS_ID = "AKIA" + rnd(16, string.ascii_uppercase + string.digits)
AWS_SECRET = rnd(19, B64) + "/" + rnd(18, ALNUM) + "Q9"
AZURE_KEY = b64(64)
SAS_SIG = b64(32).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
BASIC = base64.b64encode(b"deploy:" + rnd(20).encode()).decode()

# (format, the secret, the text it is written in). The secret is what must be gone, whole.
CORPUS: list[tuple[str, str, str]] = [
    ("anthropic-api", s := "sk-ant-api03-" + rnd(93, URLSAFE) + "AA", f"ANTHROPIC_API_KEY={s}"),
    ("anthropic-admin", s := "sk-ant-admin01-" + rnd(93, URLSAFE) + "AA", f"my admin key is {s}, keep it safe"),
    ("openai-project", s := "sk-proj-" + rnd(74, URLSAFE) + "T3BlbkFJ" + rnd(74, URLSAFE), f'api_key="{s}"'),
    ("openai-service-account", s := "sk-svcacct-" + rnd(74, URLSAFE) + "T3BlbkFJ" + rnd(74, URLSAFE), f"use {s}"),
    ("openai-admin", s := "sk-admin-" + rnd(74, URLSAFE) + "T3BlbkFJ" + rnd(74, URLSAFE), f"({s})"),
    ("openai-legacy", s := "sk-" + rnd(20) + "T3BlbkFJ" + rnd(20), f"OPENAI_API_KEY={s}"),
    ("github-ghp", s := "ghp_" + rnd(36), f"git clone https://github.com/acme/x (token {s})"),
    ("github-gho", s := "gho_" + rnd(36), f"oauth: {s}"),
    ("github-ghu", s := "ghu_" + rnd(36), f"user-to-server {s}."),
    ("github-ghs", s := "ghs_" + rnd(36), f"GITHUB_TOKEN={s}"),
    ("github-ghr", s := "ghr_" + rnd(76), f"refresh {s}"),
    ("github-fine-grained", s := "github_pat_" + rnd(22) + "_" + rnd(59), f"GH_TOKEN={s}"),
    ("google-api", s := "AIza" + rnd(35, URLSAFE), f"https://maps.googleapis.com/maps/api/geocode/json?key={s}"),
    ("hugging-face", s := "hf_" + rnd(34), f"HF_TOKEN={s}"),
    ("stripe-live", s := "sk_live_51" + rnd(97), f"Stripe.api_key = '{s}'"),
    ("stripe-restricted", s := "rk_live_51" + rnd(97), f"restricted {s}"),
    ("stripe-test", s := "sk_test_51" + rnd(97), f"test key {s}"),
    ("slack-bot", s := f"xoxb-{rnd(13, string.digits)}-{rnd(13, string.digits)}-{rnd(24)}", f"SLACK_BOT_TOKEN={s}"),
    ("slack-user", s := "xoxp-" + "-".join(rnd(13, string.digits) for _ in range(3)) + "-" + rnd(32), s),
    (
        "slack-webhook",
        s := f"T{rnd(10)}/B{rnd(10)}/{rnd(24)}",
        f"post to https://hooks.slack.com/services/{s} now",
    ),
    ("gitlab-pat", s := "glpat-" + rnd(20, URLSAFE), f"GITLAB_TOKEN={s}"),
    ("gitlab-routable", s := "glpat-" + rnd(27, URLSAFE) + ".01." + rnd(9).lower(), f"token {s}"),
    ("gitlab-runner", s := "glrt-" + rnd(20, URLSAFE), f"runner {s}"),
    ("npm", s := "npm_" + rnd(36), f"//registry.npmjs.org/:_authToken={s}"),
    ("pypi", s := "pypi-AgEIcHlwaS5vcmc" + rnd(150, URLSAFE), f"password = {s}"),
    ("aws-pair", AWS_SECRET, f"aws_access_key_id={AWS_ID}\naws_secret_access_key={AWS_SECRET}"),
    ("aws-id", AWS_ID, f"the key id {AWS_ID} is ours"),
    ("aws-prose", s := rnd(21, B64) + "/" + rnd(15) + "k7Z", f"My AWS secret is {s} and the region is eu-west-1."),
    (
        "azure-connection-string",
        AZURE_KEY,
        f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
    ),
    (
        "azure-sas",
        SAS_SIG,
        "https://acme.blob.core.windows.net/c/f.txt?sv=2024-11-04&ss=b&srt=o&sp=r"
        f"&se=2026-12-31T00:00:00Z&spr=https&sig={SAS_SIG}",
    ),
    ("gateway-key", s := "gp-" + b64url(32), f"curl -H 'Authorization: Bearer' … my portal key {s}"),
    ("gateway-api-token", s := "gpt-" + b64url(32), f"PORTAL_TOKEN={s}"),
    ("pem-rsa", s := pem("RSA ", 6), f"here is the server key:\n{s}\nthanks"),
    ("pem-ec", s := pem("EC ", 3), f"key:\n{s}"),
    ("pem-pkcs8", s := pem("", 5), s),
    ("openssh", s := pem("OPENSSH ", 5), f"~/.ssh/id_ed25519:\n{s}\n"),
    ("jwt", s := jwt(), f"the id_token is {s}"),
    (
        "basic-auth-url",
        s := "S3cr3t-" + rnd(12),
        f"git remote add origin https://deploy:{s}@git.example.com/acme/app.git",
    ),
    ("authorization-bearer", s := rnd(40, URLSAFE), f"Authorization: Bearer {s}"),
    ("authorization-basic", BASIC, f"curl -H 'Authorization: Basic {BASIC}' https://api.example.com"),
]
IDS = [name for name, _, _ in CORPUS]

# Text that must survive redaction untouched around the secrets.
PROSE = "The weather is nice today; see commit 3f786850e387550fdab836ed7e6dc881de23001b, ask at 10.0.0.1."


def windows(secret: str, size: int = 8) -> list[str]:
    """Every `size`-character piece of the secret (its lines joined), so a kept tail is found."""
    flat = secret.replace("\n", "")
    return [flat[i : i + size] for i in range(0, max(len(flat) - size, 0) + 1)]


def assert_gone(secret: str, text: str, where: str) -> None:
    kept = [w for w in windows(secret) if w in text.replace("\n", "")]
    assert not kept, f"{where}: {len(kept)} piece(s) of the secret kept, e.g. {kept[0]!r}"


def captured(request: bytes, response: bytes, *, sse: bool = False, model: str = "qwen3-32b", key=None) -> Captured:
    return Captured(
        created=timezone.now(),
        request_id="req-corpus",
        key_id=key.pk if key else None,
        user_id=key.owner_id if key else None,
        model=model,
        surface="chat",
        stream=sse,
        status="ok",
        http_status=200,
        retention_days=3,
        request=request,
        response=response,
        request_bytes=len(request),
        response_bytes=len(response),
        truncated=False,
        sse=sse,
    )


def chat_request(content: str) -> bytes:
    return orjson.dumps({"model": "qwen3-32b", "messages": [{"role": "user", "content": content}]})


def chat_response(content: str) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]})


def sse(pieces: list[str]) -> bytes:
    events = [{"choices": [{"index": 0, "delta": {"content": piece}}]} for piece in pieces]
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def stored_text(row: RequestPayload) -> str:
    return zlib.decompress(bytes(row.request_body)).decode() + zlib.decompress(bytes(row.response_body)).decode()


def test_the_corpus_has_one_fake_per_format_and_each_is_really_in_its_text():
    assert len(set(IDS)) == len(IDS) == len(CORPUS)
    assert len(AWS_SECRET) == 40 and len(AWS_ID) == 20
    for name, secret, text in CORPUS:
        assert secret in text, name


@pytest.mark.parametrize(("name", "secret", "text"), CORPUS, ids=IDS)
def test_each_format_is_redacted_whole_and_the_text_around_it_is_kept(name, secret, text):
    redactor = Redactor()
    out = redactor.text(f"{PROSE}\n{text}\n{PROSE}")
    assert_gone(secret, out, name)
    assert "[REDACTED" in out and redactor.count >= 1
    assert out.startswith(PROSE + "\n") and out.endswith("\n" + PROSE)


@pytest.mark.django_db
def test_every_secret_is_gone_from_the_stored_log_and_from_every_page_and_api_that_shows_it(admin):
    key = issue_key(owner=admin, name="corpus")[0]
    redactor = Redactor()
    rows = []
    for name, secret, text in CORPUS:
        model = text if len(text) <= 128 else "qwen3-32b"  # a secret sent as the model name
        row = build(captured(chat_request(text), chat_response(text), model=model, key=key), redactor)
        row.save()
        rows.append((name, secret, row))
    client = APIClient()
    client.force_login(admin)
    listing = client.get(reverse("request_log_list")).content.decode()
    api_list = client.get("/api/request-logs/?page_size=100").content.decode()
    for name, secret, row in rows:
        assert_gone(secret, stored_text(row), f"{name} stored")
        assert_gone(secret, row.model, f"{name} model")
        assert_gone(secret, listing, f"{name} list page")
        assert_gone(secret, api_list, f"{name} API list")
        page = client.get(reverse("request_log_detail", args=[row.pk]))
        assert page.status_code == 200
        assert_gone(secret, page.content.decode(), f"{name} detail page")
        api = client.get(f"/api/request-logs/{row.pk}/")
        assert api.status_code == 200
        assert_gone(secret, api.content.decode(), f"{name} API detail")
        assert "[REDACTED" in api.json()["request_body"] and "[REDACTED" in api.json()["response_body"]


@pytest.mark.parametrize(("name", "secret", "text"), CORPUS, ids=IDS)
def test_a_stream_split_at_every_position_of_the_secret_is_redacted_on_its_assembled_text(name, secret, text):
    redactor = Redactor()
    full = f"Sure. {text} Anything else?"
    start = full.index(secret)
    for cut in range(start, start + len(secret) + 1):
        row = build(_assembled(captured(chat_request("hi"), sse([full[:cut], full[cut:]]), sse=True)), redactor)
        stored = zlib.decompress(bytes(row.response_body)).decode()
        assert stored.startswith("Sure. ") and stored.endswith(" Anything else?"), (name, cut)
        assert_gone(secret, stored, f"{name} split at {cut - start}")
    # and in pieces of three characters, each its own event, as token streams come
    pieces = [full[i : i + 3] for i in range(0, len(full), 3)]
    row = build(_assembled(captured(chat_request("hi"), sse(pieces), sse=True)), redactor)
    assert_gone(secret, zlib.decompress(bytes(row.response_body)).decode(), f"{name} in 3-character pieces")


def test_a_key_minted_by_the_portal_and_an_api_token_are_caught_as_minted():
    from accounts.models import ApiToken

    key_plain = Key.mint()[1]
    token_plain = ApiToken.mint()[1]
    out = Redactor().text(f"key {key_plain} token {token_plain}")
    assert key_plain not in out and token_plain not in out
    assert "[REDACTED Gateway Portal key]" in out and "[REDACTED Gateway Portal API token]" in out


def test_model_names_and_ordinary_text_are_left_alone():
    text = (
        "Use gpt-4o-mini-2024-07-18 or ft:gpt-4o-mini-2024-07-18:acme:support:9abcDEF and sk-learn; "
        "the AWS region is eu-west-1 and the commit is 3f786850e387550fdab836ed7e6dc881de23001b.\n" + PROSE
    )
    redactor = Redactor()
    assert redactor.text(text) == text and redactor.count == 0
