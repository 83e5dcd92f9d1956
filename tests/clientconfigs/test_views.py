"""Permissions and behaviour of the page and every REST endpoint: anonymous, alice (owner),
mallory (another developer) and admin (for themselves only)."""

from __future__ import annotations

import datetime
import re

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from clientconfigs.models import ConfigDownload, DownloadToken
from keys.models import Key
from keys.services import issue_key, rotate_key, verify_key

pytestmark = pytest.mark.django_db

API = "/api/client-configs"


@pytest.fixture
def api(alice):
    client = APIClient()
    client.force_authenticate(alice)
    return client


@pytest.fixture
def alice_key(alice, catalog):
    key, _ = issue_key(owner=alice, name="alice-main", allowed_models=[catalog["llama"]])
    return key


@pytest.fixture
def mallory_key(mallory, catalog):
    key, _ = issue_key(owner=mallory, name="mallory-main")
    return key


# --- anonymous ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("get", f"{API}/clients/"),
        ("get", f"{API}/clients/cline/"),
        ("get", f"{API}/clients/cline/files/"),
        ("post", f"{API}/clients/cline/mint/"),
        ("post", f"{API}/clients/cline/download-tokens/"),
    ],
)
def test_api_refuses_anonymous(method, url, db):
    response = getattr(APIClient(), method)(url)
    assert response.status_code in (401, 403)


def test_page_and_downloads_redirect_anonymous_to_login(db):
    for url in ("/connect/", "/connect/cline/files/0/"):
        response = Client().get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_installer_scripts_are_public_and_hold_no_secret(client, catalog):
    sh = client.get("/connect/install.sh")
    ps1 = client.get("/connect/install.ps1")
    assert sh.status_code == ps1.status_code == 200
    assert sh.content.decode().startswith("#!/bin/sh")
    assert "gp-" not in sh.content.decode() and "gdt-" not in sh.content.decode().replace("<download-token>", "")


# --- the owner -----------------------------------------------------------------------------------


def test_api_lists_every_client(api):
    slugs = {c["slug"] for c in api.get(f"{API}/clients/").json()}
    assert slugs == {
        *("cline", "continue", "cc-switch", "claude-code", "codex", "opencode", "roo"),
        *("qwen-code", "kilo", "aider", "crush", "zed", "llm", "goose"),
        *("copilot-cli", "pi", "factory-droid", "mistral-vibe", "openhands", "jetbrains"),
    }  # twenty
    assert api.get(f"{API}/clients/nope/").status_code == 404


def test_api_files_are_scoped_to_the_key_and_hold_no_key(api, alice_key):
    data = api.get(f"{API}/clients/continue/files/", {"key": alice_key.pk}).json()
    assert [m["name"] for m in data["models"]] == ["llama-3.1-8b"]
    assert all("gp-" not in f["content"] for f in data["files"])
    assert ConfigDownload.objects.filter(client="continue", key=alice_key, version=data["version"]).exists()


def test_api_mint_returns_a_working_key_once(api, alice):
    response = api.post(f"{API}/clients/claude-code/mint/", {"machine": "laptop"}, format="json")
    assert response.status_code == 201
    data = response.json()
    key = verify_key(data["key"]["plaintext"])
    assert key.owner == alice and key.name == "claude-code@laptop" and key.client == "claude-code"
    settings = next(f for f in data["files"] if f["name"] == "settings.json")
    assert data["key"]["plaintext"] in settings["content"] and settings["secret"]


