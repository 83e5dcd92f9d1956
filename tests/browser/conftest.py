"""Playwright driving Debian's chromium (never `playwright install`)."""

from __future__ import annotations

import os

import pytest

from tests.hosts.conftest import ssh_target  # noqa: F401  (the real sshd, for journeys that add a GPU host)
from tests.services import require_binary

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser(monkeypatch):
    path = require_binary("chromium", "apt-get install chromium (CI's .ci/run does)")
    # Playwright's sync API keeps an event loop on this thread, so Django would refuse the ORM
    # calls the test makes between page actions; they are plain sync calls, so allow them here.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def screenshots(tmp_path):
    """Where page screenshots go: $PORTAL_SCREENSHOTS if set (to look at them), else a temp folder."""
    folder = os.environ.get("PORTAL_SCREENSHOTS") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    return folder
