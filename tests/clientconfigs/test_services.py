"""The model list a key may use, the limits written for each model, and the staleness stamp."""

from __future__ import annotations

import datetime

import pytest
from django.core.exceptions import ValidationError
from django.db.models import F
from django.utils import timezone

from channels.models import ModelRoute
from clientconfigs import services
from clientconfigs.models import DownloadToken, KeyMode
from keys.models import Key
from keys.services import issue_key, verify_key

pytestmark = pytest.mark.django_db
GW = "https://llm.example.com"


def names(specs):
    return [s.name for s in specs]


def test_only_enabled_models_with_a_live_route_are_listed(alice, catalog):
    assert names(services.model_specs(alice)) == ["llama-3.1-8b", "qwen3-32b"]


def test_context_window_is_the_smallest_real_one_across_channels(alice, catalog):
    qwen = next(s for s in services.model_specs(alice) if s.name == "qwen3-32b")
    # gpu-a discovered 32768 (configured 40960), gpu-b configured 65536: clients get 32768.
    assert qwen.context_window == 32768
    assert qwen.max_output_tokens == 8192


def test_output_limit_leaves_room_for_input(alice, catalog):
    llama = next(s for s in services.model_specs(alice) if s.name == "llama-3.1-8b")
    # route says max output 8192 in an 8192 window: Continue would warn; keep a quarter for input.
    assert llama.context_window == 8192
    assert llama.max_output_tokens == 6144
    assert llama.context_window - llama.max_output_tokens >= 1000


def test_an_embedding_model_is_offered_apart_and_can_be_no_default(alice, catalog):
    """The chat list (every client's model list, default and windows) leaves an embedding model out;
    render_input carries it apart, and marking a model so is a new config version."""
    before = services.render_input(alice, gateway=GW).version
    catalog["llama"].kind = "embedding"
    catalog["llama"].save()
    chat, embedding = services.specs_by_kind(alice)
    assert names(chat) == names(services.model_specs(alice)) == ["qwen3-32b"]
    assert [(s.name, s.context_window, s.max_output_tokens) for s in embedding] == [("llama-3.1-8b", 8192, None)]
    inp = services.render_input(alice, gateway=GW)
    assert names(inp.models) == ["qwen3-32b"] and names(inp.embedding_models) == ["llama-3.1-8b"]
    assert inp.version != before
    with pytest.raises(ValidationError) as refused:
        services.check_default_model(alice, "llama-3.1-8b")
    assert "You may use: qwen3-32b." in str(refused.value)


def test_output_limit_when_the_server_gives_none_uses_the_gateway_default(settings):
    settings.GATEWAY_DEFAULT_MAX_TOKENS = 4096
    assert services.output_room(131072, None) == 4096
    assert services.output_room(4096, None) == 2048
    assert services.output_room(None, None) is None


def test_key_scope_is_the_intersection_of_owner_and_key_allow_lists(alice, catalog):
    alice.allowed_models.set([catalog["qwen"], catalog["llama"]])
    key, _ = issue_key(owner=alice, name="k", allowed_models=[catalog["llama"], catalog["hidden"]])
    assert names(services.model_specs(alice, key)) == ["llama-3.1-8b"]
    alice.allowed_models.set([catalog["qwen"]])
    assert names(services.model_specs(alice, key)) == []


def test_version_changes_when_an_admin_changes_limits_models_or_the_url(alice, catalog):
    before = services.version_of(GW, services.model_specs(alice))
    assert services.version_of(GW, services.model_specs(alice)) == before
    assert services.version_of("https://other.example.com", services.model_specs(alice)) != before
    ModelRoute.objects.filter(model=catalog["llama"]).update(context_window=16384)
    assert services.version_of(GW, services.model_specs(alice)) != before