def test_api_refuses_a_default_model_the_user_may_not_use_naming_the_ones_they_may(api, alice, catalog, alice_key):
    refused = ["“nope” is not a model you may use. You may use: llama-3.1-8b, qwen3-32b."]
    minted = api.post(f"{API}/clients/cline/mint/", {"model": "nope"}, format="json")
    assert minted.status_code == 400 and minted.json() == {"model": refused}
    assert not Key.objects.filter(client="cline").exists()
    token = api.post(f"{API}/clients/cline/download-tokens/", {"key_mode": "mint", "model": "nope"}, format="json")
    assert token.status_code == 400 and token.json() == {"model": refused}
    assert not DownloadToken.objects.exists()
    # Scoped to a key, only the key's models are offered.
    files = api.get(f"{API}/clients/cline/files/", {"key": alice_key.pk, "model": "qwen3-32b"})
    assert files.status_code == 400
    assert files.json() == {"model": ["“qwen3-32b” is not a model you may use. You may use: llama-3.1-8b."]}
    ok = api.post(f"{API}/clients/cline/mint/", {"model": "llama-3.1-8b"}, format="json")
    assert ok.status_code == 201


def test_api_download_token_then_bundle(api, alice, catalog):
    response = api.post(f"{API}/clients/codex/download-tokens/", {"key_mode": "placeholder"}, format="json")
    assert response.status_code == 201
    token = response.json()["token"]
    assert token in response.json()["install_sh"]
    bundle = APIClient().post(f"{API}/bundle/", {"token": token}, format="json")
    assert bundle.status_code == 200
    assert {f["path"] for f in bundle.json()["files"]} == {
        "~/.codex/config.toml",
        *(f"~/.codex/teamgw-{m}.config.toml" for m in ("qwen3-32b", "llama-3.1-8b")),
    }
    again = APIClient().post(f"{API}/bundle/", {"token": token}, format="json")
    assert again.status_code == 404


def test_bundle_rejects_bad_input_without_a_500(db):
    assert APIClient().post(f"{API}/bundle/", {}, format="json").status_code == 400
    assert APIClient().post(f"{API}/bundle/", {"token": "gdt-nope"}, format="json").status_code == 404


def test_api_validation_errors_are_field_errors(api):
    response = api.post(f"{API}/clients/cline/download-tokens/", {"key_mode": "steal"}, format="json")
    assert response.status_code == 400 and "key_mode" in response.json()


def test_page_shows_files_placeholder_and_the_hashed_key_notice(alice_client, catalog):
    response = alice_client.get("/connect/?client=codex")
    html = response.content.decode()
    assert response.status_code == 200
    assert "config.toml" in html and "model_providers.teamgw" in html
    assert "never show an existing key again" in html
    assert "--check codex" in html


def test_page_mints_a_key_and_shows_it_once(alice_client, alice, catalog):
    response = alice_client.post(
        "/connect/?client=continue", {"client": "continue", "key_mode": "mint", "machine": "laptop", "action": "mint"}
    )
    html = response.content.decode()
    key = Key.objects.get(owner=alice)
    assert key.name == "continue@laptop"
    plaintext = re.search(r"TEAM_GATEWAY_API_KEY=(gp-[A-Za-z0-9_-]+)", html).group(1)
    assert verify_key(plaintext) == key
    second = alice_client.get("/connect/?client=continue").content.decode()
    assert plaintext not in second


def test_page_issues_a_one_line_installer(alice_client, alice, catalog):
    response = alice_client.post(
        "/connect/?client=cline", {"client": "cline", "key_mode": "placeholder", "action": "installer"}
    )
    html = response.content.decode()
    assert "/connect/install.sh | sh -s -- gdt-" in html
    assert "-Token gdt-" in html
    assert DownloadToken.objects.filter(user=alice, client="cline").count() == 1


