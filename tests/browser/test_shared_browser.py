"""The worker's one chromium (tests/conftest.py's `shared_chromium`): what a test leaves in it is
gone for the next, and between browser tests the thread is a plain one again (the ORM and asyncio
work as in any other test)."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db]


def test_the_next_test_gets_no_cookie_storage_or_page_of_the_last(shared_chromium, live_server, monkeypatch, admin):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # as `browser` does while it is lent
    browser = shared_chromium.lend()
    try:
        page = browser.new_context().new_page()
        page.goto(live_server.url + "/login/")
        page.evaluate("localStorage.setItem('left', 'behind'); sessionStorage.setItem('left', 'behind')")
        page.context.add_cookies([{"name": "left", "value": "behind", "url": live_server.url}])
        assert page.evaluate("localStorage.getItem('left')") == "behind"
    finally:
        shared_chromium.give_back()
    monkeypatch.delenv("DJANGO_ALLOW_ASYNC_UNSAFE")

    # Between two browser tests: no running loop on the thread, so Django's ORM and asyncio.run
    # behave as in a test that never saw a browser.
    assert asyncio._get_running_loop() is None
    assert asyncio.run(asyncio.sleep(0, result="ran")) == "ran"
    assert type(admin).objects.filter(username="admin").exists()

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    browser = shared_chromium.lend()
    try:
        assert browser.contexts == []  # every context of the last test was closed
        page = browser.new_context().new_page()
        page.goto(live_server.url + "/login/")
        assert "left" not in {c["name"] for c in page.context.cookies()}
        assert page.evaluate("[localStorage.getItem('left'), sessionStorage.getItem('left')]") == [None, None]
    finally:
        shared_chromium.give_back()