def test_stale_banner_lists_clients_whose_download_is_out_of_date(alice, catalog):
    inp = services.render_input(alice, gateway=GW)
    services.record_download(alice, "cline", inp.version, None, via="page")
    assert services.stale_downloads(alice, GW) == []
    catalog["llama"].enabled = False
    catalog["llama"].save()
    stale = services.stale_downloads(alice, GW)
    assert [s["client"] for s in stale] == ["cline"]
    assert stale[0]["downloaded"] == inp.version


def test_minted_keys_are_named_per_client_and_machine_and_scoped_like_the_default(alice, catalog):
    alice.key_defaults = {"tokens_per_day": 5000}
    alice.allowed_models.set([catalog["qwen"]])
    key, plaintext = services.mint_key(alice, "cline", "laptop")
    again, _ = services.mint_key(alice, "cline", "laptop", replace=False)
    assert (key.name, again.name) == ("cline@laptop", "cline@laptop-2")
    assert key.client == "cline" and key.tokens_per_day == 5000
    assert not key.allowed_models.exists()  # empty: the owner's models, narrowed when the owner's are
    assert [s.name for s in services.model_specs(alice, key)] == ["qwen3-32b"]
    assert verify_key(plaintext) == key
    assert plaintext not in str(Key.objects.filter(pk=key.pk).values().first())


def test_machines_named_in_chinese_get_keys_of_their_own(alice, catalog):
    office, _ = services.mint_key(alice, "cline", "办公室")
    home, _ = services.mint_key(alice, "cline", "家里")
    laptop, _ = services.mint_key(alice, "cline", "笔记本 laptop")
    assert (office.name, home.name, laptop.name) == ("cline@办公室", "cline@家里", "cline@笔记本-laptop")
    office.refresh_from_db()
    assert office.is_active and office.expires_at is None  # not replaced by the other machine's download
    assert services.mint_key(alice, "cline", "办公室")[0].rotated_from == office  # its own download is


def test_machines_whose_names_lose_characters_still_get_keys_of_their_own(alice, catalog):
    names = ["🏠", "💻", "a🏠", "a💻", "x" * 40 + "1", "x" * 40 + "2"]
    keys = [services.mint_key(alice, "cline", name)[0] for name in names]
    assert len({k.name for k in keys}) == len(names)
    assert all(k.is_active and k.expires_at is None for k in Key.objects.filter(pk__in=[k.pk for k in keys]))
    assert services.key_label("cline", "🏠") == services.key_label("cline", " 🏠 ")  # stable per machine


def test_download_token_is_single_use(alice, catalog):
    _, token = services.issue_download_token(alice, "codex", key_mode=KeyMode.PLACEHOLDER)
    first = services.redeem_download_token(token, gateway=GW)
    assert first is not None and first["client"] == "codex"
    assert services.redeem_download_token(token, gateway=GW) is None


