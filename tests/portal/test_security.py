"""Security hardening (issue 18): login lockout and unlock, credentials ending on a password reset
or deactivation, hosts and public URLs, trusted proxies in the throttles, HTTPS headers, and bad
input that used to be a 500."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from accounts.models import AuditLog
from accounts.services import issue_token, verify_token
from keys.services import issue_key

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def login(client: Client, username: str, password: str, ip: str = "198.51.100.7"):
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=ip)


# --- brute force ----------------------------------------------------------------------------


@pytest.fixture
def still_clock(monkeypatch):
    """The clock stands still: a slowed-down login waits 1 s after the last failure, and a loaded
    machine can take longer than that between two requests of a test."""
    from django.utils import timezone

    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    return now


def test_wrong_passwords_lock_the_username_until_an_admin_unlocks_it(settings, alice, admin_client, still_clock):
    client = Client()
    codes = [login(client, "alice", "wrong").status_code for _ in range(settings.AXES_FAILURE_LIMIT)]
    assert codes == [200] * (settings.AXES_FAILURE_LIMIT - 1) + [429]  # the form again, then the lockout
    # Locked from that address: even the right password is refused now; from another one the
    # username is slowed down (accounts.services.login_delay), not locked.
    locked = login(client, "alice", "alice-pass-123")
    assert locked.status_code == 429 and b"Too many failed logins" in locked.content
    slowed = login(client, "alice", "alice-pass-123", ip="203.0.113.50")
    assert slowed.status_code == 429 and b"Try again in" in slowed.content
    assert "_auth_user_id" not in client.session
    entry = AuditLog.objects.get(object_type="user", object_id=str(alice.pk), message__startswith="login locked out")
    assert "198.51.100.7" in entry.message and "wrong" not in entry.message

    # The admin sees it on alice's page and unlocks her after a confirmation.
    page = admin_client.get(reverse("user_detail", args=[alice.pk])).content.decode()
    assert "Login locked" in page and reverse("user_unlock", args=[alice.pk]) in page
    assert b"Let alice try to log in again now?" in admin_client.get(reverse("user_unlock", args=[alice.pk])).content
    admin_client.post(reverse("user_unlock", args=[alice.pk]))
    assert AuditLog.objects.filter(object_id=str(alice.pk), message__startswith="login unlocked").exists()
    assert "Login locked" not in admin_client.get(reverse("user_detail", args=[alice.pk])).content.decode()

    response = login(client, "alice", "alice-pass-123")
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(alice.pk)


def test_the_admin_logs_in_from_a_trusted_address_after_50_failures_from_elsewhere(settings, admin, monkeypatch):
    from django.utils import timezone

    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)  # the clock stands still during the attack
    attacker = [login(Client(), "admin", f"guess-{i}", ip=f"203.0.113.{i + 1}") for i in range(50)]
    codes = [r.status_code for r in attacker]
    # The first failures are counted; every later attempt waits for the delay, unchecked.
    assert codes == [200] * settings.AXES_FAILURE_LIMIT + [429] * (50 - settings.AXES_FAILURE_LIMIT)

    # From loopback (PORTAL_LOGIN_TRUSTED_ADDRESSES) at once.
    trusted = Client()
    response = login(trusted, "admin", "admin-pass-123", ip="127.0.0.1")
    assert response.status_code == 302 and trusted.session["_auth_user_id"] == str(admin.pk)

    # From elsewhere: slowed down, never locked. Once the delay has passed, the right password works.
    elsewhere = Client()
    slowed = login(elsewhere, "admin", "admin-pass-123", ip="198.51.100.20")
    assert slowed.status_code == 429 and b"Try again in" in slowed.content
    assert 1 <= int(slowed["Retry-After"]) <= settings.PORTAL_LOGIN_MAX_DELAY_SECONDS
    later = now + timedelta(seconds=settings.PORTAL_LOGIN_MAX_DELAY_SECONDS + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert login(elsewhere, "admin", "admin-pass-123", ip="198.51.100.20").status_code == 302


def test_the_recovery_command_lets_the_admin_in_from_anywhere_at_once(settings, admin, still_clock):
    from django.core.management import call_command

    for i in range(20):
        login(Client(), "admin", "wrong", ip=f"203.0.113.{i + 1}")
    assert login(Client(), "admin", "admin-pass-123", ip="198.51.100.30").status_code == 429
    call_command("axes_reset_username", "admin")
    assert login(Client(), "admin", "admin-pass-123", ip="198.51.100.30").status_code == 302


def test_failed_api_token_authentications_are_throttled_per_address(settings, alice):
    from rest_framework.throttling import SimpleRateThrottle

    _token, good = issue_token(user=alice, name="ci")
    allowed, _ = SimpleRateThrottle.parse_rate(None, settings.PORTAL_API_FAILED_AUTH_RATE)
    bad = APIClient(REMOTE_ADDR="203.0.113.77")
    bad.credentials(HTTP_AUTHORIZATION="Token gpt-" + "x" * 43)
    codes = [bad.get("/api/me/").status_code for _ in range(allowed + 5)]
    assert codes == [401] * allowed + [429] * 5
    refused = bad.get("/api/me/")
    assert refused.status_code == 429 and int(refused["Retry-After"]) >= 1
    # Another address is not affected, and a good token from it works.
    other = APIClient(REMOTE_ADDR="198.51.100.77")
    other.credentials(HTTP_AUTHORIZATION="Token gpt-" + "y" * 43)
    assert other.get("/api/me/").status_code == 401
    other.credentials(HTTP_AUTHORIZATION=f"Token {good}")
    assert other.get("/api/me/").status_code == 200


def test_one_address_trying_many_usernames_is_slowed_down(settings, alice, mallory, monkeypatch, still_clock):
    from django.utils import timezone

    now = still_clock  # the clock stands still during the attack
    client = Client()
    for i in range(settings.PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT + 1):
        login(client, f"guess{i}", "wrong", ip="192.0.2.66")
    slowed = login(client, "mallory", "mallory-pass-123", ip="192.0.2.66")
    assert slowed.status_code == 429 and b"from your network address" in slowed.content
    assert 1 <= int(slowed["Retry-After"]) <= settings.PORTAL_LOGIN_MAX_DELAY_SECONDS
    # Another address is not affected; once the delay has passed, this one logs in again.
    assert login(Client(), "alice", "alice-pass-123", ip="192.0.2.67").status_code == 302
    later = now + timedelta(seconds=settings.PORTAL_LOGIN_MAX_DELAY_SECONDS + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert login(client, "mallory", "mallory-pass-123", ip="192.0.2.66").status_code == 302


def test_one_persons_typos_do_not_lock_the_admin_out_behind_the_same_address(settings, alice, admin):
    """Regression (probe): an office behind one NAT address; alice's wrong passwords locked the
    address, so the admin's right password was refused, and unlocking the admin did not help."""
    for _ in range(settings.AXES_FAILURE_LIMIT + 2):
        login(Client(), "alice", "wrong", ip="192.0.2.80")
    assert login(Client(), "alice", "alice-pass-123", ip="192.0.2.80").status_code == 429  # alice is locked
    office = Client()
    response = login(office, "admin", "admin-pass-123", ip="192.0.2.80")
    assert response.status_code == 302 and office.session["_auth_user_id"] == str(admin.pk)


