"""The channel form in a browser: a base URL the form refuses says why once, next to the field."""

from __future__ import annotations

import pytest

from channels.models import Channel
from tests.browser.robot import Robot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Counts the htmx requests a page starts and ends (an init script runs before the page's own, and
# the CSP does not govern it), so a test can wait until the page has made all it will.
COUNT_HTMX = """
window.htmxStarted = 0; window.htmxEnded = 0;
document.addEventListener('htmx:beforeRequest', () => window.htmxStarted++);
document.addEventListener('htmx:afterRequest', () => window.htmxEnded++);
"""


def test_a_refused_base_url_says_why_once(live_server, browser, admin):
    context = browser.new_context()
    context.add_init_script(COUNT_HTMX)
    robot = Robot(context.new_page(), live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")
    robot.click("nav >> text=Channels")
    robot.click("text=Add channel")
    robot.fill("#id_name", "cloud")
    robot.fill("#id_base_url", "ftp://api.example.com/v1")
    robot.click("button:has-text('Add channel')")
    # htmx starts the requests of a page's `load` triggers while the page loads: once it has
    # loaded and they have ended, the page shows all it will.
    wait_until(robot.page, "document.readyState === 'complete' && window.htmxStarted === window.htmxEnded")
    errors = [e.inner_text() for e in robot.page.locator("main .field-error").all()]
    assert errors == ["Only http:// and https:// URLs are supported."]
    assert robot.page.locator("#id_base_url_error").count() == 1  # the one next to the field
    assert not Channel.objects.exists()

    # Typing shows the verdict on the new address as before.
    robot.fill("#id_base_url", "https://api.example.com/v1/chat/completions")
    robot.page.wait_for_selector("#base-url-preview >> text=https://api.example.com/v1")
