"""The installer and the doctor print in the developer's language (issue 30): the Connect page puts
`?lang=` on the installer's URL, the portal renders install.sh / install.ps1 with its message table
for that language, and install.py prints each message it knows translated."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation import gettext

from clientconfigs.installer import messages, ps1_script, sh_script

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
