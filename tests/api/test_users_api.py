"""Users through the API: create (password once), roles, limits, deactivate, reset password."""

from __future__ import annotations

import pytest

from accounts.models import AuditLog, User

from .conftest import session_client

pytestmark = pytest.mark.django_db


def test_create_without_password_returns_a_generated_one_once(admin_api, model):
    response = admin_api.post(
        "/api/users/",
        {"username": "bob", "role": "developer", "email": "bob@example.com", "allowed_models": ["qwen3-32b"]},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    bob = User.objects.get(username="bob")
    assert bob.check_password(body["password"]) and body["allowed_models"] == ["qwen3-32b"]
    assert "password" not in admin_api.get(f"/api/users/{bob.pk}/").json()
    assert body["password"] not in admin_api.get("/api/users/").content.decode()


def test_create_with_a_password_does_not_echo_it(admin_api):
    response = admin_api.post(
        "/api/users/", {"username": "bob", "role": "admin", "password": "correct-horse-battery"}, format="json"
    )
    assert response.status_code == 201 and response.json()["password"] is None
    bob = User.objects.get(username="bob")
    assert bob.check_password("correct-horse-battery") and bob.is_admin


def test_reset_password_returns_a_new_one_once_and_audits_it(admin, admin_api, alice):
    response = admin_api.post(f"/api/users/{alice.pk}/reset-password/")
    assert response.status_code == 200
    alice.refresh_from_db()
    assert alice.check_password(response.json()["password"])
    entry = AuditLog.objects.filter(
        object_type="user", object_id=str(alice.pk), message__startswith="password reset"
    ).get()
    assert entry.actor == admin and response.json()["password"] not in str(entry.changes)


def test_deactivate_and_reactivate(admin, admin_api, alice):
    body = admin_api.post(f"/api/users/{alice.pk}/deactivate/").json()
    assert body["is_active"] is False
    entry = AuditLog.objects.filter(object_type="user", object_id=str(alice.pk), action="update").first()
    assert entry.actor == admin and entry.changes["is_active"] == [True, False]
    assert session_client(alice).get("/api/me/").status_code in (401, 403)
    assert admin_api.post(f"/api/users/{alice.pk}/reactivate/").json()["is_active"] is True


def test_an_admin_cannot_deactivate_or_demote_themselves(admin, admin_api):
    response = admin_api.post(f"/api/users/{admin.pk}/deactivate/")
    assert response.status_code == 400 and "own account" in response.json()["detail"]
    response = admin_api.patch(f"/api/users/{admin.pk}/", {"role": "developer"}, format="json")
    assert response.status_code == 400 and "own admin role" in response.json()["role"][0]
    admin.refresh_from_db()
    assert admin.is_active and admin.is_admin


def test_demoting_another_superuser_really_demotes(admin_api, django_user_model):
    other = django_user_model.objects.create_user(username="root2", is_superuser=True, is_staff=True)
    response = admin_api.patch(f"/api/users/{other.pk}/", {"role": "developer"}, format="json")
    assert response.status_code == 200 and response.json()["role"] == "developer"
    other.refresh_from_db()
    assert not other.is_admin and not other.is_superuser


def test_limits_and_key_defaults_are_set(admin_api, alice):
    response = admin_api.patch(
        f"/api/users/{alice.pk}/",
        {"tokens_per_day": 100000, "key_defaults": {"tokens_per_day": 20000, "requests_per_minute": None}},
        format="json",
    )
    assert response.status_code == 200
    alice.refresh_from_db()
    assert alice.tokens_per_day == 100000 and alice.key_defaults == {"tokens_per_day": 20000}


def test_me_shows_the_callers_profile_and_models(alice, alice_api, model):
    from channels.models import Model

    Model.objects.create(name="disabled-model", enabled=False)
    body = alice_api.get("/api/me/").json()
    assert body["username"] == "alice" and body["role"] == "developer" and body["is_admin"] is False
    assert body["models"] == ["qwen3-32b"]
    restricted = Model.objects.create(name="a-restricted")
    alice.allowed_models.set([restricted])
    assert alice_api.get("/api/me/").json()["models"] == ["a-restricted"]


def test_a_user_created_with_only_a_username_is_a_developer(admin_api):
    response = admin_api.post("/api/users/", {"username": "dana"}, format="json")
    assert response.status_code == 201 and response.json()["role"] == "developer"