def test_an_admin_unlocks_a_username_through_the_api(settings, alice, admin):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "alice", "wrong")
    api = APIClient()
    api.force_authenticate(admin)
    response = api.post(f"/api/users/{alice.pk}/unlock/")
    assert response.status_code == 200 and response.json()["cleared"] >= 1
    assert login(Client(), "alice", "alice-pass-123").status_code == 302


def test_api_tokens_are_not_affected_by_login_lockout(settings, alice):
    """Token auth does not authenticate a password: a locked username's scripts keep working."""
    _token, plaintext = issue_token(user=alice, name="ci")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(Client(), "alice", "wrong")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert api.get("/api/me/").status_code == 200


# --- credentials end with a password reset or a deactivation ------------------------------------


def test_a_password_reset_revokes_tokens_and_ends_sessions(admin, alice):
    _token, plaintext = issue_token(user=alice, name="ci")
    browser = Client()
    assert login(browser, "alice", "alice-pass-123").status_code == 302
    assert browser.get(reverse("account")).status_code == 200

    api = APIClient()
    api.force_authenticate(admin)
    assert api.post(f"/api/users/{alice.pk}/reset-password/").status_code == 200

    assert verify_token(plaintext) is None
    script = APIClient()
    script.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
    assert script.get("/api/me/").status_code == 401
    assert browser.get(reverse("account")).status_code == 302  # back to the login page
    assert not [s for s in Session.objects.all() if s.get_decoded().get("_auth_user_id") == str(alice.pk)]
    entry = AuditLog.objects.filter(object_id=str(alice.pk), message__startswith="password reset").get()
    assert "1 session(s) ended, 1 API token(s) revoked" in entry.message


