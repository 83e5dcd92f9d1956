"""The every-page crawl in Chinese: as the admin, a developer and a team lead, every page the
navigation leads to (the browser crawl's world and skip list) is rendered in zh-Hans and its text
holds no English word left untranslated. It checks the rendered pages, not only the catalog, so a
string built in Python without gettext, a label Django derived from a field name or a choice
without a translation shows up here."""

from __future__ import annotations

import re
from collections import deque
from html import unescape
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlsplit

import pytest

from portal.templatelint import without_allowed
from tests.browser.test_every_page_in_browser import SKIP_CONTAINS, SKIP_PREFIXES, world  # noqa: F401
from tests.portal.test_i18n import PENDING

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# What the world fixture puts in the database (names, users, messages stored as data) and words
# that are the same in Chinese text (units, protocol and product names).
DATA = {
    "admin", "alice", "mallory", "lena", "alpha", "laptop", "other", "script", "coder", "tiny", "ops",
    "refused", "connect", "exit", "code", "alias", "window", "needed", "sent", "to", "llamacpp", "vllm",
    "NVIDIA", "GeForce", "RTX", "UTC", "p50", "p95", "KV", "CSV", "SHA256", "GiB", "MiB", "kB", "Hub",
    "sha256", "Token", "Bearer", "Authorization", "webhook", "Webhook", "Slack", "Ray", "NCCL", "Chat",
    "Completions", "Embeddings", "Messages", "Responses", "err", "flash", "attention", "Flash", "ok",
    "token", "Base", "IP", "GGUF", "venv", "CLI", "VS", "Code", "KILL", "TERM", "shell",
    "testserver", "BaseUrl", "USD", "CNY", "Goose", "Simon", "Willison", "llm", "ci", "MCP", "OAuth",
    "http", "https", "Slug", "issuer", "GitHub", "Copilot", "Factory", "Droid", "Mistral", "Vibe",
    "OpenHands", "JetBrains", "Junie", "AI", "Assistant", "pi", "PEM", "Attention", "CPU", "Jinja",
    "worker",  # a Ray or Celery worker, a term kept in the Chinese text
    # the clients' own words on the Connect page: Claude Code's model slots, Codex's and Junie's
    # profiles, Zed's and OpenHands' agent settings, Copilot CLI's env file, our provider id
    "main", "haiku", "sonnet", "opus", "profile", "Agent", "agent", "env", "teamgw", "Roo", "Kilo", "npm",
    "schema", "POST", "export",
    # the commands the Connect page says to run (`claude`, `codex` …)
    "aider", "claude", "codex", "copilot", "crush", "droid", "goose", "junie", "kilo", "openhands",
    "opencode", "qwen", "vibe", "zed",
    # values a backend's command line takes, listed as they are (`-fa auto`, `--quantization awq`)
    "auto", "on", "off", "awq", "gptq", "bitsandbytes", "gguf",
    "hermes", "mistral",  # tool-call parsers' names (`--tool-call-parser hermes`)
    "Streamable",  # MCP's Streamable HTTP transport
}  # fmt: skip
# Names taken as they are: our provider's name in the clients, a menu path of JetBrains' settings.
PHRASES = ("Team Gateway", "Settings | Tools | AI Assistant | Providers & API keys")
# A word glued to code-like characters (a path, a masked secret `gpt-Ab…yz`) is not prose.
WORD = re.compile(r"(?<![\w./:@…-])[A-Za-z]{2,}(?![\w./:@…-])")
MAX_PAGES = 250


class _Text(HTMLParser):
    """The text a person reads in <main> (the header and footer belong to base.html, which is
    PENDING until it is marked), without code, preformatted text, scripts, form values and text
    marked as in another language."""

    SKIP = {"code", "pre", "script", "style", "kbd", "samp", "textarea", "svg"}
    # Options are read too: a choice label or a select's empty label left in English shows there.

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.depth_main, self.skipping, self.chunks = 0, [], []

    def handle_starttag(self, tag, attrs):
        if tag == "main":
            self.depth_main += 1
        elif tag in self.SKIP or (dict(attrs).get("lang") or "zh").lower()[:2] != "zh":
            self.skipping.append(tag)  # or text in another language, marked so (`<option lang="en">English`)
        elif self.depth_main and not self.skipping:
            for name, value in attrs:
                if value and name in ("title", "placeholder", "aria-label", "alt"):
                    self.chunks.append(value)
                # the texts scripts show come in data-* attributes (data-confirm, a chart's legends);
                # the single words there are ids (data-step="source")
                elif value and name.startswith("data-") and " " in value.strip():
                    self.chunks.append(value)

    def handle_endtag(self, tag):
        if tag == "main":
            self.depth_main -= 1
        elif self.skipping and self.skipping[-1] == tag:
            self.skipping.pop()

    def handle_data(self, data):
        if self.depth_main and not self.skipping:
            self.chunks.append(data)


