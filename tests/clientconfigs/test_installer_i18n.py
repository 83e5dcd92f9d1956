"""The installer and the doctor print in the developer's language (issue 30): the Connect page puts
`?lang=` on the installer's URL, the portal renders install.sh / install.ps1 with its message table
for that language, and install.py prints each message it knows translated."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation import gettext

from clientconfigs import services
from clientconfigs.installer import install as inst
from clientconfigs.installer import messages, ps1_script, sh_script
from clientconfigs.models import KeyMode

from .test_installer import fetch, run_sh

INSTALLER = Path(messages.__file__).resolve().parent
CJK = re.compile(r"[\u4e00-\u9fff]")


def fragments(template: str) -> list[str]:
    return [p for p in re.split(r"\{\w+\}", template) if p.strip(" :.()")]


@pytest.mark.parametrize("template", messages.TEMPLATES)
def test_every_template_is_a_message_the_scripts_print(template):
    """A template whose wording drifted from the scripts would silently stay in English."""
    source = (INSTALLER / "install.py").read_text() + (INSTALLER / "install.ps1").read_text()
    flat = re.sub(r'"\s*\n\s*f?"', "", source)  # Python's implicitly joined string literals
    assert all(part in flat for part in fragments(template)), fragments(template)


def run_translate(table: dict[str, str], *texts: str) -> list[str]:
    code = "import sys, install; print('\\n'.join(install.translate(t) for t in sys.argv[1:]))"
    env = {**os.environ, "TEAM_GATEWAY_MESSAGES": json.dumps(table), "PYTHONPATH": str(INSTALLER)}
    done = subprocess.run([sys.executable, "-c", code, *texts], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_install_py_prints_a_known_message_from_the_table_with_its_values_and_others_as_they_are():
    table = {
        "model {name}: reachable": "模型 {name}：可访问",
        "model {name}: reachable, context window {real} agrees with the server": "模型 {name}：窗口 {real} 一致",
        "key valid": "密钥有效",
    }
    out = run_translate(
        table,
        "model qwen3-32b: reachable",
        "model a:b: reachable, context window 32768 agrees with the server",
        "key valid",
        "something else",
    )
    assert out == ["模型 qwen3-32b：可访问", "模型 a:b：窗口 32768 一致", "密钥有效", "something else"]


def test_english_scripts_carry_an_empty_table_and_the_powershell_one_its_table_too():
    assert "TEAM_GATEWAY_MESSAGES='{}'" in sh_script("http://p", "http://g", "en")
    with translation.override("zh-hans"):
        expected = {t: gettext(t) for t in messages.TEMPLATES if gettext(t) != t}
    ps1 = ps1_script("http://p", "http://g", "zh-hans")
    assert "__MESSAGES__" not in ps1
    assert json.dumps(expected, ensure_ascii=False, separators=(",", ":")).replace("'", "''") in ps1


def test_a_zh_hans_users_connect_page_points_at_a_chinese_installer(alice, client):
    alice.language = "zh-hans"
    alice.save(update_fields=["language"])
    client.force_login(alice)
    page = client.get("/connect/?client=pi").content.decode()
    assert "/connect/install.sh?lang=zh-hans | sh -s -- --check pi" in page


@pytest.mark.django_db(transaction=True)
def test_a_zh_hans_users_doctor_prints_chinese(live_server, home):
    """The doctor with no installed file: its messages come out in Chinese, the file names as they are."""
    script = fetch(live_server.url + "/connect/install.sh?lang=zh-hans")
    done = run_sh(script, home, "--check", "pi")
    assert done.returncode == 1
    with translation.override("zh-hans"):
        not_found = gettext("{file}: not found (run the installer first)")
        no_key = gettext("no key found in the files or in TEAM_GATEWAY_API_KEY")
    lines = done.stdout.splitlines()
    assert lines == ["✗ " + not_found.format(file="~/.pi/agent/models.json"), "✗ " + no_key]
    assert all(CJK.search(line) for line in lines), lines  # translated in locale/zh_Hans


@pytest.mark.django_db(transaction=True)
def test_a_zh_hans_installer_run_again_says_in_chinese_that_its_token_is_spent(
    live_server, settings, home, alice, catalog
):
    """Running the copied command a second time is the usual mistake: the refusal is the developer's
    language, one line, without the portal's raw JSON; an unreachable portal is a sentence too."""
    settings.PORTAL_PUBLIC_URL = live_server.url
    _, token = services.issue_download_token(alice, "opencode", key_mode=KeyMode.PLACEHOLDER)
    script = fetch(live_server.url + "/connect/install.sh?lang=zh-hans")
    assert run_sh(script, home, token).returncode == 0
    again = run_sh(script, home, token)
    assert again.returncode == 1
    with translation.override("zh-hans"):
        refused = gettext(
            "the portal refused the download token: download tokens work once and for 10 minutes; get a new "
            "command from the portal."
        )
    assert again.stderr.splitlines() == ["✗ " + refused], again.stderr
    assert CJK.search(refused)
    gone = run_sh(script.replace(live_server.url, "http://127.0.0.1:9"), home, token)
    assert gone.returncode == 1 and "Traceback" not in gone.stderr, gone.stderr
    assert gone.stderr.startswith("✗ ") and CJK.search(gone.stderr), gone.stderr