def change_password(browser: Client, *, revoke: bool):
    data = {
        "old_password": "alice-pass-123",
        "new_password1": "n3w-Pass-phrase-26",
        "new_password2": "n3w-Pass-phrase-26",
    }
    if revoke:
        data["revoke_access"] = "on"
    return browser.post(reverse("password_change"), data, REMOTE_ADDR="198.51.100.7")


@pytest.mark.parametrize("revoke", [True, False], ids=["revoke", "keep"])
def test_changing_ones_password_offers_to_revoke_tokens_and_other_sessions(alice, revoke):
    _token, plaintext = issue_token(user=alice, name="ci")
    here, elsewhere = Client(), Client()
    assert login(here, "alice", "alice-pass-123").status_code == 302
    assert login(elsewhere, "alice", "alice-pass-123", ip="203.0.113.8").status_code == 302
    form = here.get(reverse("password_change")).content.decode()
    assert 'name="revoke_access"' in form and "checked" in form.split('name="revoke_access"')[1].split(">")[0]

    response = change_password(here, revoke=revoke)
    assert response.status_code == 302
    assert here.get(reverse("account")).status_code == 200  # this session stays
    assert (verify_token(plaintext) is None) is revoke
    entry = AuditLog.objects.filter(object_id=str(alice.pk), message__startswith="password changed").get()
    if revoke:
        assert "1 session(s) ended, 1 API token(s) revoked" in entry.message
        assert elsewhere.get(reverse("account")).status_code == 302
    else:
        assert "API tokens and sessions kept" in entry.message
        script = APIClient()
        script.credentials(HTTP_AUTHORIZATION=f"Token {plaintext}")
        assert script.get("/api/me/").status_code == 200


def test_an_admin_resetting_a_password_on_the_page_may_keep_the_users_tokens(admin_client, alice):
    _token, plaintext = issue_token(user=alice, name="ci")
    url = reverse("user_reset_password", args=[alice.pk])
    page = admin_client.get(url).content.decode()
    assert 'name="revoke_access" checked' in page  # offered, ticked
    assert admin_client.post(url, {"revoke_access_offered": "1"}).status_code == 302  # unticked
    assert verify_token(plaintext) is not None
    kept = AuditLog.objects.filter(object_id=str(alice.pk), message__startswith="password reset").get()
    assert "API tokens and sessions kept" in kept.message
    assert admin_client.post(url, {"revoke_access_offered": "1", "revoke_access": "on"}).status_code == 302
    assert verify_token(plaintext) is None
    assert AuditLog.objects.filter(object_id=str(alice.pk), message__contains="1 API token(s) revoked").exists()


