"""Request logs outside the gateway: retention through the daily prune, admin-only reads that are
audit-logged, the switch's form, the Connect page's notice, and the redactor on its own."""

from __future__ import annotations

import datetime as dt
import re

import orjson
import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import AuditLog
from channels.tasks import prune_probe_results
from keys.models import PayloadLogging, RequestPayload, payload_logging_of
from keys.payloads.redact import Redactor
from keys.payloads.services import Captured, build
from keys.services import issue_key

pytestmark = pytest.mark.django_db

SECRET_PROMPT = "my key is sk-proj-Ab3dEf6hIjAb3dEf6hIjT3BlbkFJQr5tUv8xYzQr5tUv8xYz thanks"


def captured_call(key, *, created=None, days=7, content=SECRET_PROMPT, request_id="req-1") -> Captured:
    """One call of `key` as the gateway captures it for its log."""
    body = orjson.dumps({"model": "qwen3-32b", "messages": [{"role": "user", "content": content}]})
    return Captured(
        created=created or timezone.now(),
        request_id=request_id,
        key_id=key.pk,
        user_id=key.owner_id,
        model="qwen3-32b",
        surface="chat",
        stream=False,
        status="ok",
        http_status=200,
        retention_days=days,
        request=body,
        response=b'{"choices": [{"message": {"content": "ok"}}]}',
        request_bytes=len(body),
        response_bytes=44,
        truncated=False,
    )


def stored(key, *, created=None, days=7, content=SECRET_PROMPT) -> RequestPayload:
    captured = captured_call(key, created=created, days=days, content=content)
    row = build(captured, Redactor())
    row.save()
    return row


@pytest.fixture
def alice_key(alice):
    return issue_key(owner=alice, name="laptop")[0]


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_the_daily_prune_deletes_payloads_past_their_retention(alice_key):
    now = timezone.now()
    old = stored(alice_key, created=now - dt.timedelta(days=3, minutes=1), days=3)
    kept_longer = stored(alice_key, created=now - dt.timedelta(days=3, minutes=1), days=30)
    fresh = stored(alice_key, created=now - dt.timedelta(days=2, hours=23), days=3)
    result = prune_probe_results()
    assert result["request_payloads"] == 1
    assert set(RequestPayload.objects.values_list("pk", flat=True)) == {kept_longer.pk, fresh.pk}
    assert not RequestPayload.objects.filter(pk=old.pk).exists()


def test_reading_bodies_through_the_api_is_audit_logged_and_redacted(admin, alice_key):
    row = stored(alice_key)
    listed = api(admin).get("/api/request-logs/")
    assert listed.status_code == 200 and "request_body" not in listed.json()["results"][0]
    assert not AuditLog.objects.filter(object_type="requestpayload").exists()  # a list shows no body
    r = api(admin).get(f"/api/request-logs/{row.pk}/")
    assert r.status_code == 200
    assert "[REDACTED OpenAI Token]" in r.json()["request_body"] and "T3BlbkFJ" not in r.json()["request_body"]
    (entry,) = AuditLog.objects.filter(object_type="requestpayload")
    assert entry.actor == admin and entry.object_id == str(row.pk) and "API" in entry.message


def test_the_request_log_pages_are_admin_only_and_each_view_is_audit_logged(client, admin, alice, alice_key):
    row = stored(alice_key)
    client.force_login(alice)
    assert client.get(reverse("request_log_list")).status_code == 403
    assert client.get(reverse("request_log_detail", args=[row.pk])).status_code == 403
    assert client.post(reverse("request_log_list"), {"user": alice.pk, "retention_days": 7}).status_code == 403
    assert not PayloadLogging.objects.exists()
    assert not AuditLog.objects.filter(object_type="requestpayload").exists()
    client.force_login(admin)
    usage = client.get(reverse("usage_admin"))
    assert reverse("request_log_list") in usage.content.decode()  # linked from the usage page
    page = client.get(reverse("request_log_list")).content.decode()
    assert reverse("request_log_detail", args=[row.pk]) in page
    detail = client.get(reverse("request_log_detail", args=[row.pk])).content.decode()
    assert "[REDACTED OpenAI Token]" in detail and "T3BlbkFJ" not in detail
    (entry,) = AuditLog.objects.filter(object_type="requestpayload")
    assert entry.actor == admin and "web" in entry.message


