"""A developer's first visit to Connect, in a real browser on a phone-sized screen: the page fits
390 px, the installer with a freshly minted key is the default, "Copy" works where the async
clipboard API does not exist (plain http on a LAN address), the copied line run in a throwaway HOME
writes files that work (the official openai SDK, configured only from them, streams an answer
through the gateway), and "download again" replaces the key instead of adding one."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import openai
import pytest
import yaml

from keys.models import Key
from keys.services import verify_key
from tests.clientconfigs.test_end_to_end import portal  # noqa: F401 - the fixture: portal + gateway + upstream
from tests.services import require_binary

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}

# What a browser offers on http://192.168.x.y: no navigator.clipboard, not a secure context.
PLAIN_HTTP_LAN = """
Object.defineProperty(window, "isSecureContext", {get: () => false});
Object.defineProperty(Navigator.prototype, "clipboard", {get: () => undefined});
"""


def overflow(page) -> int:
    """How many CSS pixels the page is wider than the screen (0: no horizontal scrolling)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def copy_install_line(context, page) -> str:
    page.click("#installer button.copy[data-copy-target=install-sh]")
    page.wait_for_selector("#installer button.copy:has-text('Copied')")
    reader = context.new_page()  # a page with the real clipboard API reads what the fallback wrote
    try:
        reader.goto(page.url.split("/connect/")[0] + "/favicon.ico")
        return reader.evaluate("navigator.clipboard.readText()")
    finally:
        reader.close()


def run_pasted(line: str, home: Path) -> subprocess.CompletedProcess:
    require_binary("curl", "apt-get install curl")
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=120, env=env)


def test_developer_connects_continue_from_a_phone_with_the_default_installer(
    portal,  # noqa: F811
    browser,
    alice,
    tmp_path,
    screenshots,
):
    url, _ = portal
    context = browser.new_context(viewport=PHONE)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=url)
    page = context.new_page()
    page.add_init_script(PLAIN_HTTP_LAN)
    page.set_default_timeout(20_000)
    started = time.monotonic()

    page.goto(url + "/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("main button[type=submit]")
    page.wait_for_url(url + "/")
    clicks = 0
    page.click("header label.nav-toggle-label")  # a phone: the navigation is behind its menu button
    clicks += 1
    page.click("header nav >> text=Connect your tools")
    clicks += 1
    page.click("nav.client-tabs >> text=Continue")  # Cline is the default client; Continue is one more click
    clicks += 1
    page.wait_for_url(re.compile(r".*client=continue"))
    assert page.evaluate("navigator.clipboard") is None  # the simulation holds on this page
    assert overflow(page) <= 0, f"the Connect page is {overflow(page)} px wider than a 390 px phone"
    # Minting is the default mode; the installer is the first button.
    assert page.locator("input[name=key_mode][value=mint]").is_checked()
    assert page.locator("#connect-form .actions button").first.inner_text() == "Get a one-line installer"

    page.click("#get-installer")
    clicks += 1
    page.wait_for_selector("#install-sh")
    assert overflow(page) <= 0, f"with the installer shown the page is {overflow(page)} px too wide"
    page.screenshot(path=f"{screenshots}/connect_phone.png", full_page=True)
    line = copy_install_line(context, page)
    clicks += 1
    assert clicks == 5  # Menu, Connect, the client, the installer, Copy: then one pasted line
    assert line == page.locator("#install-sh").inner_text().strip()
    assert re.fullmatch(r"curl -fsSL http://127\.0\.0\.1:\d+/connect/install\.sh \| sh -s -- gdt-\S+", line)

    home = tmp_path / "home"
    home.mkdir()
    result = run_pasted(line, home)
    assert result.returncode == 0, result.stdout + result.stderr
    seconds = time.monotonic() - started
    assert re.findall(r"gp-[A-Za-z0-9_-]{30,}", result.stdout + result.stderr) == []  # the key is never printed

    # The files work as written: the official SDK, configured only from them, streams an answer.
    config = yaml.safe_load((home / ".continue" / "config.yaml").read_text())
    entry = config["models"][0]
    secret = re.fullmatch(r"\$\{\{ secrets\.(\w+) \}\}", entry["apiKey"]).group(1)
    env = dict(ln.split("=", 1) for ln in (home / ".continue" / ".env").read_text().splitlines() if "=" in ln)
    first_key = verify_key(env[secret])
    assert first_key is not None and first_key.name == "continue@laptop"
    sdk = openai.OpenAI(base_url=entry["apiBase"], api_key=env[secret], max_retries=0)
    stream = sdk.chat.completions.create(
        model=entry["model"], messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "tok0 tok1 tok2 tok3 tok4"

    # Download again: the page offers to replace continue@laptop, and the new install replaces it.
    page.goto(url + "/connect/?client=continue")
    replace = page.locator("label.replace-key")
    assert "continue@laptop" in replace.inner_text() and page.locator("input[name=replace]").is_checked()
    page.click("#get-installer")
    page.wait_for_selector("#install-sh")
    again = run_pasted(copy_install_line(context, page), home)
    assert again.returncode == 0, again.stdout + again.stderr
    text = (home / ".continue" / "config.yaml").read_text()
    assert [m["model"] for m in yaml.safe_load(text)["models"]] == ["qwen3-32b"]  # one entry, not two
    env = dict(ln.split("=", 1) for ln in (home / ".continue" / ".env").read_text().splitlines() if "=" in ln)
    second_key = verify_key(env[secret])
    assert second_key is not None and second_key.pk != first_key.pk and second_key.name == "continue@laptop"
    first_key.refresh_from_db()
    assert first_key.expires_at is not None  # runs out its grace period, then stops
    assert Key.objects.active().filter(owner=alice, name="continue@laptop").count() == 1
    doctor = run_pasted(page.locator("#doctor-sh").inner_text().strip(), home)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    print(f"developer login → working install: {seconds:.1f} s (robot), login + {clicks} clicks + 1 pasted line")
    context.close()