def test_the_api_reset_may_keep_the_users_tokens(admin, alice):
    _token, plaintext = issue_token(user=alice, name="ci")
    api = APIClient()
    api.force_authenticate(admin)
    kept = api.post(f"/api/users/{alice.pk}/reset-password/", {"revoke_access": False}, format="json")
    assert kept.status_code == 200 and kept.json()["password"]
    assert verify_token(plaintext) is not None
    assert api.post(f"/api/users/{alice.pk}/reset-password/", {}, format="json").status_code == 200  # default
    assert verify_token(plaintext) is None
    messages = list(
        AuditLog.objects.filter(object_id=str(alice.pk), message__startswith="password reset").values_list(
            "message", flat=True
        )
    )
    assert sorted("kept" in m for m in messages) == [False, True]


def test_deactivation_revokes_tokens_and_reactivation_does_not_bring_them_back(admin, alice):
    _token, plaintext = issue_token(user=alice, name="ci")
    key, _key_plaintext = issue_key(owner=alice, name="laptop")
    api = APIClient()
    api.force_authenticate(admin)
    api.post(f"/api/users/{alice.pk}/deactivate/")
    assert verify_token(plaintext) is None
    assert api.post(f"/api/users/{alice.pk}/reactivate/", {"restore_keys": False}, format="json").status_code == 200
    alice.refresh_from_db()
    key.refresh_from_db()
    assert alice.is_active and verify_token(plaintext) is None and key.revoked_at is not None


# --- hosts and the URLs the portal writes ---------------------------------------------------------


def test_a_forged_host_is_refused_and_never_reaches_an_installer(settings, client):
    settings.PORTAL_PUBLIC_URL = ""
    assert client.get(reverse("connect_install_sh"), HTTP_HOST="evil.example").status_code == 400
    # Even where an operator allows any host, the installer names the listening address.
    settings.ALLOWED_HOSTS = ["*"]
    body = client.get(reverse("connect_install_sh"), HTTP_HOST="evil.example", SERVER_NAME="0.0.0.0").content
    assert b"evil.example" not in body and b"PORTAL='http://127.0.0.1" in body
    settings.PORTAL_PUBLIC_URL = "https://llm.example.com"
    body = client.get(reverse("connect_install_sh"), HTTP_HOST="evil.example").content
    assert b"evil.example" not in body and b"PORTAL='https://llm.example.com'" in body


def settings_in_a_process(tmp_path, **env) -> dict:
    probe = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "from django.test import Client; "
        "r = Client().get('/login/', secure=True, HTTP_HOST='llm.example.com'); "
        "print(json.dumps({'hosts': s.ALLOWED_HOSTS, 'status': r.status_code, 'headers': dict(r.headers), "
        "'cookies': {k: dict(v) for k, v in r.cookies.items()}}))"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_", "DJANGO_"))}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_https_public_url_turns_on_secure_cookies_hsts_and_the_headers(tmp_path):
    seen = settings_in_a_process(tmp_path, PORTAL_PUBLIC_URL="https://llm.example.com")
    assert seen["status"] == 200
    assert seen["hosts"] == ["llm.example.com", "localhost", "127.0.0.1", "[::1]"]
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["strict-transport-security"].startswith("max-age=31536000")
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin"
    assert headers["x-frame-options"] == "DENY"
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert seen["cookies"]["csrftoken"]["secure"] is True


@pytest.mark.slow
def test_plain_http_keeps_cookies_usable_without_tls(tmp_path):
    seen = settings_in_a_process(tmp_path, PORTAL_PUBLIC_URL="http://llm.example.com")
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert "strict-transport-security" not in headers
    assert not seen["cookies"]["csrftoken"]["secure"]
    assert "content-security-policy" in headers


# --- throttles: per token, per address, and the address is not the client's to choose ------------