def test_the_switch_form_sets_one_row_per_target_and_refuses_two_targets(admin_client, alice, alice_key):
    url = reverse("request_log_list")
    both = admin_client.post(url, {"user": alice.pk, "key": alice_key.pk, "retention_days": 7, "enabled": "on"})
    assert both.status_code == 400 and "Choose one key, one user or one team." in both.content.decode()
    none = admin_client.post(url, {"retention_days": 7, "enabled": "on"})
    assert none.status_code == 400 and "Choose one key, one user or one team." in none.content.decode()
    assert admin_client.post(url, {"user": alice.pk, "retention_days": 7, "enabled": "on"}).status_code == 302
    assert admin_client.post(url, {"user": alice.pk, "retention_days": 30, "enabled": "on"}).status_code == 302
    (policy,) = PayloadLogging.objects.all()
    assert policy.user == alice and policy.retention_days == 30
    bad = admin_client.post(url, {"user": alice.pk, "retention_days": 0, "enabled": "on"})
    assert bad.status_code == 400
    assert AuditLog.objects.filter(object_type="payloadlogging").count() == 2  # created, changed
    for target in ("user", "team"):  # not an id: the form's field error, not a 500
        junk = admin_client.post(url, {target: "abc", "retention_days": 5, "enabled": "on"})
        assert junk.status_code == 400 and 'class="field-error"' in junk.content.decode()


def test_the_api_refuses_a_policy_with_two_targets_with_a_field_error(admin, alice, alice_key):
    r = api(admin).post("/api/payload-logging/", {"user": alice.pk, "key": alice_key.pk}, format="json")
    assert r.status_code == 400 and "key" in r.json()


def test_a_team_switch_is_set_from_the_form_and_the_api(admin_client, admin):
    from accounts.models import Team

    team = Team.objects.create(name="platform")
    url = reverse("request_log_list")
    assert admin_client.post(url, {"team": team.pk, "retention_days": 9, "enabled": "on"}).status_code == 302
    assert admin_client.post(url, {"team": team.pk, "retention_days": 3, "enabled": "on"}).status_code == 302
    (policy,) = PayloadLogging.objects.all()
    assert policy.team == team and policy.retention_days == 3  # one row per team
    assert "team platform" in admin_client.get(url).content.decode()
    other = Team.objects.create(name="research")
    r = api(admin).post("/api/payload-logging/", {"team": other.pk, "retention_days": 2}, format="json")
    assert r.status_code == 201 and r.json()["team"] == other.pk
    third = Team.objects.create(name="ops")
    two = api(admin).post("/api/payload-logging/", {"team": third.pk, "user": admin.pk}, format="json")
    assert two.status_code == 400 and "key" in two.json()


def test_the_key_policy_wins_over_the_owners_and_the_owners_over_the_teams(alice, alice_key):
    from accounts.models import Team

    team = Team.objects.create(name="platform")
    PayloadLogging.objects.create(team=team, retention_days=11)
    alice.team = team
    alice.save()
    alice_key.refresh_from_db()
    assert payload_logging_of(alice_key).retention_days == 11
    PayloadLogging.objects.create(user=alice, retention_days=4)
    alice_key.refresh_from_db()
    assert payload_logging_of(alice_key).retention_days == 4


def test_the_key_policy_wins_over_the_owners(alice, alice_key):
    assert payload_logging_of(alice_key) is None  # off by default
    PayloadLogging.objects.create(user=alice, retention_days=5)
    alice_key.refresh_from_db()
    assert payload_logging_of(alice_key).retention_days == 5
    PayloadLogging.objects.create(key=alice_key, enabled=False)
    alice_key = type(alice_key).objects.get(pk=alice_key.pk)
    assert payload_logging_of(alice_key).enabled is False


def test_the_connect_page_tells_the_developer_their_requests_are_logged(alice_client, alice, alice_key):
    assert "Your requests are logged" not in alice_client.get(reverse("connect")).content.decode()
    PayloadLogging.objects.create(user=alice, retention_days=14)
    page = alice_client.get(reverse("connect")).content.decode()
    assert "Your requests are logged" in page and "laptop" in page and "14 days" in page


def test_the_redactor_leaves_ordinary_text_alone():
    text = "def add(a, b):\n    return a + b  # see commit 3f786850, ask at 10.0.0.1\nThe weather is nice."
    redactor = Redactor()
    assert redactor.text(text) == text and redactor.count == 0


def test_the_stored_requests_sort_by_column(admin_client):
    now = timezone.now()
    for name in ("b-model", "c-model", "a-model"):
        RequestPayload.objects.create(
            expires_at=now + dt.timedelta(days=1), request_id=name, model=name, request_body=b"", response_body=b""
        )
    url = reverse("request_log_list")

    def models(query: str) -> list[str]:
        return re.findall(r"<td>([abc]-model)</td>", admin_client.get(url + query).content.decode())

    assert models("?sort=model") == ["a-model", "b-model", "c-model"]
    assert models("?sort=-model") == ["c-model", "b-model", "a-model"]
    assert 'aria-sort="descending"' in admin_client.get(url + "?sort=-model").content.decode()
    assert len(models("?sort=nonsense")) == 3  # ignored, not a 500


def _rows(admin_client, query: str = "") -> list[str]:
    page = admin_client.get(reverse("request_log_list") + query).content.decode()
    return re.findall(r'<tr data-request="([^"]+)">', page)