def english_words(html: str) -> list[str]:
    parser = _Text()
    parser.feed(html)
    text = re.sub(r"`[^`]*`", " ", " ".join(parser.chunks))  # `commands` in notes
    for phrase in PHRASES:
        text = text.replace(phrase, " ")
    text = without_allowed(text)
    return sorted({w for w in WORD.findall(text) if w not in DATA})


# Chinese text ends its sentences with Chinese punctuation (docs/glossary.zh-Hans.md): an ASCII mark
# after a Chinese character is a sentence glued from fragments or a msgstr left half-translated.
ASCII_AFTER_CHINESE = re.compile(r"[\u4e00-\u9fff]\s*[.:;?!](?=\s|$)")


# Nor does a space follow a Chinese full stop, colon or semicolon before the next Chinese sentence:
# two messages put side by side for English ("….  Ask an admin…") read "…此页面。 如果…" in Chinese.
SPACE_AFTER_CHINESE_STOP = re.compile(r"[。！？；：] +[\u4e00-\u9fff]")


def ascii_punctuation(html: str) -> list[str]:
    parser = _Text()
    parser.feed(html)
    text = re.sub(r"`[^`]*`", " ", " ".join(parser.chunks))
    # Within one text node: the chunks of neighbouring elements are joined with spaces above.
    spaced = {m.group() for chunk in parser.chunks for m in SPACE_AFTER_CHINESE_STOP.finditer(chunk)}
    return sorted({m.group() for m in ASCII_AFTER_CHINESE.finditer(text)} | spaced)


# Query strings lead to pages of their own (the Connect page's client tabs are `?client=…`, a
# filtered list says what matched), but one value of a parameter that only sorts, pages, walks
# through months or picks a row's owner is enough.
ONE_VALUE_ENOUGH = {"sort", "page", "month", "owner", "format"}


def links(html: str, here: str = "/") -> list[str]:
    """The pages `html` (at `here`) links to, query strings kept; `?…` is relative to `here`."""
    found = []
    for href in re.findall(r'<a [^>]*href="([^"#]*)', html):
        href = unescape(href)
        if href.startswith("?"):
            href = urlsplit(here).path + href
        if href.startswith("/"):
            found.append(href)
    return found