def test_forged_x_forwarded_for_does_not_escape_the_download_token_throttle(db):
    api = APIClient()
    codes = [
        api.post(
            "/api/client-configs/bundle/",
            {"token": "gdt-nope"},
            format="json",
            REMOTE_ADDR="198.51.100.9",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{i}",
        ).status_code
        for i in range(40)
    ]
    assert codes[0] == 404 and codes[-1] == 429


def test_the_api_is_throttled_per_token(monkeypatch, alice):
    from portal.api.throttling import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "rate", "5/minute", raising=False)
    _t1, first = issue_token(user=alice, name="one")
    _t2, second = issue_token(user=alice, name="two")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {first}")
    codes = [api.get("/api/me/").status_code for _ in range(6)]
    assert codes == [200] * 5 + [429]
    api.credentials(HTTP_AUTHORIZATION=f"Token {second}")
    assert api.get("/api/me/").status_code == 200  # its own budget


# --- bad input is a 400 --------------------------------------------------------------------------


DEEP = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/client-configs/bundle/"),
        ("post", "/api/keys/"),
        ("patch", "/api/users/{alice}/"),
        ("post", "/api/fit-estimate/"),
    ],
)
def test_deeply_nested_json_is_a_400(admin, alice, method, path):
    api = APIClient()
    api.force_authenticate(admin)
    response = api.generic(method.upper(), path.format(alice=alice.pk), DEEP, content_type="application/json")
    assert response.status_code == 400 and "nested deeper than" in response.json()["detail"]
    url, body = path.format(alice=alice.pk), DEEP
    chinese = api.generic(method.upper(), url, body, content_type="application/json", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert chinese.status_code == 400 and "嵌套超过" in chinese.json()["detail"], chinese.content


def test_a_body_over_the_size_limit_is_refused(settings, admin):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    api = APIClient()
    api.force_authenticate(admin)
    response = api.post("/api/keys/", {"name": "x" * 2000}, format="json")
    assert response.status_code == 413, response.content  # (was Django's HTML "Bad Request (400)")
    assert response.json() == {"detail": "The request body is larger than 1000 bytes."}
    chinese = api.post("/api/keys/", {"name": "x" * 2000}, format="json", HTTP_ACCEPT_LANGUAGE="zh-Hans")
    assert chinese.status_code == 413
    assert chinese.json() == {"detail": "请求体超过 1000 字节。"}


@pytest.mark.parametrize("path", ["/api/audit-log/?created_after={t}", "/api/usage/records/?since={t}"])
def test_a_utc_offset_postgresql_refuses_is_converted(admin, path):
    api = APIClient()
    api.force_authenticate(admin)
    response = api.get(path.format(t="2026-01-01T00:00:00%2B20:00"))
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/audit-log/?created_before={t}", "created_before"),
        ("/api/usage/records/?until={t}", "until"),
        ("/api/request-logs/?since={t}", "since"),
    ],
)
@pytest.mark.parametrize("t", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00%2B01:00"])
def test_an_instant_past_the_years_python_holds_is_a_field_error(admin, path, field, t):
    """Regression (probe): converted to UTC, these fall in year 10000 or year 0: an OverflowError, a 500."""
    api = APIClient()
    api.force_authenticate(admin)
    response = api.get(path.format(t=t))
    assert response.status_code == 400, response.content
    assert field in response.json()


def test_the_audit_log_page_takes_the_same_offsets(admin_client):
    response = admin_client.get(reverse("audit_log"), {"created_after": "2026-01-01T00:00:00+23:30"})
    assert response.status_code == 200


def test_confirm_host_key_with_a_list_body_is_a_400(admin):
    from hosts.models import Host

    host = Host.objects.create(name="gpu-1", address="10.0.0.5", username="ubuntu")
    api = APIClient()
    api.force_authenticate(admin)
    response = api.post(f"/api/hosts/{host.pk}/confirm-host-key/", [1, 2], format="json")
    assert response.status_code == 400


def test_a_nul_character_in_a_lookup_is_a_400_not_a_database_error(admin):
    api = APIClient()
    api.force_authenticate(admin)
    response = api.post("/api/users/", {"username": "nul", "allowed_models": ["a\x00b"]}, format="json")
    assert response.status_code == 400


# --- developers see model and key, not the channel; the CSV says its charset ------------------


def test_developers_usage_hides_the_channel(alice, admin):
    from channels.models import Channel
    from gateway.usage import write_batch
    from tests.keys.test_usage import event

    channel = Channel.objects.create(name="secret-route", kind="vllm", base_url="http://10.0.0.5:8000/v1")
    key, _ = issue_key(owner=alice, name="laptop")
    write_batch([event(key, channel_id=channel.pk)])
    mine = APIClient()
    mine.force_authenticate(alice)
    row = mine.get("/api/usage/records/").json()["results"][0]
    assert row["model"] and row["key_name"] == "laptop"
    assert row["channel"] is None and row["channel_name"] is None
    assert mine.get("/api/usage/summary/?group_by=channel").status_code == 400
    everyone = APIClient()
    everyone.force_authenticate(admin)
    assert everyone.get("/api/usage/records/").json()["results"][0]["channel_name"] == "secret-route"


def test_the_usage_csv_says_it_is_utf8(admin_client):
    response = admin_client.get(reverse("usage_admin"), {"format": "csv"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"


# --- a secret this process cannot decrypt flags its own row ------------------------------------


@pytest.fixture
def lost_key(settings):
    """Rows written with a key, then a process that no longer has it."""
    from cryptography.fernet import Fernet

    from portal import secrets

    old = Fernet.generate_key().decode()
    settings.PORTAL_ENCRYPTION_KEYS = [old]
    secrets.reset_cache()
    yield lambda: (setattr(settings, "PORTAL_ENCRYPTION_KEYS", [Fernet.generate_key().decode()]), secrets.reset_cache())
    secrets.reset_cache()


def test_an_undecryptable_secret_flags_its_row_and_the_lists_still_work(lost_key, admin, admin_client):
    from channels.models import Channel
    from hosts.models import Host

    broken = Channel.objects.create(name="old-key", kind="openai", base_url="https://a.test/v1", api_key="sk-a")
    host = Host.objects.create(name="gpu-1", address="10.0.0.5", username="ubuntu", private_key="not-a-real-key")
    stored = Channel.objects.filter(pk=broken.pk).values_list("api_key", flat=True).get()
    lost_key()
    Channel.objects.create(name="fine", kind="openai", base_url="https://b.test/v1", api_key="sk-b")

    api = APIClient()
    api.force_authenticate(admin)
    rows = {r["name"]: r for r in api.get("/api/channels/").json()["results"]}
    assert rows["fine"]["secret_problem"] == "" and rows["fine"]["has_api_key"] is True
    assert "cannot be decrypted" in rows["old-key"]["secret_problem"] and rows["old-key"]["has_api_key"] is True
    host_row = api.get("/api/hosts/").json()["results"][0]
    assert "private key" in host_row["secret_problem"]
    page = admin_client.get(reverse("channel_list")).content.decode()
    assert page.count("secret unreadable") == 1
    assert "secret unreadable" in admin_client.get(reverse("host_detail", args=[host.pk])).content.decode()

    # Saving the row for another reason keeps the ciphertext (the old key may come back).
    channel = Channel.objects.get(pk=broken.pk)
    channel.priority = 5
    channel.save()
    assert Channel.objects.filter(pk=broken.pk).values_list("api_key", flat=True).get() == stored
    # Entering the key again fixes the row.
    assert api.patch(f"/api/channels/{broken.pk}/", {"api_key": "sk-new"}, format="json").status_code == 200
    assert Channel.objects.get(pk=broken.pk).api_key == "sk-new"
