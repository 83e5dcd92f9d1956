"""English and Simplified Chinese (issue 30): the catalog is complete and compiled, every template
text is marked, the language follows the saved preference, the switcher and the browser, and the
REST API answers in it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polib
import pytest
from django import forms
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse
from django.utils import translation

from portal import catalog, templatelint
from portal.management.commands.update_messages import IGNORE

ROOT = Path(settings.BASE_DIR)
# Templates not yet marked, left out of the check: none are left. A template added here must say why.
PENDING: frozenset[str] = frozenset()


def test_every_message_has_a_zh_hans_translation():
    missing = catalog.untranslated()
    assert missing == [], "Translate these in locale/zh_Hans/LC_MESSAGES/django.po:\n" + "\n".join(missing)


@pytest.mark.slow
def test_every_marked_string_is_in_the_catalog(settings, tmp_path, monkeypatch):
    """makemessages over the code as it is now finds nothing the committed catalog lacks.

    It runs in a mirror of the checkout (links to every top-level entry, a copy of `locale`): run in
    the checkout itself, makemessages writes the checkout's own catalog, whatever LOCALE_PATHS says,
    and would then find nothing missing."""
    for entry in ROOT.iterdir():
        if entry.name not in ("locale", ".venv", ".git", "node_modules"):
            (tmp_path / entry.name).symlink_to(entry)
    locale = tmp_path / "locale"
    shutil.copytree(ROOT / "locale", locale)
    settings.LOCALE_PATHS = [locale]
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_bytes() for p in (ROOT / "locale").rglob("*.po")}
    call_command(
        "makemessages",
        locale=["zh_Hans"],
        ignore_patterns=IGNORE,
        no_obsolete=True,
        add_location="file",
        symlinks=True,
        verbosity=0,
    )
    assert {p: p.read_bytes() for p in (ROOT / "locale").rglob("*.po")} == before, "the checkout's catalog changed"
    fresh = polib.pofile(str(locale / "zh_Hans" / "LC_MESSAGES" / "django.po"))
    missing = [
        f"{e.msgid!r} ({', '.join(f for f, _ in e.occurrences[:3])})"
        for e in fresh.untranslated_entries() + fresh.fuzzy_entries()
    ]
    assert missing == [], (
        "Marked but not translated (run `uv run python manage.py update_messages`, then translate):\n"
        + "\n".join(missing)
    )


def test_chinese_words_are_not_spaced_apart_in_the_catalog():
    """The glossary's rule: a space between Chinese and Latin words or numbers, none between two
    Chinese words ("在 操练场 中单独试用此渠道" read as if a Latin word had been swapped out)."""
    spaced = []
    for po_path in catalog.po_files():
        for entry in polib.pofile(str(po_path)):
            for text in [entry.msgstr, *entry.msgstr_plural.values()]:
                # `%(ago)s` is Django's timesince, Chinese itself ("5 分钟"): "%(ago)s前", not "%(ago)s 前".
                if re.search(r"[\u4e00-\u9fff] +[\u4e00-\u9fff]|%\(ago\)s +[\u4e00-\u9fff]", text):
                    spaced.append(f"{entry.msgid!r}: {text!r}")
    assert spaced == [], "Remove the spaces between Chinese words:\n" + "\n".join(spaced)


def test_the_compiled_catalog_matches_the_po_file():
    for po_path in catalog.po_files():
        po = polib.pofile(str(po_path))
        mo = polib.mofile(str(po_path.with_suffix(".mo")))
        wanted = {
            (e.msgctxt, e.msgid): e.msgstr or e.msgstr_plural.get(0, "")
            for e in po.translated_entries()
            if "fuzzy" not in e.flags
        }
        compiled = {(e.msgctxt, e.msgid): e.msgstr or e.msgstr_plural.get(0, "") for e in mo if e.msgid}
        stale = sorted(
            k[1] for k in wanted.keys() ^ compiled.keys() | {k for k in wanted if wanted[k] != compiled.get(k)}
        )
        assert stale == [], f"{po_path.with_suffix('.mo')} is stale: run `uv run python manage.py compilemessages`"


def test_every_template_text_is_marked_for_translation():
    found = templatelint.lint_all(ROOT / "templates", skip=PENDING)
    assert found == [], "Mark these with {% translate %} / {% blocktranslate %}:\n" + "\n".join(
        str(f).replace(templatelint.MARK, "…") for f in found
    )


def test_the_linter_finds_unmarked_text_and_attributes(tmp_path):
    template = tmp_path / "t.html"
    template.write_text(
        '{% load i18n %}<h1>{% translate "Hosts" %}</h1><p>Add a host</p><code>curl -fsS</code>'
        '<input placeholder="Search hosts"><span title="{% translate "Refresh" %}">GPU</span>'
        '{% blocktranslate %}Hello {{ name }}{% endblocktranslate %}{{ x|default:"not yet" }}'
    )
    found = [f.text for f in templatelint.lint(template, "t.html")]
    assert found == ['{{ x|default:"not yet" }}', "Add a host", "Search hosts"]


def test_the_linter_finds_sentences_built_from_fragments(tmp_path):
    template = tmp_path / "t.html"
    template.write_text(
        '{% load i18n %}<td>{% translate "No keys" %}{% if f %} {% translate "match" %}{% endif %}.</td>'
        '<td>{% translate "No members yet" %}{% translate ": choose a team" %}</td>'
        '<td>{% translate "No keys match." %} {% if n %}{{ n }}.{% endif %}</td>'
    )
    found = [f.text for f in templatelint.fragments(template, "t.html")]
    assert found == ["{% endif %}.", '{% translate ": choose a team" %}']


# What a script puts in front of a person: an assignment to textContent/innerText/innerHTML (the
# whole statement, ternaries included), a chart's `label:`/`text:`/`title:`, an alert() or confirm().
_SHOWN_BY_JS = re.compile(
    r"""\b(?:textContent|innerText|innerHTML)\s*=(?!=)([^;]*);"""
    r"""|\b(?:label|text|title)\s*:\s*("[^"]*"|'[^']*'|`[^`]*`)"""
    r"""|\b(?:alert|confirm)\(([^;]*)\)""",
    re.S,
)
_JS_STRING = re.compile(r""""((?:\\.|[^"\\])*)"|'((?:\\.|[^'\\])*)'|`([^`]*)`""")