def test_the_stored_requests_paginate_and_filter_by_user_key_model_status_and_day(admin_client, alice, mallory):
    laptop, _ = issue_key(owner=alice, name="laptop")
    ci, _ = issue_key(owner=mallory, name="ci")
    now = timezone.now()
    day = dt.timedelta(days=1)
    for i in range(60):
        key = laptop if i % 2 == 0 else ci
        RequestPayload.objects.create(
            created=now - dt.timedelta(minutes=i) - (3 * day if i >= 55 else dt.timedelta()),
            expires_at=now + day,
            request_id=f"req-{i}",
            key=key,
            user=key.owner,
            model="qwen3-32b" if i % 3 else "llama-70b",
            status="ok" if i % 5 else "upstream_error",
            http_status=200 if i % 5 else 502,
            request_body=b"",
            response_body=b"",
        )
    first = admin_client.get(reverse("request_log_list")).content.decode()
    assert len(re.findall(r'<tr data-request="', first)) == 50 and "Page 1 of 2 · 60 total" in first
    assert _rows(admin_client, "?page=2") == [f"req-{i}" for i in range(50, 60)]
    # The key picker is a text input with suggestions, not a select of every key.
    assert '<select name="key"' not in first and 'list="id_key-options"' in first
    assert f'<option value="{laptop.masked} laptop (alice)">' in first

    assert _rows(admin_client, "?user=mallory") == [f"req-{i}" for i in range(1, 60, 2)][:50]
    by_key = _rows(admin_client, "?key=" + f"{ci.masked} ci (mallory)".replace(" ", "+"))
    assert set(by_key) == {f"req-{i}" for i in range(1, 60, 2)}
    assert set(_rows(admin_client, f"?key={laptop.pk}")) == {f"req-{i}" for i in range(0, 60, 2)}
    assert _rows(admin_client, "?key=nothing-like-it") == []
    assert set(_rows(admin_client, "?model=llama-70b&status=upstream_error")) == {"req-0", "req-15", "req-30", "req-45"}
    three_days_ago = (now - 3 * day).date().isoformat()
    assert set(_rows(admin_client, f"?until={three_days_ago}")) == {f"req-{i}" for i in range(55, 60)}
    # Filters survive paging: page 2 of a filter keeps it.
    four_days_ago = (now - 4 * day).date().isoformat()
    page = admin_client.get(reverse("request_log_list") + f"?since={four_days_ago}").content.decode()
    assert f'href="?since={four_days_ago}&amp;page=2" rel="next"' in page
    bad = admin_client.get(reverse("request_log_list") + "?since=yesterday")
    assert bad.status_code == 200 and _rows(admin_client, "?since=yesterday") == []


def test_the_switch_form_takes_a_key_typed_as_the_picker_suggests(admin_client, alice_key):
    url = reverse("request_log_list")
    label = f"{alice_key.masked} {alice_key.name} ({alice_key.owner.username})"
    assert admin_client.post(url, {"key": label, "retention_days": 5, "enabled": "on"}).status_code == 302
    (policy,) = PayloadLogging.objects.all()
    assert policy.key == alice_key and policy.retention_days == 5
    unknown = admin_client.post(url, {"key": "gp-nope…0000", "retention_days": 5, "enabled": "on"})
    assert unknown.status_code == 400 and "No active key matches" in unknown.content.decode()


def test_logs_naming_a_key_or_user_deleted_since_their_request_are_stored_without_it(transactional_db, alice, mallory):
    """The log writer's batch fails its commit on a deleted key's (or user's) foreign key; its logs are
    stored with that reference empty, and the rest of the batch with them (it was all lost)."""
    from gateway.payloads import PayloadWriter

    kept, _ = issue_key(owner=alice, name="kept")
    gone, _ = issue_key(owner=mallory, name="gone")

    batch = [captured_call(key, request_id=name) for key, name in ((kept, "a"), (gone, "b"), (kept, "c"))]
    gone_id, gone_owner = gone.pk, mallory.pk
    gone.delete()
    mallory.delete()

    PayloadWriter._write(batch, Redactor())

    assert sorted(RequestPayload.objects.values_list("request_id", flat=True)) == ["a", "b", "c"]
    assert RequestPayload.objects.get(request_id="b").key_id is None
    assert RequestPayload.objects.get(request_id="b").user_id is None
    assert not RequestPayload.objects.filter(key_id=gone_id).exists()
    assert not RequestPayload.objects.filter(user_id=gone_owner).exists()
    assert RequestPayload.objects.filter(key=kept).count() == 2


def test_removing_a_logging_policy_asks_first_and_only_an_admin_may(client, admin, alice):
    policy = PayloadLogging.objects.create(user=alice, retention_days=7)
    url = reverse("payload_logging_delete", args=[policy.pk])
    client.force_login(alice)
    assert client.get(url).status_code == 403 and client.post(url).status_code == 403
    client.force_login(admin)
    assert url in client.get(reverse("request_log_list")).content.decode()
    asked = client.get(url).content.decode()
    assert "Remove the request logging policy for user alice: logged, kept 7 days?" in asked
    assert PayloadLogging.objects.filter(pk=policy.pk).exists()
    client.post(url)
    assert not PayloadLogging.objects.filter(pk=policy.pk).exists()
