"""A developer whose key has a budget connects their tools while one model has no price: the
gateway refuses that model to a budgeted key (`model_not_priced`), so the Connect page must not
offer it in any client's files, and the one-line installer, run for real into a throwaway HOME,
must not write it either; the models it writes answer."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml

from channels.models import Channel, Model, ModelRoute
from channels.services import set_route_price
from clientconfigs import clients, services
from keys.models import Budget
from keys.services import verify_key
from tests.browser.robot import Robot
from tests.browser.test_connect_in_browser import run_pasted
from tests.clientconfigs.test_end_to_end import (
    from_cline,
    portal,  # noqa: F401 - the fixture: portal + gateway + upstream
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SHORT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@pytest.fixture
def unpriced(portal, settings):  # noqa: F811
    """qwen3-32b has a price; free-llm, on the same channel, has none (and unpriced routes are refused)."""
    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    channel = Channel.objects.get(name="gpu")
    set_route_price(ModelRoute.objects.get(model__name="qwen3-32b"), input="1", output="2")
    free = Model.objects.create(name="free-llm")
    ModelRoute.objects.create(
        model=free, channel=channel, upstream_model="fake-model", context_window=8192, max_output_tokens=2048
    )
    return portal


def shown(robot: Robot) -> str:
    """Everything a client's section of the Connect page offers: its files, commands and models."""
    parts = robot.page.locator("main pre, main table").all_inner_texts()
    return "\n".join(parts)


def ask(url: str, plaintext: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={**SHORT, "model": model},
        headers={"Authorization": f"Bearer {plaintext}"},
        timeout=60,
    )


def test_a_budgeted_developer_is_offered_only_the_models_their_key_may_use(unpriced, browser, alice, tmp_path):
    url, _upstream = unpriced
    key, plaintext = services.mint_key(alice, "cline", "laptop")  # an earlier download from Connect
    Budget.objects.create(key=key, window="month", amount=Decimal("5"), set_by_admin=True)
    assert ask(url, plaintext, "free-llm").json()["error"]["code"] == "model_not_priced"

    robot = Robot(browser.new_context().new_page(), url)
    robot.goto("/login/")
    robot.log_in("alice", "alice-pass-123")
    robot.click("header a[href='/connect/']")

    # Cline, minting: the page offers to replace cline@laptop, whose replacement takes over its
    # budget, so what it shows is what the budgeted key may use (regression: every model, the
    # unpriced one first as the default).
    assert "cline@laptop" in robot.text("label.replace-key")
    assert "qwen3-32b" in shown(robot) and "free-llm" not in shown(robot)
    assert robot.page.locator("#id_model option").all_inner_texts() == ["qwen3-32b"]
    robot.click("#get-installer")
    robot.page.wait_for_selector("#install-sh")
    assert "free-llm" not in shown(robot)
    home = tmp_path / "cline"
    home.mkdir()
    result = run_pasted(robot.text("#install-sh").strip(), home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert written(home) and not any("free-llm" in text for text in written(home).values())
    cline = from_cline(home)
    assert cline["model"] == "qwen3-32b"
    replacement = verify_key(cline["api_key"])
    assert replacement is not None and replacement.rotated_from_id == key.pk and replacement.budgets.exists()
    refused = ask(url, cline["api_key"], "free-llm")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_priced"
    assert ask(url, cline["api_key"], "qwen3-32b").status_code == 200
    # The key it replaced works on for its grace period, under the budget that moved (regression: with none).
    assert ask(url, plaintext, "free-llm").json()["error"]["code"] == "model_not_priced"
    assert ask(url, plaintext, "qwen3-32b").status_code == 200

    # Every client, with a placeholder scoped like the budgeted key: no file, command or table
    # names the unpriced model. The key chosen once stays chosen from tab to tab (regression: each
    # tab went back to every model the developer may use).
    robot.click("nav.client-tabs a[href='?client=cline']")  # the key the installer minted is offered now
    robot.page.select_option("#id_key", str(replacement.pk))
    robot.click("#connect-form button[name=key_mode][value=placeholder]")
    robot.page.wait_for_url(re.compile(r".*key_mode=placeholder.*"))
    assert "csrfmiddlewaretoken" not in robot.page.url  # a GET of the POST form: no token in the URL
    for slug, module in clients.CLIENTS.items():
        robot.click(f"nav.client-tabs a[href='?client={slug}'], nav.client-tabs a[href^='?client={slug}&']")
        robot.page.wait_for_url(re.compile(rf".*client={slug}\b.*"))
        assert robot.page.input_value("#id_key") == str(replacement.pk), module.LABEL
        assert robot.page.locator("input[name=key_mode][value=placeholder]").is_checked(), module.LABEL
        assert "free-llm" not in shown(robot), module.LABEL
        assert "qwen3-32b" in shown(robot), module.LABEL

    # Its installer, run for real (Continue, placeholder mode), writes only the payable model. The
    # developer looks at all their models, picks the unpriced one as the default, then chooses the
    # budgeted key: the page says why no installer comes (regression: it showed the form again with
    # no word), offers only that key's models, and the second click gets the installer.
    robot.click("nav.client-tabs a[href^='?client=continue']")
    robot.page.select_option("#id_key", value="")
    robot.click("#connect-form button[name=key_mode][value=placeholder]")
    robot.page.select_option("#id_model", "free-llm")  # a key without a budget may use it
    robot.page.select_option("#id_key", str(replacement.pk))
    robot.click("#get-installer")
    assert robot.text("#id_model_error") == "The chosen key may not use free-llm: pick one of the models it may use."
    assert robot.page.locator("#id_model option").all_inner_texts() == ["qwen3-32b"]
    robot.click("#get-installer")
    robot.page.wait_for_selector("#install-sh")
    home = tmp_path / "continue"
    home.mkdir()
    result = run_pasted(robot.text("#install-sh").strip(), home)
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((home / ".continue" / "config.yaml").read_text())
    assert [m["model"] for m in config["models"]] == ["qwen3-32b"]
    assert not any("free-llm" in text for text in written(home).values())
    assert robot.console_errors == []


def written(home: Path) -> dict[str, str]:
    """Every file the installer wrote under `home` (not its backups), by path."""
    return {
        str(p.relative_to(home)): p.read_text(errors="replace")
        for p in home.rglob("*")
        if p.is_file() and ".bak-" not in p.name
    }
