"""A real browser: the admin logs in, creates a developer and a key for them, and sees the key
exactly once (a reload shows only its prefix and last four)."""

from __future__ import annotations

import re

import pytest

from keys.models import Key
from keys.services import verify_key
from tests.browser.robot import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_creates_a_developer_and_a_key_that_is_shown_once(live_server, browser, admin, screenshots):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)

    page.goto(live_server.url + "/")
    assert "/login/" in page.url
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin-pass-123")
    page.click("main button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    page.screenshot(path=f"{screenshots}/dashboard.png", full_page=True)

    # A new developer; the generated password is shown once.
    page.click("nav >> text=Users")
    page.click("text=New user")
    page.fill("#id_username", "dana")
    page.select_option("#id_role", "developer")
    page.click("button:has-text('Create user')")
    assert page.locator(".flash-success").inner_text().startswith("User dana created")
    password = page.locator("#new-password").inner_text().strip()
    assert len(password) >= 12

    # A key for them, from their page.
    page.click("text=Create a key for dana")
    assert page.locator("#id_owner").input_value() == str(admin._meta.model.objects.get(username="dana").pk)
    page.fill("#id_name", "laptop")
    page.click("button:has-text('Create key')")
    secret = page.locator("#new-key")
    plaintext = secret.inner_text().strip()
    assert re.fullmatch(r"gp-[A-Za-z0-9_-]{40,}", plaintext)
    assert page.locator(".secret-once").get_by_text("will not be shown again").is_visible()
    page.screenshot(path=f"{screenshots}/key_shown_once.png", full_page=True)

    page.click("button.copy")
    page.wait_for_selector("button.copy:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == plaintext

    # Switching the language reloads the page, which would lose the key: it asks first, and a
    # "no" keeps the key on the screen.
    asked: list[str] = []

    def answer(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", answer)
    page.click("form.language-switch button[type=submit]")
    assert asked and "shows a secret only once" in asked[0]
    assert page.locator("#new-key").inner_text().strip() == plaintext

    key = verify_key(plaintext)
    assert key is not None and key.owner.username == "dana" and key.name == "laptop"

    # Reload: gone for good; only prefix…last four remain.
    page.reload()
    assert page.locator("#new-key").count() == 0
    html = page.content()
    assert plaintext not in html
    assert f"{key.prefix}…{key.last_four}" in html
    page.screenshot(path=f"{screenshots}/key_after_reload.png", full_page=True)

    # The developer logs in with the shown password and sees the key, masked, under My keys.
    dev = browser.new_context().new_page()
    dev.goto(live_server.url + "/login/")
    dev.fill("#id_username", "dana")
    dev.fill("#id_password", password)
    dev.click("main button[type=submit]")
    dev.wait_for_url(live_server.url + "/")
    dev.click("nav >> text=My keys")
    row = dev.locator("table tbody tr").first
    assert "laptop" in row.inner_text() and key.masked in row.inner_text()
    assert "Users" not in dev.locator("header nav").inner_text()
    assert Key.objects.count() == 1
    context.close()


def test_htmx_posts_carry_the_csrf_token(live_server, browser, alice):
    """portal.js adds X-CSRFToken to htmx requests; without it Django would answer 403."""
    from keys.services import issue_key

    key, _ = issue_key(owner=alice, name="laptop")
    page = browser.new_context().new_page()
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "alice-pass-123")
    page.click("main button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    wait_until(page, "window.htmx !== undefined")
    status = page.evaluate(
        """url => new Promise(resolve => {
            document.body.addEventListener('htmx:afterRequest', e => resolve(e.detail.xhr.status), {once: true});
            htmx.ajax('POST', url, {target: 'main', swap: 'none'});
        })""",
        f"/keys/{key.pk}/revoke/",
    )
    assert status == 200  # the redirect after revoking, followed by the browser
    key.refresh_from_db()
    assert key.revoked_at is not None