def test_download_token_expires(alice, catalog):
    row, token = services.issue_download_token(alice, "codex", key_mode=KeyMode.PLACEHOLDER)
    DownloadToken.objects.filter(pk=row.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert services.redeem_download_token(token, gateway=GW) is None
    assert DownloadToken.objects.get(pk=row.pk).used_at is None


def test_download_token_is_stored_hashed_and_mints_the_key_on_redemption(alice, catalog):
    row, token = services.issue_download_token(alice, "continue", key_mode=KeyMode.MINT, key_name="desk")
    assert token not in str(DownloadToken.objects.filter(pk=row.pk).values().first())
    assert not Key.objects.filter(owner=alice).exists()
    bundle = services.redeem_download_token(token, gateway=GW)
    key = Key.objects.get(owner=alice)
    assert key.name == "continue@desk" and bundle["key"]["name"] == "continue@desk"
    env = next(f for f in bundle["files"] if f["name"] == ".env")
    plaintext = env["content"].strip().splitlines()[-1].split("=", 1)[1]
    assert verify_key(plaintext) == key
    assert env["secret"] is True


def test_a_token_for_someone_elses_key_is_refused(alice, mallory, catalog):
    key, _ = issue_key(owner=mallory, name="m")
    with pytest.raises(ValueError):
        services.issue_download_token(alice, "cline", key_mode=KeyMode.PLACEHOLDER, key=key)


def test_garbage_tokens_are_refused(db):
    for value in ("", "nope", "gdt-" + "x" * 200, "gdt-unknown"):
        assert services.redeem_download_token(value, gateway=GW) is None


def test_gateway_url_prefers_the_public_url(settings, rf):
    settings.PORTAL_PUBLIC_URL = "https://portal.example.com"
    assert services.gateway_url(rf.get("/")) == "https://portal.example.com"
    settings.PORTAL_PUBLIC_URL = ""
    # Unset: the address the server listens on, never the Host header (it can be forged).
    request = rf.get("/", HTTP_HOST="evil.example", SERVER_NAME="gw.internal", SERVER_PORT="8000")
    assert services.gateway_url(request) == "http://gw.internal:8000"
    request = rf.get("/", HTTP_HOST="evil.example", SERVER_NAME="0.0.0.0", SERVER_PORT="8000")
    assert services.gateway_url(request) == "http://127.0.0.1:8000"


@pytest.mark.django_db(transaction=True)
def test_two_installers_racing_with_one_token_get_one_bundle(alice, catalog):
    """The conditional update is the lock: on PostgreSQL both redemptions really run at once."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from tests.services import require_postgres

    require_postgres()
    _, token = services.issue_download_token(alice, "cline", key_mode=KeyMode.MINT, key_name="race")

    def redeem(_):
        try:
            return services.redeem_download_token(token, gateway=GW)
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(redeem, range(4)))
    assert sum(r is not None for r in results) == 1
    assert Key.objects.filter(owner=alice, name__startswith="cline@race").count() == 1


def test_a_deactivated_developers_token_gives_nothing(alice, catalog):
    _, token = services.issue_download_token(alice, "cline", key_mode=KeyMode.MINT)
    alice.is_active = False
    alice.save()
    assert services.redeem_download_token(token, gateway=GW) is None
    assert not Key.objects.filter(owner=alice).exists()


def test_downloading_again_replaces_the_key_minted_before_for_that_client_and_machine(alice, catalog):
    first, first_plain = services.mint_key(alice, "cline", "laptop")
    first.requests_per_minute = 30  # set by an admin: the replacement keeps it
    first.save()
    other, _ = services.mint_key(alice, "codex", "laptop")
    before = timezone.now()
    for _ in range(5):  # "download again", five times
        latest, latest_plain = services.mint_key(alice, "cline", "laptop")
    # One key carries the name; the replaced ones only run out their grace period.
    assert list(Key.objects.active().filter(owner=alice, name="cline@laptop")) == [latest]
    assert latest.name == "cline@laptop" and latest.requests_per_minute == 30
    assert verify_key(latest_plain) == latest
    first.refresh_from_db()
    assert first.name.startswith("cline@laptop (rotated") and first.expires_at is not None
    assert before + services.REPLACE_GRACE - datetime.timedelta(minutes=1) < first.expires_at
    replaced = Key.objects.filter(owner=alice, client="cline").exclude(pk=latest.pk)
    assert all(k.expires_at is not None and k.expires_at <= timezone.now() + services.REPLACE_GRACE for k in replaced)
    # After the grace period (moved into the past rather than waited for) only the newest key works.
    replaced.update(expires_at=F("expires_at") - services.REPLACE_GRACE - datetime.timedelta(seconds=1))
    assert list(Key.objects.active().filter(owner=alice, client="cline")) == [latest]
    assert verify_key(first_plain) is None
    other.refresh_from_db()
    assert other.is_active and other.name == "codex@laptop"  # another client's key is never touched


def test_a_mint_mode_installer_replaces_the_previous_key(alice, catalog):
    for _ in range(3):
        _, token = services.issue_download_token(alice, "opencode", key_mode=KeyMode.MINT, key_name="desk")
        bundle = services.redeem_download_token(token, gateway=GW)
    assert bundle["key"]["name"] == "opencode@desk"
    assert Key.objects.filter(owner=alice, client="opencode", name="opencode@desk").count() == 1
    _, token = services.issue_download_token(
        alice, "opencode", key_mode=KeyMode.MINT, key_name="desk", replace_key=False
    )
    assert services.redeem_download_token(token, gateway=GW)["key"]["name"] == "opencode@desk-2"


# --- aliases and local-only keys (issue 15) --------------------------------------------------


@pytest.fixture
def coder(catalog):
    """`coder` -> llama-3.1-8b (local gpu-a, 8,192) then cloud-only `cloud-big` (131,072)."""
    from channels.models import Channel, Model
    from channels.services import save_alias

    Channel.objects.filter(pk=catalog["a"].pk).update(locality="local")
    cloud = Channel.objects.create(name="cloud", base_url="https://api.example.com/v1", locality="external")
    big = Model.objects.create(name="cloud-big")
    ModelRoute.objects.create(model=big, channel=cloud, context_window=131_072, max_output_tokens=32_768)
    return save_alias(name="coder", targets=["llama-3.1-8b", "cloud-big"])


def test_an_alias_is_listed_like_any_model_with_the_largest_window_it_serves(alice, coder):
    specs = {s.name: s for s in services.model_specs(alice)}
    assert specs["coder"].context_window == 131_072 and specs["coder"].max_output_tokens == 32_768
    rendered = services.render("continue", services.render_input(alice, gateway=GW))
    text = "".join(f.content for f in rendered.files)
    assert "coder" in text and "131072" in text


def test_a_local_only_key_is_given_the_local_windows_only(alice, coder):
    key, _ = issue_key(owner=alice, name="private", local_only=True)
    specs = {s.name: s for s in services.model_specs(alice, key)}
    # cloud-big has no local route; qwen3-32b's channel gpu-b is external, gpu-a (32,768) local
    assert sorted(specs) == ["coder", "llama-3.1-8b", "qwen3-32b"]
    assert specs["coder"].context_window == 8192
    assert specs["qwen3-32b"].context_window == 32768


def test_a_local_only_model_is_offered_by_its_local_channels_only(alice, coder, catalog):
    """The gateway sends a local-only model's requests to local channels only, whoever's key: the
    configs neither offer one served only externally (it would be refused, 403 local_only) nor count
    an external window for one served by both, directly or behind an alias."""
    from channels.models import Channel, Model

    Model.objects.filter(name="cloud-big").update(local_only=True)
    assert "cloud-big" not in names(services.model_specs(alice))
    assert {s.name: s for s in services.model_specs(alice)}["coder"].context_window == 8192
    cloud = Channel.objects.get(name="cloud")
    ModelRoute.objects.create(model=Model.objects.get(name="llama-3.1-8b"), channel=cloud, context_window=65_536)
    Model.objects.filter(name="llama-3.1-8b").update(local_only=True)
    assert {s.name: s for s in services.model_specs(alice)}["llama-3.1-8b"].context_window == 8192
    Model.objects.filter(name="llama-3.1-8b").update(local_only=False)
    assert {s.name: s for s in services.model_specs(alice)}["llama-3.1-8b"].context_window == 8192  # the smallest


def test_a_local_only_alias_counts_only_local_windows(alice, coder):
    from channels.services import save_alias

    save_alias(alias=coder, name="coder", targets=["llama-3.1-8b", "cloud-big"], local_only=True)
    assert {s.name: s for s in services.model_specs(alice)}["coder"].context_window == 8192
    save_alias(alias=coder, name="coder", targets=["cloud-big"], local_only=True)
    assert "coder" not in names(services.model_specs(alice))
