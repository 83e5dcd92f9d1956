"""Playwright driving Debian's chromium (never `playwright install`)."""

from __future__ import annotations

import os

import pytest

from tests.hosts.conftest import ssh_target  # noqa: F401  (the real sshd, for journeys that add a GPU host)

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
def browser(monkeypatch, shared_chromium):
    """The worker's chromium (tests/conftest.py's `shared_chromium`), for one test. A test opens its
    own contexts (`browser.new_context()`: cookies and storage of their own, as in a new browser)
    and every one is closed after it, so nothing a test did reaches the next."""
    # Playwright's sync API keeps an event loop on this thread, so Django would refuse the ORM
    # calls the test makes between page actions; they are plain sync calls, so allow them here.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    browser = shared_chromium.lend()
    try:
        yield browser
    finally:
        shared_chromium.give_back()


@pytest.fixture
def screenshots(tmp_path):
    """Where page screenshots go: $PORTAL_SCREENSHOTS if set (to look at them), else a temp folder."""
    folder = os.environ.get("PORTAL_SCREENSHOTS") or str(tmp_path)
    os.makedirs(folder, exist_ok=True)
    return folder