def page_key(link: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Links with the same key show the same page, as far as its text goes."""
    parts = urlsplit(link)
    query = parse_qsl(parts.query, keep_blank_values=True)
    return parts.path, tuple(sorted((k, "" if k in ONE_VALUE_ENOUGH else v) for k, v in query))


def crawl_in_chinese(client) -> tuple[list[str], dict[str, list[str]]]:
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    start = links(client.get("/").content.decode())
    queue, seen, visited, found = deque(start), {page_key(link) for link in start}, [], {}
    while queue and len(visited) < MAX_PAGES:
        path = queue.popleft()
        if path.startswith(SKIP_PREFIXES) or any(s in path for s in SKIP_CONTAINS):
            continue
        response = client.get(path)
        if response.status_code != 200 or not response["Content-Type"].startswith("text/html"):
            continue
        html = response.content.decode()
        visited.append(path)
        names = {t.name for t in response.templates if t.name}
        if not names & PENDING - {"base.html"}:
            if words := english_words(html) + ascii_punctuation(html):
                found[path] = words
        for link in links(html, path):
            if page_key(link) not in seen:
                seen.add(page_key(link))
                queue.append(link)
    return visited, found


@pytest.mark.parametrize("who", ["admin", "alice", "lena"])
def test_every_page_in_chinese_has_no_english_left(client, world, who, django_user_model):  # noqa: F811
    client.force_login(django_user_model.objects.get(username=who))
    visited, found = crawl_in_chinese(client)
    assert len(visited) >= (25 if who == "admin" else 5), visited
    assert found == {}, "Untranslated text on these pages:\n" + "\n".join(
        f"{path}: {' '.join(words)}" for path, words in found.items()
    )


def test_empty_and_filtered_lists_in_chinese_are_whole_sentences(client, admin):
    """The rows a list shows when nothing is in it or nothing matches its filter, which the crawl
    of the world (where every list has a row) never sees."""
    from accounts.models import Team

    empty = Team.objects.create(name="ops")
    client.force_login(admin)
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    pages = {
        "/keys/?state=revoked": "没有匹配的密钥。",
        "/keys/": "还没有密钥。",
        f"/teams/{empty.pk}/": "还没有成员：在用户的编辑页面选择该团队。",
    }
    for path, sentence in pages.items():
        html = client.get(path).content.decode()
        assert sentence in html, path
        assert english_words(html) == [] and ascii_punctuation(html) == [], path


def test_what_scripts_show_comes_translated_in_chinese(client, admin, world):  # noqa: F811
    """Scripts take their texts from the page: the copy buttons' from <body>, the health chart's
    legends and notes from its canvas and note (the crawl reads <main> only, and a chart's legend
    only in a browser)."""
    client.force_login(admin)
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    page = client.get("/").content.decode()
    assert 'data-copied="已复制"' in page and 'data-copy-selected="已选中：按 Ctrl+C（⌘C）复制"' in page
    from channels.models import Channel

    health = client.get(f"/channels/{Channel.objects.get(name='vllm-a').pk}/health/").content.decode()
    for attribute in ("data-ttft-check", "data-ttft-p50", "data-ttft-p95", "data-error-ratio", "data-errors-axis",
                      "data-none", "data-hours-1", "data-hours-2"):  # fmt: skip
        value = re.search(rf'{attribute}="([^"]*)"', health)
        assert value and re.search(r"[\u4e00-\u9fff]", value.group(1)), attribute
    assert 'data-hours-2="目前只有 2 个小时有检查记录' in health
    assert 'data-range="24h" aria-pressed="true">24 小时<' in health
    assert 'data-tokens="token 数" data-requests="请求"' in page


@pytest.mark.parametrize("who", ["admin", "lena"])
def test_usage_by_each_grouping_and_a_filter_error_in_chinese(client, world, who, django_user_model):  # noqa: F811
    """Pages reached by a form, not a link: the usage page grouped each way (its heading is one
    sentence per grouping), and a list whose filter value is wrong (the error names the field by
    its label)."""
    client.force_login(django_user_model.objects.get(username=who))
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    groups = ["model", "user", "key"] + (["team", "channel"] if who == "admin" else [])
    for group in groups:
        html = client.get(f"/usage/all/?group_by={group}").content.decode()
        assert english_words(html) == [] and ascii_punctuation(html) == [], (group, english_words(html))
        assert re.search(r"<h1>按\w+统计的(团队)?用量</h1>", html), group
    html = client.get("/keys/?state=42").content.decode()  # a number: the error repeats the value
    assert "状态：" in html and "state:" not in html
    assert english_words(html) == [], english_words(html)


def test_what_checks_report_is_in_chinese(client, admin, world):  # noqa: F811
    """What a check found, read after it ran: an MCP server that cannot be reached (stored as a
    Message, the English kept in last_error), a channel's "Check now" and an alert target's test
    (the world's channel and webhook are at a closed port)."""
    from channels.models import AlertTarget, Channel
    from mcpservers.models import McpServer

    server = McpServer.objects.create(name="ops", slug="ops", url="http://127.0.0.1:9/mcp")
    client.force_login(admin)
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    flashed = client.post(f"/mcp-servers/{server.pk}/check/", follow=True).content.decode()
    assert "MCP 服务器“ops”无法访问或出错：连接被拒绝或无法访问。" in flashed
    server.refresh_from_db()
    assert server.last_error == "MCP server 'ops' is unreachable or failed: connection refused or unreachable."
    assert english_words(flashed) == [] and ascii_punctuation(flashed) == [], english_words(flashed)
    channel = Channel.objects.get(name="vllm-a")
    checked = client.post(f"/channels/{channel.pk}/health/check/", HTTP_HX_REQUEST="true").content.decode()
    assert "无法连接 <small><code>connect</code></small>" in checked
    assert english_words(checked) == [], english_words(checked)
    target = AlertTarget.objects.get(name="ops")
    tested = client.post(f"/channels/health/alerts/{target.pk}/test/", HTTP_HX_REQUEST="true").content.decode()
    assert "失败：无法连接到 webhook（ConnectError）" in tested, tested


def test_sentences_side_by_side_have_no_gap_in_chinese(client, alice):
    """Pages no link leads to, where two messages stand side by side: the key shown once (after
    its form) and the 403 page. In English a space separates the sentences; in Chinese none."""
    client.force_login(alice)
    client.post("/language/", {"language": "zh-hans", "next": "/"})
    shown = client.post("/keys/new/", {"owner": alice.pk, "name": "dev-box"}, follow=True).content.decode()
    assert "请立即复制：它不会再次显示。</strong>我们只存储" in shown
    refused = client.get("/usage/requests/")
    assert refused.status_code == 403
    assert "只有管理员可以查看此页面。如果你需要，请联系管理员。" in refused.content.decode()
    for html in (shown, refused.content.decode()):
        assert ascii_punctuation(html) == [], ascii_punctuation(html)

    client.post("/language/", {"language": "en", "next": "/"})
    english = client.get("/usage/requests/").content.decode()
    assert re.search(r"\w\. If you need it, ask an admin\.</p>", english), english