def english_in_scripts(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.js")):
        if "vendor" in path.parts:
            continue
        source = path.read_text()
        for match in _SHOWN_BY_JS.finditer(source):
            shown = match.group()
            for literal in _JS_STRING.finditer(shown):
                text = next(g for g in literal.groups() if g is not None)
                # a key (`dataset["hours-" + n]`) or a placeholder to fill (`.replace("{name}", …)`)
                if shown[: literal.start()].rstrip().endswith(("dataset[", ".replace(")):
                    continue
                if templatelint.has_words(text):
                    line = source.count("\n", 0, match.start()) + 1
                    found.append(f"{path.relative_to(root)}:{line}: {text!r}")
    return found


def test_scripts_show_no_english_of_their_own():
    """Static scripts have no catalog: what they show comes translated from the page (data
    attributes, as data-confirm does, or the page's json_script texts, as the playground's do)."""
    found = english_in_scripts(ROOT / "static")
    assert found == [], "Pass these from the template, translated:\n" + "\n".join(found)


def test_the_script_check_finds_english_shown_by_a_script(tmp_path):
    (tmp_path / "a.js").write_text(
        'b.textContent = "Copied";\nnote.textContent = n === 0\n  ? "Nothing yet"\n  : "Only " + n + " hours";\n'
        'c.textContent = el.dataset.copied;\nnew Chart(x, {label: "TTFT p50 (ms)", text: "% errors"});\n'
        'alert(T.pick_model);\nconfirm("Really delete?");\nif (a.textContent === "x") {}\n'
        'd.textContent = d.dataset["hours-" + n] + T.attached.replace("{name}", f.name);\n'
    )
    found = [f.split(": ", 1)[1] for f in english_in_scripts(tmp_path)]
    assert found == ["'Copied'", "'Nothing yet'", "'Only '", "' hours'", "'% errors'", "'Really delete?'"]


# --- which language a page is in ---------------------------------------------------------------


def test_the_browser_language_picks_chinese_for_anyone(client):
    page = client.get(reverse("login"), HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9,en;q=0.5")
    assert "登录 Gateway Portal" in page.content.decode()
    assert page["Content-Language"] == "zh-hans"
    english = client.get(reverse("login"), HTTP_ACCEPT_LANGUAGE="en-US")
    assert "Log in to Gateway Portal" in english.content.decode()


def test_a_saved_preference_wins_over_the_browser(client, alice):
    alice.language = "zh-hans"
    alice.save()
    client.force_login(alice)
    page = client.get(reverse("account"), HTTP_ACCEPT_LANGUAGE="en-US")
    assert "API 令牌" in page.content.decode()
    # and is remembered in the cookie, so the login page after logging out speaks it too
    assert page.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"


def test_the_switcher_saves_the_preference_and_goes_back(client, alice):
    client.force_login(alice)
    response = client.post(reverse("set_language"), {"language": "zh-hans", "next": "/account/"})
    assert response.status_code == 302 and response["Location"] == "/account/"
    alice.refresh_from_db()
    assert alice.language == "zh-hans"
    client.logout()
    client.cookies.clear()  # another browser
    client.force_login(alice)
    assert "API 令牌" in client.get(reverse("account"), HTTP_ACCEPT_LANGUAGE="en").content.decode()
    # back to following the browser
    client.post(reverse("set_language"), {"language": "", "next": "/account/"})
    alice.refresh_from_db()
    assert alice.language == ""
    assert "API tokens" in client.get(reverse("account"), HTTP_ACCEPT_LANGUAGE="en").content.decode()


def test_the_switcher_works_before_login_and_never_redirects_away(client):
    response = client.post(reverse("set_language"), {"language": "zh-hans", "next": "https://evil.example/"})
    assert response["Location"] == "/"
    assert "登录" in client.get(reverse("login")).content.decode()
    assert client.post(reverse("set_language"), {"language": "xx", "next": "/login/"})["Location"] == "/login/"
    assert client.get(reverse("set_language")).status_code == 405


def test_an_unknown_language_is_not_saved(client, alice):
    client.force_login(alice)
    client.post(reverse("set_language"), {"language": "fr", "next": "/"})
    alice.refresh_from_db()
    assert alice.language == ""


def test_form_errors_and_flash_messages_are_translated(client, admin):
    client.force_login(admin)
    client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    page = client.post(reverse("token_create"), {"name": "", "expires_in_days": ""})
    with translation.override("zh-hans"):
        required = str(forms.Field.default_error_messages["required"])
    assert page.status_code == 400 and required in page.content.decode() and "名称" in page.content.decode()
    page = client.post(reverse("token_create"), {"name": "ci", "expires_in_days": ""}, follow=True)
    assert "API 令牌“ci”已创建。请立即复制。" in page.content.decode()


def test_djangos_own_field_errors_read_as_natural_chinese(client, alice, lena):
    """Django's zh-Hans for a few of its own errors ends with an English full stop or keeps an
    English space ("确认总共不超过 14 个数字."); ours replace them (portal/django_messages.py)."""
    client.force_login(lena)
    client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    budget = {"target": "bogus", "window": "month", "amount": "1e20", "alert_percent": "150"}
    page = client.post("/usage/budgets/", budget).content.decode()
    for text in ("请选择一个有效的选项：bogus 不在可选项中。", "总共不能超过 14 位数字。", "该值不能大于 100。"):
        assert text in page, text
    budget.update(target=f"user:{alice.pk}", amount="-1", alert_percent="")
    assert "该值不能小于 0。" in client.post("/usage/budgets/", budget).content.decode()
    budget.update(amount="0.123456")
    assert "小数不能超过 4 位。" in client.post("/usage/budgets/", budget).content.decode()
    client.force_login(alice)
    page = client.post(reverse("key_create"), {"owner": alice.pk, "name": "x" * 101}).content.decode()
    assert "最多 100 个字符（当前 101 个）。" in page
    for bad in ("数字.", "。 ", "确保", "确认"):
        assert bad not in page, bad


def test_the_rest_api_answers_in_the_language_asked_for(client, admin):
    anonymous = client.get("/api/keys/", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert anonymous.status_code in (401, 403)
    assert anonymous.json()["detail"] == "身份认证信息未提供。"
    client.force_login(admin)
    refused = client.post(
        "/api/keys/", {"name": "x", "owner": 999999}, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-Hans"
    )
    assert refused.status_code == 400
    assert any("\u4e00" <= ch <= "\u9fff" for ch in str(refused.json())), refused.json()


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_each_language_is_offered_in_its_own_name(client, alice, language):
    """A reader who cannot read the current language still finds theirs: in the header's switcher
    and the account page's select, each language is named in itself, never translated."""
    client.force_login(alice)
    client.post(reverse("set_language"), {"language": language, "next": "/"})
    for page in (reverse("account"), reverse("login")):
        html = client.get(page).content.decode()
        options = re.findall(r'<option value="(en|zh-hans)" lang="[^"]*"[^>]*>([^<]*)</option>', html)
        assert options and set(options) == {("en", "English"), ("zh-hans", "简体中文")}, (page, options)


def test_every_audit_object_type_has_a_chinese_name():
    """The audit log's Object filter names each type by its model's verbose name: a model audited
    without a translated one (Django derives an English one from the class) is listed here."""
    from accounts.models import object_type_names

    with translation.override("zh-hans"):
        names = object_type_names()
    assert "aliastarget" in names and "user" in names
    untranslated = {t: n for t, n in names.items() if not re.search(r"[\u4e00-\u9fff]", n)}
    assert untranslated == {}, "Mark these in accounts.models.DERIVED_VERBOSE_NAMES and translate them"
