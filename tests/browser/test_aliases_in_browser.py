"""A real browser: the admin adds the alias `coder` (local model first, cloud model second) by
clicking, sees a field error for a missing target first, then the targets in order on its page."""

from __future__ import annotations

import pytest

from channels.models import Channel, Model, ModelRoute
from tests.browser.robot import Robot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_admin_adds_an_alias_by_clicking(live_server, browser, admin, screenshots):
    local = Channel.objects.create(name="local-llama", kind="llamacpp", base_url="http://10.0.0.5:8080/v1")
    cloud = Channel.objects.create(name="cloud", kind="openai", base_url="https://api.example.com/v1")
    for name, ch, window in (("qwen3-coder", local, 24_576), ("qwen3-coder-plus", cloud, 131_072)):
        ModelRoute.objects.create(model=Model.objects.create(name=name), channel=ch, context_window=window)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    robot = Robot(page, live_server.url)
    robot.goto("/")
    robot.log_in("admin", "admin-pass-123")

    robot.click("nav >> text=Models")
    robot.click("text=Aliases")
    robot.click("text=Add alias")
    robot.fill("#id_name", "coder")
    robot.click("button:has-text('Add alias')")
    assert "Choose at least one target model." in robot.text("main")  # a field error, nothing saved
    assert not Model.objects.filter(name="coder").exists()

    page.select_option("#id_target_0", "qwen3-coder")
    page.select_option("#id_target_1", "qwen3-coder-plus")
    robot.click("button:has-text('Add alias')")
    assert robot.text(".flash-success") == "Alias coder added."
    table = robot.text("table")
    assert table.index("qwen3-coder") < table.index("qwen3-coder-plus")
    assert "131072" in robot.text("dl.props").replace(",", "")
    page.screenshot(path=f"{screenshots}/alias_detail.png", full_page=True)
    assert Model.objects.get(name="coder").target_names == ["qwen3-coder", "qwen3-coder-plus"]
    assert not robot.axe_violations()
