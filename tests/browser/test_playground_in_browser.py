"""The playground in a real browser, through the real gateway: a developer chats with real
llama.cpp (the answer streams, the record is theirs with surface playground), a local-only
developer cannot reach an external model, two models side by side, the surface check marks a
model red whose upstream refuses tools, and no key or reusable token is in the page, its storage
or its network log; the credential dies at logout. All under the CSP without 'unsafe-inline'."""

from __future__ import annotations

import contextlib
import re
import uuid

import httpx
import pytest

from channels.models import Channel, Model, ModelRoute
from keys.choices import ApiSurface
from keys.models import Key, UsageRecord
from keys.playground import credential
from keys.playground.services import CLIENT, playground_key
from tests.fakes.llamacpp import LlamaServer
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import ThreadServer, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
UPSTREAM_KEY = "sk-upstream-playground-browser"
LLAMA_KEY = "llama-upstream-key"

# Counts how often the answer's text changed while it was streaming (a buffered answer changes once).
COUNT_RENDERS = """
window.__renders = 0;
new MutationObserver(function (records) {
  records.forEach(function (r) {
    var node = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    var answer = node && node.closest(".pg-answer");
    if (answer && answer.getAttribute("data-state") === "streaming") window.__renders += 1;
  });
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


@pytest.fixture
def world(transactional_db, settings, monkeypatch, tmp_path):
    """Real llama.cpp on a local channel (`tiny-chat`), a fake vLLM without a tool parser on an
    external channel (`cloud-chat`), and the portal with its gateway on one uvicorn server."""
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "pgb-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    with (
        LlamaServer(ctx=512, api_key=LLAMA_KEY, ignore_eos=True) as llama,
        FakeUpstream(api_key=UPSTREAM_KEY) as cloud_up,
    ):
        cloud_up.behave(mode="no_tools", tokens=6)
        local = Channel.objects.create(
            name="llama",
            kind="llamacpp",
            base_url=llama.base_url,
            api_key=LLAMA_KEY,
            status="healthy",
            locality="local",
        )
        cloud = Channel.objects.create(
            name="cloud", kind="vllm", base_url=cloud_up.base_url, api_key=UPSTREAM_KEY, status="healthy"
        )
        ModelRoute.objects.create(
            model=Model.objects.create(name="tiny-chat"),
            channel=local,
            upstream_model=llama.model_id,
            context_window=512,
        )
        ModelRoute.objects.create(
            model=Model.objects.create(name="cloud-chat"), channel=cloud, upstream_model="fake-model"
        )
        # An embedding model the key may use: /v1/models lists it, the playground's chat offers it not.
        ModelRoute.objects.create(
            model=Model.objects.create(name="cloud-embed", kind="embedding"), channel=cloud, upstream_model="fake-embed"
        )
        server = ThreadServer().start()
        try:
            yield {"url": server.url, "cloud": cloud_up}
        finally:
            server.stop()


def sign_in(browser, url: str, username: str, password: str, *, errors: list[str]):
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("main button[type=submit]")
    page.wait_for_url(url + "/")
    return context, page


def open_playground(page, url: str) -> None:
    page.click("header nav >> text=Playground")
    page.wait_for_selector("body[data-playground=ready]")


def test_developer_chats_with_llama_and_the_key_never_reaches_the_page(world, browser, alice, screenshots):
    url = world["url"]
    errors: list[str] = []
    context, page = sign_in(browser, url, "alice", "alice-pass-123", errors=errors)
    page.add_init_script(COUNT_RENDERS)
    network: list[tuple[str, dict, str]] = []

    def log_request(request):
        network.append((request.url, request.headers, request.post_data or ""))

    page.on("request", log_request)
    responses = []
    page.on("response", lambda r: responses.append(r))
    open_playground(page, url)
    document = next(r for r in responses if r.url == url + "/playground/")
    csp = document.headers.get("content-security-policy", "")
    assert "unsafe-inline" not in csp and "script-src 'self'" in csp

    assert page.eval_on_selector_all("#pg-model option", "os => os.map(o => o.value)") == ["cloud-chat", "tiny-chat"]
    page.select_option("#pg-model", "tiny-chat")
    page.fill("#pg-max-tokens", "24")
    page.fill("#pg-system", "You are terse.")
    page.fill("#pg-input", "Say something **bold**")
    page.click("#pg-send")
    page.wait_for_selector(".pg-assistant .pg-answer[data-state=done]")
    assert page.evaluate("window.__renders") >= 3, "the answer did not arrive in pieces"
    page.wait_for_selector(".pg-metrics[data-record=loaded]")
    assert page.text_content(".pg-completion-tokens") == "24"
    assert int(page.text_content(".pg-prompt-tokens")) > 0
    assert page.text_content(".pg-ttft").endswith(" ms")
    assert page.query_selector(".pg-channel") is None  # developers are not shown channels
    rid = page.text_content(".pg-request-id")
    record = wait_for(lambda: UsageRecord.objects.filter(request_id=rid).first())
    key = Key.objects.get(owner=alice, client=CLIENT)
    assert (record.user_id, record.key_id, record.surface, record.completion_tokens) == (
        alice.pk,
        key.pk,
        ApiSurface.PLAYGROUND,
        24,
    )
    assert record.stream is True

    # A second turn carries the first (multi-turn), then "clear" empties the conversation.
    page.fill("#pg-input", "And again")
    page.click("#pg-send")
    page.wait_for_selector("#pg-conversation > .pg-turn:nth-child(4) .pg-answer[data-state=done]")
    sent = [body for u, _h, body in network if u.endswith("/v1/chat/completions")]
    assert '"You are terse."' in sent[-1] and '"Say something **bold**"' in sent[-1] and '"And again"' in sent[-1]
    page.screenshot(path=f"{screenshots}/playground-chat.png", full_page=True)
    page.click("#pg-clear")
    assert page.query_selector(".pg-turn") is None

    # Markdown from a model is text: markup in it is shown, never run or inserted.
    html = page.evaluate(
        """() => { const d = document.createElement('div');
          PortalMarkdown.render('<img src=x onerror=alert(1)>\\n\\n```js\\n<b>x</b>\\n```\\n- **bold** `code`', d);
          return d.innerHTML; }"""
    )
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert '<pre><code data-lang="js">&lt;b&gt;x&lt;/b&gt;</code></pre>' in html
    assert "<li><strong>bold</strong> <code>code</code></li>" in html

    # Copy as code: the gateway URL and a placeholder, never a key.
    page.click("[data-tab=code]")
    page.click("[data-code=openai]")
    code = page.text_content("#pg-code")
    assert url + "/v1" in code and "YOUR_KEY" in code

    # No key, no credential readable by the page: not in the source, storage, cookies JS sees, or requests.
    source = page.content()
    cookie_value = next(c["value"] for c in context.cookies() if c["name"] == credential.COOKIE)
    storage = page.evaluate("JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage)])")
    assert "gp-" not in source and cookie_value not in source and "gp-" not in storage
    assert credential.COOKIE not in page.evaluate("document.cookie")  # HttpOnly
    for request_url, headers, body in network:
        assert "authorization" not in {h.lower() for h in headers}, request_url
        assert "gp-" not in body and cookie_value not in body and cookie_value not in request_url
    assert not errors, errors

    # The credential dies with the session: logging out makes the very same cookies useless.
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    gateway = url + "/v1/chat/completions"
    call = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {credential.HEADER: "1"}
    assert httpx.post(gateway, json=call, headers=headers, cookies=cookies, timeout=60).status_code == 200
    page.click("header button:has-text('Log out')")
    page.wait_for_url(url + "/login/")
    after = httpx.post(gateway, json=call, headers=headers, cookies=cookies, timeout=60)
    assert after.status_code == 401, after.text
    context.close()


def test_local_only_developer_compare_and_surface_check(world, browser, alice, admin, screenshots):
    url = world["url"]
    errors: list[str] = []

    # Compare and the surface check, as an admin (who also sees channels and the routing).
    context, page = sign_in(browser, url, "admin", "admin-pass-123", errors=errors)
    open_playground(page, url)
    page.click("[data-tab=compare]")
    page.check("#pg-compare-models input[value=tiny-chat]")
    page.check("#pg-compare-models input[value=cloud-chat]")
    page.fill("#pg-max-tokens", "6")
    page.fill("#pg-compare-input", "Compare me")
    page.click("#pg-compare-send")
    page.wait_for_selector("#pg-compare-results[data-running='0']")
    for model, channel in (("tiny-chat", "llama"), ("cloud-chat", "cloud")):
        column = f".pg-compare-column[data-model={model}]"
        assert page.get_attribute(f"{column} .pg-answer", "data-state") == "done"
        page.wait_for_selector(f"{column} .pg-metrics[data-record=loaded]")
        assert page.text_content(f"{column} .pg-completion-tokens") == "6"
        assert page.text_content(f"{column} .pg-channel") == channel
        assert f"sent to {channel}" in page.text_content(f"{column} .pg-route")
    assert page.text_content(".pg-compare-column[data-model=cloud-chat] .pg-answer") == "tok0 tok1 tok2 tok3 tok4 tok5"
    page.screenshot(path=f"{screenshots}/playground-compare.png", full_page=True)

    # A failed call shows the gateway's real error, the upstream's status in it, and (admin) the routing.
    page.click("[data-tab=chat]")
    page.select_option("#pg-model", "cloud-chat")
    world["cloud"].enqueue(mode="status", status=500, error_message="CUDA out of memory")
    page.fill("#pg-input", "fail please")
    page.click("#pg-send")
    page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
    error = page.text_content(".pg-assistant .pg-error")
    assert "HTTP 500" in error and "CUDA out of memory" in error, error
    page.wait_for_selector(".pg-assistant .pg-metrics[data-record=loaded]")
    assert page.text_content(".pg-assistant .pg-http-status") == "502"
    assert "every route failed" in page.text_content(".pg-assistant .pg-route")

    # An image goes with the next message as an image_url part.
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201e2213bc40000000049454e44ae426082"
    )
    page.set_input_files("#pg-image", files=[{"name": "dot.png", "mimeType": "image/png", "buffer": png}])
    page.wait_for_selector("#pg-attached:has-text('dot.png')")
    page.fill("#pg-input", "what is this?")
    page.click("#pg-send")
    page.wait_for_selector("#pg-conversation > .pg-turn:nth-child(4) .pg-answer[data-state=done]")
    parts = world["cloud"].requests[-1].json["messages"][-1]["content"]
    assert parts[0] == {"type": "text", "text": "what is this?"}
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")

    page.click("[data-tab=surfaces]")
    page.click("#pg-surfaces-run")
    page.wait_for_selector("#pg-surfaces-table[data-done='1']", timeout=60_000)
    outcomes = page.eval_on_selector_all(
        "#pg-surfaces-table td",
        "cs => cs.map(c => [c.closest('tr').dataset.surface, c.dataset.check, c.dataset.outcome])",
    )
    for surface, check, outcome in outcomes:
        assert outcome == ("fail" if check == "tool" else "pass"), (surface, check, outcome)
    assert len(outcomes) == 9
    why = page.text_content("#pg-surfaces-table tr[data-surface='/chat/completions'] td[data-check=tool]")
    assert "enable-auto-tool-choice" in why and "400" in why
    page.screenshot(path=f"{screenshots}/playground-surfaces.png", full_page=True)
    context.close()

    # A local-only developer: the external model is not offered, and a call to it is refused.
    playground_key(alice)
    Key.objects.filter(owner=alice, client=CLIENT).update(local_only=True)
    context, page = sign_in(browser, url, "alice", "alice-pass-123", errors=errors)
    open_playground(page, url)
    assert page.eval_on_selector_all("#pg-model option", "os => os.map(o => o.value)") == ["tiny-chat"]
    served = len(world["cloud"].requests)
    status = page.evaluate(
        """() => fetch('/v1/chat/completions', {method: 'POST', credentials: 'same-origin',
            headers: {'Content-Type': 'application/json', 'X-Portal-Playground': '1'},
            body: JSON.stringify({model: 'cloud-chat', messages: [{role: 'user', content: 'hi'}]})})
          .then(r => r.json().then(d => [r.status, d.error.code]))"""
    )
    assert status[0] in (403, 404) and status[1] in ("local_only", "model_not_found"), status
    assert len(world["cloud"].requests) == served
    # The refused calls above (400 tools, 403/404 external) are logged by chromium; nothing else may be.
    assert not [e for e in errors if "Failed to load resource" not in e], errors
    context.close()


# The meanings the test below reads, in the portal's zh-Hans catalog.
CONTEXT_TOO_LONG = (
    "The conversation is too long for this model's context window: clear it, shorten it or lower Max tokens."
)
MODEL_GONE = "This model does not exist or is not available to you: reload the page for the current list."


def in_chinese(msgid: str) -> str:
    from django.utils import translation

    with translation.override("zh-hans"):
        text = translation.gettext(msgid)
    assert text != msgid and re.search(r"[\u4e00-\u9fff]", text), f"no zh-Hans for {msgid!r}"
    return text


@contextlib.contextmanager
def chinese_playground(settings, monkeypatch, tmp_path, browser, alice, *, context_window=None, **behaviour):
    """The playground open for alice, who reads Chinese, on `small-chat`: a fake vLLM upstream
    (behaving as `behaviour` says) behind a gateway served in this process. Yields (upstream,
    model, page); the page logged no error but failed loads when the block ends."""
    monkeypatch.setenv("GATEWAY_REDIS_NAMESPACE", "pgz-" + uuid.uuid4().hex[:10])
    settings.PORTAL_PUBLIC_URL = ""
    settings.GATEWAY_USAGE_FLUSH_INTERVAL = 0.1
    settings.GATEWAY_STATE_DIR = tmp_path / "gateway-state"
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    with FakeUpstream(api_key=UPSTREAM_KEY) as upstream:
        upstream.behave(**behaviour)
        channel = Channel.objects.create(
            name="cloud", kind="vllm", base_url=upstream.base_url, api_key=UPSTREAM_KEY, status="healthy"
        )
        model = Model.objects.create(name="small-chat")
        ModelRoute.objects.create(
            model=model, channel=channel, upstream_model="fake-model", context_window=context_window
        )
        server = ThreadServer().start()
        try:
            url = server.url
            errors: list[str] = []
            context, page = sign_in(browser, url, "alice", "alice-pass-123", errors=errors)
            page.goto(url + "/playground/")
            page.wait_for_selector("body[data-playground=ready]")
            page.select_option("#pg-model", "small-chat")
            yield upstream, model, page
            assert not [e for e in errors if "Failed to load resource" not in e], errors
            context.close()
        finally:
            server.stop()


def test_a_chinese_reader_sees_what_a_gateway_error_means_in_chinese(
    transactional_db, settings, monkeypatch, tmp_path, browser, alice, screenshots
):
    """A prompt too long for the model's window, then a model disabled while the page was open: the
    playground says what each means in the reader's language, above the gateway's own text."""
    playground = chinese_playground(settings, monkeypatch, tmp_path, browser, alice, context_window=256, tokens=3)
    with playground as (upstream, model, page):
        page.fill("#pg-input", "Please read all of this. " * 120)  # ≈750 tokens for a 256-token window
        page.click("#pg-send")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
        assert page.text_content(".pg-assistant .pg-error-meaning") == in_chinese(CONTEXT_TOO_LONG)
        detail = page.text_content(".pg-assistant .pg-error-detail")
        assert "context_length_exceeded" in detail and "largest context window is 256 tokens" in detail
        assert not upstream.requests  # refused by the gateway itself
        page.wait_for_selector(".pg-assistant [data-record=loaded]")  # the refusal's usage record…
        assert page.locator(".pg-assistant .pg-record-error").count() == 0  # …does not say it again

        model.enabled = False
        model.save(update_fields=["enabled", "updated"])  # while the page still offers it
        page.click("#pg-clear")
        page.fill("#pg-input", "hi")
        page.click("#pg-send")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
        assert page.text_content(".pg-assistant .pg-error-meaning") == in_chinese(MODEL_GONE)
        detail = page.text_content(".pg-assistant .pg-error-detail")
        assert "model_not_found" in detail and "does not exist or is not available" in detail
        page.screenshot(path=f"{screenshots}/playground-error-zh.png", full_page=True)


UNSUPPORTED = (
    "This model's server cannot take this request (an image, a tool or a setting it was not started "
    "for): remove it and send again, or choose another model."
)
OTHER_ERROR = "The request failed; the detail below, from the gateway or the model's server, says why."


def test_a_chinese_reader_is_told_in_chinese_what_an_upstreams_refusal_means(
    transactional_db, settings, monkeypatch, tmp_path, browser, alice
):
    """The model's server refuses the prompt with its own error (a safety refusal, passed through
    with a code the page has no meaning for), then says it cannot take such a request (501): the
    playground says in the reader's language what happened, the server's English text under it."""
    refusal = "Your request was rejected as a result of our safety system."
    refused = {"mode": "status", "status": 400, "error_type": "content_policy_violation", "error_message": refusal}
    with chinese_playground(settings, monkeypatch, tmp_path, browser, alice, **refused) as (upstream, _model, page):
        page.fill("#pg-input", "something the model refuses")
        page.click("#pg-send")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
        assert page.text_content(".pg-assistant .pg-error-meaning") == in_chinese(OTHER_ERROR)
        assert refusal in page.text_content(".pg-assistant .pg-error-detail")

        upstream.behave(mode="status", status=501, error_message="image input is not supported")
        page.click("#pg-clear")
        page.fill("#pg-input", "hi")
        page.click("#pg-send")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
        assert page.text_content(".pg-assistant .pg-error-meaning") == in_chinese(UNSUPPORTED)
        detail = page.text_content(".pg-assistant .pg-error-detail")
        assert "unsupported_by_upstream" in detail and "image input is not supported" in detail


def test_a_chinese_reader_who_stops_an_answer_reads_no_english_about_it(
    transactional_db, settings, monkeypatch, tmp_path, browser, alice
):
    """Stop mid-stream: the page says in Chinese that the answer was stopped, keeps what came, and
    shows neither the browser's own English reason for the abort ("signal is aborted without
    reason") nor the usage record's English error for the disconnect it caused."""
    stalled = {"mode": "stall", "stall_after": 3}  # the role, tok0 and tok1, then nothing
    with chinese_playground(settings, monkeypatch, tmp_path, browser, alice, **stalled) as (_upstream, _model, page):
        page.fill("#pg-input", "你好")
        page.click("#pg-send")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=streaming]:has-text('tok1')")
        page.click("#pg-stop-button")
        page.wait_for_selector(".pg-assistant .pg-answer[data-state=error]")
        assert "tok0 tok1" in page.text_content(".pg-assistant .pg-answer")
        assert page.text_content(".pg-assistant .pg-error-meaning") == in_chinese(
            "Stopped before the answer was complete."
        )
        assert page.text_content(".pg-assistant .pg-error-detail").strip() == "aborted"  # the code, an id
        page.wait_for_selector(".pg-assistant [data-record=loaded]")
        assert page.text_content(".pg-assistant .pg-http-status") == "499"
        assert page.locator(".pg-assistant .pg-record-error").count() == 0
        assert page.is_visible("#pg-send") and page.is_enabled("#pg-send")