def test_a_zh_hans_users_uninstall_and_usage_print_chinese(home):
    """The uninstaller with nothing installed, an unknown client and the shell's own usage text."""
    script = sh_script("http://p.example", "http://g.example", "zh-hans")
    nothing = run_sh(script, home, "--uninstall", "claude-code", "--yes")
    assert nothing.stdout.splitlines() == ["· 本机没有为这些客户端安装团队网关的任何内容：claude-code"], nothing.stdout
    unknown = run_sh(script, home, "--uninstall", "nope")
    assert unknown.returncode == 2 and unknown.stderr.startswith("未知的客户端 'nope'；可选：all、"), unknown.stderr
    usage = run_sh(script, home)
    assert usage.returncode == 2 and usage.stderr.startswith("用法：sh install.sh <下载令牌>"), usage.stderr
    assert all(CJK.search(line) for line in usage.stderr.splitlines()), usage.stderr


# --- every message the scripts print has a template of its own ----------------------------------

VALUE = "\x00"  # stands for an interpolated value in the messages read out of the scripts
WORD = re.compile(r"(?<![\w./:@…\x00-])[A-Za-z]{2,}(?![\w./:@…\x00-])")


def _values(node: ast.expr) -> list[str]:
    """What one interpolated value can be: VALUE, or words of ours (`{', '.join(x) or 'none'}`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "translate":
        return [VALUE]  # translated on its own (checked as a message of its own)
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        return [VALUE, *(v for n in node.values[1:] for v in _shapes(n))]
    if isinstance(node, ast.IfExp):
        return (_shapes(node.body) or [VALUE]) + (_shapes(node.orelse) or [VALUE])
    return [VALUE]


def _shapes(node: ast.expr) -> list[str]:
    """The texts an expression can print, each value as VALUE; [] when it is not text we wrote."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        texts = [""]
        for v in node.values:
            parts = [v.value] if isinstance(v, ast.Constant) else _values(v.value)  # type: ignore[attr-defined]
            texts = [t + p for t in texts for p in parts]
        return texts
    if isinstance(node, ast.IfExp):
        return _shapes(node.body) + _shapes(node.orelse)
    return []


def python_messages() -> list[tuple[int, str]]:
    """What install.py prints through say(), confirm() and translate(), with its line."""
    tree = ast.parse((INSTALLER / "install.py").read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in ("say", "confirm", "translate"):
                found += [(node.lineno, text) for text in _shapes(node.args[-1])]
    return found


def powershell_messages() -> list[tuple[int, str]]:
    """What install.ps1 prints translated: `Write-Host "<symbol> …"` and `Convert-TeamText "…"`."""
    found = []
    for number, line in enumerate((INSTALLER / "install.ps1").read_text().splitlines(), 1):
        for m in re.finditer(r'Write-Host "(?:\+|x|\.|!|->) ((?:[^"`]|`.)*)"|Convert-TeamText "((?:[^"`]|`.)*)"', line):
            text = m.group(1) if m.group(1) is not None else m.group(2)
            found.append((number, re.sub(r"\$\((?:[^()]|\([^()]*\))*\)|\$\{\w+\}|\$\w+(?:\.\w+)*", VALUE, text)))
    return found


def untranslated_parts(texts: list[tuple[int, str]], monkeypatch) -> list[str]:
    """Each text the zh-Hans table leaves English: no template matches, or the one that does (the
    most specific, as the scripts pick) takes words of ours as a value (`{path}` swallowing
    "X: deleted" in "{path} (backup: {backup})")."""
    monkeypatch.setenv("TEAM_GATEWAY_MESSAGES", json.dumps(messages.table("zh-hans")))
    patterns = inst.message_patterns()
    left = []
    for line, text in texts:
        if not WORD.search(text.replace(VALUE, " ")):
            continue  # only values (a path)
        match = next((m for regex, _ in patterns if (m := regex.match(text))), None)
        if match is None or any(WORD.search(value) for value in match.groupdict().values()):
            left.append(f"line {line}: {text.replace(VALUE, '{…}')!r}")
    return left


def test_every_message_install_py_prints_has_a_template(monkeypatch):
    left = untranslated_parts(python_messages(), monkeypatch)
    assert left == [], "Add these to clientconfigs/installer/messages.py and translate them:\n" + "\n".join(left)


def test_every_message_install_ps1_prints_translated_has_a_template(monkeypatch):
    left = untranslated_parts(powershell_messages(), monkeypatch)
    assert left == [], "Add these to clientconfigs/installer/messages.py and translate them:\n" + "\n".join(left)