def test_the_installer_lines_are_introduced_in_the_readers_language(alice_client, catalog):
    body = {"client": "cline", "key_mode": "placeholder", "action": "installer"}
    html = alice_client.post("/connect/?client=cline", body, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "<p>Windows（PowerShell）：</p>" in html and "Windows (PowerShell):" not in html


def test_page_download_is_an_attachment(alice_client, catalog):
    response = alice_client.get("/connect/claude-code/files/0/")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="settings.json"'
    assert alice_client.get("/connect/claude-code/files/9/").status_code == 404
    assert alice_client.get("/connect/nope/files/0/").status_code == 404


def test_stale_banner_appears_after_an_admin_change(alice_client, catalog):
    alice_client.get("/connect/claude-code/files/0/")
    assert "out of date" not in alice_client.get("/connect/").content.decode()
    catalog["qwen"].routes.update(context_window=16384, discovered_context_window=None)
    assert "out of date" in alice_client.get("/connect/").content.decode()


# --- mallory and admin: someone else's key is a 404 everywhere -----------------------------------


def test_mallory_cannot_use_alices_key_anywhere(client, mallory, alice_key):
    client.force_login(mallory)
    assert client.get(f"/connect/?key={alice_key.pk}").status_code == 404
    assert client.get(f"/connect/cline/files/0/?key={alice_key.pk}").status_code == 404
    api = APIClient()
    api.force_authenticate(mallory)
    assert api.get(f"{API}/clients/cline/files/", {"key": alice_key.pk}).status_code == 404
    response = api.post(f"{API}/clients/cline/download-tokens/", {"key": alice_key.pk}, format="json")
    assert response.status_code == 404


def test_admin_only_sees_their_own_keys_here(admin_client, admin, alice_key):
    assert admin_client.get(f"/connect/?key={alice_key.pk}").status_code == 404
    api = APIClient()
    api.force_authenticate(admin)
    assert api.get(f"{API}/clients/cline/files/", {"key": alice_key.pk}).status_code == 404
    assert api.get(f"{API}/clients/cline/files/").status_code == 200


def test_mallory_does_not_see_alices_downloads_in_her_banner(client, mallory, alice, catalog):
    alice_client = Client()
    alice_client.force_login(alice)
    alice_client.get("/connect/cline/files/0/")
    catalog["llama"].routes.update(context_window=4096)
    client.force_login(mallory)
    assert "out of date" not in client.get("/connect/").content.decode()


def test_the_nav_links_to_the_page(alice_client, catalog):
    html = alice_client.get("/").content.decode()
    assert 'href="/connect/"' in html and "Connect your tools" in html


def test_page_warns_when_a_model_window_cannot_hold_the_clients_prompt(alice_client, catalog):
    page = alice_client.get("/connect/?client=opencode").content.decode()
    # llama-3.1-8b serves 8192 tokens; OpenCode sends about 7.7k of its own before the first word.
    assert 'id="window-warnings"' in page
    assert "llama-3.1-8b: its context window (8,192 tokens) is too small for OpenCode" in page
    assert 'id="window-warnings"' not in alice_client.get("/connect/?client=continue").content.decode()


def test_page_offers_to_replace_the_key_minted_before_and_does(alice_client, alice, catalog):
    first = alice_client.post(
        "/connect/?client=cline",
        {"client": "cline", "key_mode": "mint", "machine": "laptop", "action": "mint", "replace": "on"},
    )
    assert first.status_code == 200
    old = Key.objects.get(owner=alice, name="cline@laptop")
    page = alice_client.get("/connect/?client=cline").content.decode()
    assert "Replace the key for <code>cline@laptop</code>" in page
    alice_client.post(
        "/connect/?client=cline",
        {"client": "cline", "key_mode": "mint", "machine": "laptop", "action": "mint", "replace": "on"},
    )
    new = Key.objects.get(owner=alice, name="cline@laptop")
    old.refresh_from_db()
    assert new.pk != old.pk and new.rotated_from_id == old.pk and old.expires_at is not None
    # Unticked: another key beside it.
    alice_client.post(
        "/connect/?client=cline", {"client": "cline", "key_mode": "mint", "machine": "laptop", "action": "mint"}
    )
    assert Key.objects.filter(owner=alice, name="cline@laptop-2").exists()
    assert "minted for cline" in alice_client.get("/keys/").content.decode()


def test_the_key_choice_leaves_out_keys_that_stopped_working(alice_client, alice, catalog):
    """After reinstalls the rotated-away keys pile up: only the keys that still work are offered."""
    kept, _plaintext = issue_key(owner=alice, name="desk")
    stopped, _plaintext = issue_key(owner=alice, name="llm@laptop")
    replacement, _plaintext = rotate_key(stopped, grace=datetime.timedelta(minutes=10))
    Key.objects.filter(pk=stopped.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))  # grace over
    page = alice_client.get("/connect/?client=llm").content.decode()
    offered = re.findall(r'<option value="(\d+)"', page)
    assert str(kept.pk) in offered and str(replacement.pk) in offered
    assert str(stopped.pk) not in offered
    chosen = alice_client.get(f"/connect/?client=llm&key_mode=placeholder&key={stopped.pk}")
    assert chosen.status_code in (200, 400, 404)  # refused or ignored, never a 500


def test_page_shows_the_models_of_the_key_a_mint_replaces(alice_client, alice, catalog):
    """Regression (journey): minting over an earlier download, the new key takes over the old one's
    models (and budgets), and the installer writes only those; the page showed every model, and its
    default model, picked among them, could be one the new key may not use."""
    from clientconfigs.services import mint_key

    old, _plaintext = mint_key(alice, "cline", "laptop")
    old.allowed_models.set([catalog["llama"]])
    page = alice_client.get("/connect/?client=cline").content.decode()
    assert "Replace the key for <code>cline@laptop</code>" in page
    assert "llama-3.1-8b" in page and "qwen3-32b" not in page
    # Unticked, the new key is a key of its own: every model the owner may use.
    mint = {"client": "cline", "key_mode": "mint", "machine": "laptop", "model": "qwen3-32b"}
    assert "qwen3-32b" in alice_client.get("/connect/", mint).content.decode()
    # Another machine replaces nothing.
    assert "qwen3-32b" in alice_client.get("/connect/", {**mint, "machine": "desk", "replace": "on"}).content.decode()


def test_page_says_why_a_default_model_the_key_may_not_use_gets_no_installer(alice_client, alice, alice_key):
    """Regression (journey): the default model is picked among the models shown; choosing a key
    that may not use it gave the page again with no installer and no word why."""
    answer = alice_client.post(
        "/connect/?client=continue",
        {
            "client": "continue",
            "key_mode": "placeholder",
            "key": alice_key.pk,
            "model": "qwen3-32b",
            "action": "installer",
        },
    )
    page = answer.content.decode()
    assert 'id="install-sh"' not in page and not DownloadToken.objects.exists()
    assert "The chosen key may not use qwen3-32b: pick one of the models it may use." in page


def test_the_client_tabs_keep_the_key_chosen_for_a_placeholder(alice_client, alice_key):
    """Regression (journey): each tab went back to every model the developer may use."""
    page = alice_client.get("/connect/", {"client": "cline", "key_mode": "placeholder", "key": alice_key.pk})
    tabs = re.findall(r'<a href="(\?client=[^"]*)"', page.content.decode())
    assert f"?client=continue&amp;key_mode=placeholder&amp;key={alice_key.pk}" in tabs
    page = alice_client.get("/connect/", {"client": "cline"}).content.decode()
    assert '<a href="?client=continue"' in page  # minting: nothing to keep


def test_minting_shows_the_models_the_new_key_gets_not_those_of_the_key_picked(alice_client, alice, alice_key):
    """Regression: in mint mode the key picked under "Models of key" (a placeholder's choice) still
    scoped the page: it listed that key's models instead of those of the key the installer mints,
    and refused a default model the new key may use."""
    answer = alice_client.post(
        "/connect/?client=continue",
        {
            "client": "continue",
            "key_mode": "mint",
            "key": alice_key.pk,
            "machine": "laptop",
            "model": "qwen3-32b",
            "action": "installer",
        },
    )
    page = answer.content.decode()
    assert 'id="install-sh"' in page and DownloadToken.objects.filter(user=alice, client="continue").exists()
    assert "<code>qwen3-32b</code>" in page and "<code>llama-3.1-8b</code>" in page
    # A placeholder is scoped by the key picked.
    page = alice_client.get("/connect/", {"client": "continue", "key_mode": "placeholder", "key": alice_key.pk})
    assert "<code>qwen3-32b</code>" not in page.content.decode()
