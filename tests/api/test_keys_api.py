"""Keys through the API: create with just a name, shown once, verified by the gateway's own
verify_key; revoke, rotate with grace, expiry; scoping between developers."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from keys.models import Key
from keys.services import verify_key

pytestmark = pytest.mark.django_db


def test_a_name_is_enough_and_the_plaintext_is_returned_once(alice, alice_api):
    response = alice_api.post("/api/keys/", {"name": "laptop"}, format="json")
    assert response.status_code == 201
    body = response.json()
    plaintext = body["key"]
    assert plaintext.startswith("gp-") and body["owner"] == alice.pk and body["state"] == "active"
    assert body["masked"] == f"{body['prefix']}…{body['last_four']}" and plaintext.endswith(body["last_four"])
    assert verify_key(plaintext).pk == body["id"]

    detail = alice_api.get(f"/api/keys/{body['id']}/")
    listing = alice_api.get("/api/keys/")
    for later in (detail, listing):
        assert plaintext not in later.content.decode() and "key" not in later.json().get("results", [later.json()])[0]


def test_key_defaults_of_the_owner_prefill_the_limits(alice, alice_api):
    alice.key_defaults = {"tokens_per_day": 50000}
    alice.save()
    body = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    assert body["tokens_per_day"] == 50000
    explicit = alice_api.post("/api/keys/", {"name": "ci", "tokens_per_day": 10}, format="json").json()
    assert explicit["tokens_per_day"] == 10


def test_settings_are_stored_canonical(alice_api, model):
    body = alice_api.post(
        "/api/keys/",
        {
            "name": "scoped",
            "allowed_models": ["qwen3-32b"],
            "ip_allowlist": ["10.1.2.3/8", "192.168.1.7", "10.0.0.0/8"],
            "requests_per_minute": 60,
            "client": "continue",
        },
        format="json",
    ).json()
    assert body["allowed_models"] == ["qwen3-32b"]
    assert body["ip_allowlist"] == ["10.0.0.0/8", "192.168.1.7/32"]
    assert body["requests_per_minute"] == 60 and body["client"] == "continue"


def test_revoke_stops_the_key_and_is_idempotent(alice_api):
    body = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    first = alice_api.post(f"/api/keys/{body['id']}/revoke/")
    assert first.status_code == 200 and first.json()["state"] == "revoked"
    assert verify_key(body["key"]) is None
    again = alice_api.post(f"/api/keys/{body['id']}/revoke/")
    assert again.status_code == 200 and again.json()["revoked_at"] == first.json()["revoked_at"]


def test_rotate_with_grace_returns_a_new_plaintext_once_and_keeps_the_old_one_briefly(alice_api):
    old = alice_api.post("/api/keys/", {"name": "ci", "tokens_per_day": 99}, format="json").json()
    response = alice_api.post(f"/api/keys/{old['id']}/rotate/", {"grace_seconds": 300}, format="json")
    assert response.status_code == 201
    new = response.json()
    assert new["key"] != old["key"] and new["name"] == "ci" and new["tokens_per_day"] == 99
    assert new["rotated_from"] == old["id"]
    assert verify_key(new["key"]).pk == new["id"]
    assert verify_key(old["key"]).pk == old["id"]  # grace period
    old_row = alice_api.get(f"/api/keys/{old['id']}/").json()
    assert old_row["expires_at"] is not None and "key" not in old_row
    Key.objects.filter(pk=old["id"]).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert verify_key(old["key"]) is None
    assert alice_api.get(f"/api/keys/{old['id']}/").json()["state"] == "expired"


def test_rotate_without_grace_stops_the_old_key_now(alice_api):
    old = alice_api.post("/api/keys/", {"name": "ci"}, format="json").json()
    new = alice_api.post(f"/api/keys/{old['id']}/rotate/", {}, format="json").json()
    assert verify_key(old["key"]) is None and verify_key(new["key"]) is not None


def test_a_key_rotated_already_is_not_rotated_again(alice_api):
    old = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    first = alice_api.post(f"/api/keys/{old['id']}/rotate/", {"grace_seconds": 60}, format="json").json()
    in_grace = Key.objects.get(pk=old["id"])
    # A second replacement would copy the grace expiry and stop with the old key a minute later.
    again = alice_api.post(f"/api/keys/{old['id']}/rotate/", {"grace_seconds": 60}, format="json")
    assert again.status_code == 400
    assert again.json()["non_field_errors"] == [
        f"This key was already rotated; rotate its replacement {first['masked']} instead."
    ]
    assert list(Key.objects.filter(rotated_from=old["id"]).values_list("pk", flat=True)) == [first["id"]]
    assert Key.objects.get(pk=old["id"]).name == in_grace.name
    assert alice_api.post(f"/api/keys/{first['id']}/rotate/", {}, format="json").status_code == 201


def test_an_object_for_allowed_models_is_refused_and_keeps_the_key_restricted(alice, alice_api, model):
    """An empty list means every model the owner may use: {} must not pass for one."""
    alice.allowed_models.set([model])
    key = alice_api.post("/api/keys/", {"name": "narrow", "allowed_models": [model.name]}, format="json").json()
    response = alice_api.patch(f"/api/keys/{key['id']}/", {"allowed_models": {}}, format="json")
    assert response.status_code == 400
    assert response.json() == {"allowed_models": ['Expected a list of items but got type "dict".']}
    assert alice_api.get(f"/api/keys/{key['id']}/").json()["allowed_models"] == [model.name]


def test_a_key_expires_at_its_expiry(alice_api):
    soon = timezone.now() + datetime.timedelta(hours=1)
    body = alice_api.post("/api/keys/", {"name": "temp", "expires_at": soon.isoformat()}, format="json").json()
    assert verify_key(body["key"]) is not None
    Key.objects.filter(pk=body["id"]).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert verify_key(body["key"]) is None
    assert alice_api.get("/api/keys/", {"state": "expired"}).json()["count"] == 1


def test_a_developer_sees_only_their_own_keys(alice_api, mallory_api, alice_key):
    assert [k["id"] for k in alice_api.get("/api/keys/").json()["results"]] == [alice_key.pk]
    assert mallory_api.get("/api/keys/").json()["count"] == 0
    assert mallory_api.get(f"/api/keys/{alice_key.pk}/").status_code == 404
    assert mallory_api.post(f"/api/keys/{alice_key.pk}/revoke/").status_code == 404
    alice_key.refresh_from_db()
    assert alice_key.revoked_at is None


def test_admins_see_all_keys_and_filter_by_owner(admin_api, alice, mallory, alice_key):
    mallory_key = mallory.keys.create(name="m", prefix="gp-x", last_four="abcd", key_hash="h" * 64)
    all_ids = {k["id"] for k in admin_api.get("/api/keys/").json()["results"]}
    assert all_ids == {alice_key.pk, mallory_key.pk}
    only = admin_api.get("/api/keys/", {"owner": mallory.pk}).json()["results"]
    assert [k["id"] for k in only] == [mallory_key.pk]


def test_an_admin_can_create_a_key_for_a_developer(admin_api, alice):
    body = admin_api.post("/api/keys/", {"name": "given", "owner": alice.pk}, format="json").json()
    assert body["owner"] == alice.pk and verify_key(body["key"]).owner == alice


def test_a_deactivated_owners_keys_stop_working(admin_api, alice, alice_api):
    body = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    admin_api.post(f"/api/users/{alice.pk}/deactivate/")
    assert verify_key(body["key"]) is None
    assert admin_api.get(f"/api/keys/{body['id']}/").json()["state"] == "owner inactive"


def test_limits_an_admin_set_on_a_key_are_a_ceiling_the_developer_can_only_lower(alice, admin_api, alice_api):
    created = admin_api.post(
        "/api/keys/",
        {"name": "issued", "owner": alice.pk, "requests_per_minute": 60, "tokens_per_day": 200_000},
        format="json",
    ).json()
    assert created["admin_ceilings"] == {"requests_per_minute": 60, "tokens_per_day": 200_000}
    url = f"/api/keys/{created['id']}/"

    cleared = alice_api.patch(url, {"tokens_per_day": None}, format="json")
    assert cleared.status_code == 400
    assert "not remove it" in cleared.json()["tokens_per_day"][0]
    raised = alice_api.patch(url, {"requests_per_minute": 61}, format="json")
    assert raised.status_code == 400 and "not raise it" in raised.json()["requests_per_minute"][0]
    key = Key.objects.get(pk=created["id"])
    assert (key.requests_per_minute, key.tokens_per_day) == (60, 200_000)

    lowered = alice_api.patch(url, {"requests_per_minute": 30}, format="json")
    assert lowered.status_code == 200 and lowered.json()["requests_per_minute"] == 30
    # Lowered, the admin's ceiling still holds: back up to 60 is fine, above it is not.
    assert alice_api.patch(url, {"requests_per_minute": 60}, format="json").status_code == 200
    assert alice_api.patch(url, {"requests_per_minute": 90}, format="json").status_code == 400
    # The ceiling is not writable through the API.
    alice_api.patch(url, {"admin_ceilings": {}}, format="json")
    assert Key.objects.get(pk=created["id"]).admin_ceilings == {"requests_per_minute": 60, "tokens_per_day": 200_000}

    # The admin can lift it.
    assert admin_api.patch(url, {"tokens_per_day": None}, format="json").status_code == 200
    assert Key.objects.get(pk=created["id"]).admin_ceilings == {"requests_per_minute": 60}
    assert alice_api.patch(url, {"requests_per_minute": 500, "tokens_per_day": None}, format="json").status_code == 400
    assert alice_api.patch(url, {"tokens_per_day": 5}, format="json").status_code == 200


def test_local_only_set_by_an_admin_is_kept_by_the_developer_and_lifted_by_the_admin(alice, admin_api, alice_api):
    created = admin_api.post("/api/keys/", {"name": "private", "owner": alice.pk, "local_only": True}, format="json")
    assert created.status_code == 201 and created.json()["admin_ceilings"] == {"local_only": 1}
    url = f"/api/keys/{created.json()['id']}/"
    lifted = alice_api.patch(url, {"local_only": False}, format="json")
    assert lifted.status_code == 400 and "only an admin can lift it" in lifted.json()["local_only"][0]
    assert Key.objects.get(pk=created.json()["id"]).local_only
    assert alice_api.patch(url, {"name": "private-2"}, format="json").status_code == 200  # other edits are fine
    assert admin_api.patch(url, {"local_only": False}, format="json").status_code == 200
    assert Key.objects.get(pk=created.json()["id"]).admin_ceilings == {}
    assert alice_api.patch(url, {"local_only": True}, format="json").status_code == 200  # her own choice now
    assert alice_api.patch(url, {"local_only": False}, format="json").status_code == 200


def test_a_developer_sets_and_clears_the_limits_of_their_own_key_freely(alice_api):
    body = alice_api.post("/api/keys/", {"name": "mine", "requests_per_minute": 10}, format="json").json()
    assert body["admin_ceilings"] == {}
    assert alice_api.patch(f"/api/keys/{body['id']}/", {"requests_per_minute": None}, format="json").status_code == 200


def test_a_limit_a_team_lead_set_binds_the_member_not_the_lead_or_an_admin(alice, lena, admin_api, alice_api):
    from tests.api.conftest import session_client

    lena_api = session_client(lena)
    key = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    url = f"/api/keys/{key['id']}/"
    set_by_lead = lena_api.patch(url, {"tokens_per_day": 5000, "local_only": True}, format="json")
    assert set_by_lead.status_code == 200
    assert set_by_lead.json()["lead_ceilings"] == {"tokens_per_day": 5000, "local_only": 1}
    assert set_by_lead.json()["admin_ceilings"] == {}

    cleared = alice_api.patch(url, {"tokens_per_day": None}, format="json")
    assert cleared.status_code == 400
    assert cleared.json()["tokens_per_day"] == [
        "A team lead set this limit to 5,000; you can lower it but not remove it."
    ]
    raised = alice_api.patch(url, {"tokens_per_day": 5001}, format="json")
    assert raised.status_code == 400 and "not raise it" in raised.json()["tokens_per_day"][0]
    unlocked = alice_api.patch(url, {"local_only": False}, format="json")
    assert unlocked.status_code == 400 and "only a team lead or an admin" in unlocked.json()["local_only"][0]
    alice_api.patch(url, {"lead_ceilings": {}}, format="json")  # not writable
    stored = Key.objects.get(pk=key["id"])
    assert (stored.tokens_per_day, stored.local_only, stored.lead_ceilings) == (
        5000,
        True,
        {"tokens_per_day": 5000, "local_only": 1},
    )
    assert alice_api.patch(url, {"tokens_per_day": 10}, format="json").status_code == 200  # lowering is fine

    # The lead lifts their own limit; then the member is free again.
    assert lena_api.patch(url, {"tokens_per_day": None}, format="json").status_code == 200
    assert Key.objects.get(pk=key["id"]).lead_ceilings == {"local_only": 1}
    assert alice_api.patch(url, {"tokens_per_day": 99_000}, format="json").status_code == 200

    # An admin lifts a lead's limit too; what the admin sets, the lead cannot lift.
    assert admin_api.patch(url, {"local_only": False, "tokens_per_day": 800}, format="json").status_code == 200
    stored = Key.objects.get(pk=key["id"])
    assert (stored.lead_ceilings, stored.admin_ceilings) == ({}, {"tokens_per_day": 800})
    by_lead = lena_api.patch(url, {"tokens_per_day": None}, format="json")
    assert by_lead.status_code == 400 and by_lead.json()["tokens_per_day"] == [
        "An admin set this limit to 800; you can lower it but not remove it."
    ]
    assert lena_api.patch(url, {"tokens_per_day": 500}, format="json").status_code == 200
    assert Key.objects.get(pk=key["id"]).lead_ceilings == {"tokens_per_day": 500}
    assert alice_api.patch(url, {"tokens_per_day": 600}, format="json").status_code == 400


def test_a_lead_records_no_ceiling_on_their_own_key_and_can_only_lower_its_limits(lena):
    from tests.api.conftest import session_client

    lena_api = session_client(lena)
    key = lena_api.post("/api/keys/", {"name": "mine", "tokens_per_day": 10}, format="json").json()
    assert (key["admin_ceilings"], key["lead_ceilings"]) == ({}, {})
    assert lena_api.patch(f"/api/keys/{key['id']}/", {"tokens_per_day": None}, format="json").status_code == 400
    assert lena_api.patch(f"/api/keys/{key['id']}/", {"tokens_per_day": 5}, format="json").status_code == 200


def test_restrictions_an_admin_set_on_a_key_the_developer_can_only_tighten(alice, admin_api, alice_api, model, channel):
    from channels.models import Model, ModelRoute

    second = Model.objects.create(name="m-second", display_name="M second")
    ModelRoute.objects.create(model=second, channel=channel, upstream_model="m-second")
    expiry = timezone.now() + datetime.timedelta(days=30)
    created = admin_api.post(
        "/api/keys/",
        {
            "name": "issued",
            "owner": alice.pk,
            "ip_allowlist": ["192.0.2.0/24"],
            "expires_at": expiry.isoformat(),
            "allowed_models": [model.name],
        },
        format="json",
    )
    assert created.status_code == 201
    url = f"/api/keys/{created.json()['id']}/"

    widened = alice_api.patch(url, {"ip_allowlist": []}, format="json")
    assert widened.status_code == 400 and "ip_allowlist" in widened.json()
    outside = alice_api.patch(url, {"ip_allowlist": ["198.51.100.0/24"]}, format="json")
    assert outside.status_code == 400 and "ip_allowlist" in outside.json()
    cleared = alice_api.patch(url, {"expires_at": None}, format="json")
    assert cleared.status_code == 400 and "expires_at" in cleared.json()
    later = alice_api.patch(url, {"expires_at": (expiry + datetime.timedelta(days=1)).isoformat()}, format="json")
    assert later.status_code == 400 and "expires_at" in later.json()
    swapped = alice_api.patch(url, {"allowed_models": ["m-second"]}, format="json")
    assert swapped.status_code == 400 and "allowed_models" in swapped.json()
    every = alice_api.patch(url, {"allowed_models": []}, format="json")
    assert every.status_code == 400 and "allowed_models" in every.json()
    key = Key.objects.get(pk=created.json()["id"])
    assert (key.ip_allowlist, key.expires_at, [m.name for m in key.allowed_models.all()]) == (
        ["192.0.2.0/24"],
        expiry,
        [model.name],
    )

    # Tightening is fine, and so are other edits.
    sooner = expiry - datetime.timedelta(days=1)
    narrowed = alice_api.patch(
        url, {"ip_allowlist": ["192.0.2.0/28"], "expires_at": sooner.isoformat(), "name": "n2"}, format="json"
    )
    assert narrowed.status_code == 200

    # The admin lifts them; then they are the developer's own.
    lifted = admin_api.patch(url, {"ip_allowlist": [], "expires_at": None, "allowed_models": []}, format="json")
    assert lifted.status_code == 200 and lifted.json()["admin_ceilings"] == {}
    assert alice_api.patch(url, {"ip_allowlist": ["198.51.100.0/24"]}, format="json").status_code == 200
    assert alice_api.patch(url, {"ip_allowlist": []}, format="json").status_code == 200


def test_an_expired_key_an_admin_issued_is_not_revived_by_its_owner(alice, admin_api, alice_api):
    soon = timezone.now() + datetime.timedelta(hours=1)
    created = admin_api.post(
        "/api/keys/", {"name": "temp", "owner": alice.pk, "expires_at": soon.isoformat()}, format="json"
    ).json()
    Key.objects.filter(pk=created["id"]).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))
    revived = alice_api.patch(f"/api/keys/{created['id']}/", {"expires_at": None}, format="json")
    assert revived.status_code == 400 and "expires_at" in revived.json()
    assert verify_key(created["key"]) is None


def test_a_restriction_a_team_lead_set_binds_the_member_not_the_lead(alice, lena, alice_api):
    from tests.api.conftest import session_client

    lena_api = session_client(lena)
    key = alice_api.post("/api/keys/", {"name": "laptop", "ip_allowlist": ["10.0.0.0/8"]}, format="json").json()
    url = f"/api/keys/{key['id']}/"
    assert alice_api.patch(url, {"ip_allowlist": []}, format="json").status_code == 200  # her own choice
    set_by_lead = lena_api.patch(url, {"ip_allowlist": ["192.0.2.0/24"]}, format="json")
    assert set_by_lead.status_code == 200 and set_by_lead.json()["lead_ceilings"] == {"ip_allowlist": ["192.0.2.0/24"]}
    widened = alice_api.patch(url, {"ip_allowlist": []}, format="json")
    assert widened.status_code == 400
    assert widened.json()["ip_allowlist"] == [
        "A team lead restricted the addresses of this key; you can narrow them but not widen them."
    ]
    assert lena_api.patch(url, {"ip_allowlist": []}, format="json").status_code == 200


def test_a_rotated_key_cannot_be_changed(alice_api):
    old = alice_api.post("/api/keys/", {"name": "ci"}, format="json").json()
    new = alice_api.post(f"/api/keys/{old['id']}/rotate/", {"grace_seconds": 5}, format="json").json()
    kept = alice_api.patch(f"/api/keys/{old['id']}/", {"expires_at": None}, format="json")
    assert kept.status_code == 400
    assert kept.json()["non_field_errors"] == [
        f"This key was rotated; it stops at the end of its grace period. Change its replacement {new['masked']}."
    ]
    later = timezone.now() + datetime.timedelta(days=1)
    assert (
        alice_api.patch(f"/api/keys/{old['id']}/", {"expires_at": later.isoformat()}, format="json").status_code == 400
    )
    assert Key.objects.get(pk=old["id"]).expires_at < timezone.now() + datetime.timedelta(seconds=6)
    assert alice_api.patch(f"/api/keys/{new['id']}/", {"expires_at": None}, format="json").status_code == 200


def test_moving_the_owner_to_another_team_lifts_the_old_leads_locks_and_keeps_an_admins(admin, alice, lena):
    """The old lead no longer answers for alice's key, and the new lead could not tell those locks
    from their own: they are dropped on the move (the audit log says why); an admin's stay."""
    from accounts.models import AuditLog, Team
    from tests.api.conftest import token_client

    lena_api, alice_api, admin_api = token_client(lena), token_client(alice), token_client(admin)
    key = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    url = f"/api/keys/{key['id']}/"
    locked = {"tokens_per_day": 5000, "local_only": True, "ip_allowlist": ["192.0.2.0/24"]}
    assert lena_api.patch(url, locked, format="json").status_code == 200
    assert admin_api.patch(url, {"requests_per_minute": 10}, format="json").status_code == 200

    Team.objects.create(name="beta")
    moved = admin_api.patch(f"/api/users/{alice.pk}/", {"team": "beta"}, format="json")
    assert moved.status_code == 200, moved.json()
    stored = Key.objects.get(pk=key["id"])
    assert (stored.lead_ceilings, stored.admin_ceilings) == ({}, {"requests_per_minute": 10})
    assert (stored.tokens_per_day, stored.local_only, stored.ip_allowlist) == (5000, True, ["192.0.2.0/24"])
    entry = AuditLog.objects.get(object_type="user", message__startswith="left the team")
    assert entry.message == "left the team alpha: the locks its leads set on 1 key(s) were lifted"
    assert entry.actor == admin
    assert AuditLog.objects.filter(object_type="key", object_id=str(key["id"]), changes__has_key="lead_ceilings")

    assert lena_api.get(url).status_code == 404  # no longer hers to manage
    freed = {"tokens_per_day": None, "local_only": False, "ip_allowlist": []}
    assert alice_api.patch(url, freed, format="json").status_code == 200
    raised = alice_api.patch(url, {"requests_per_minute": 11}, format="json")
    assert raised.status_code == 400 and "An admin set this limit to 10" in raised.json()["requests_per_minute"][0]


def test_promoting_a_member_to_lead_lifts_the_locks_another_lead_set(admin, alice, lena):
    """A lead does not manage another lead: locks lena set on alice's key would bind alice for
    good once she leads the team too."""
    from tests.api.conftest import token_client

    alice_api = token_client(alice)
    key = alice_api.post("/api/keys/", {"name": "laptop"}, format="json").json()
    assert token_client(lena).patch(f"/api/keys/{key['id']}/", {"local_only": True}, format="json").status_code == 200
    promoted = token_client(admin).patch(f"/api/users/{alice.pk}/", {"role": "team_lead"}, format="json")
    assert promoted.status_code == 200
    assert Key.objects.get(pk=key["id"]).lead_ceilings == {}
    lifted = alice_api.patch(f"/api/keys/{key['id']}/", {"local_only": False}, format="json")
    assert lifted.status_code == 200, lifted.json()


def test_a_leads_refused_key_and_budget_are_explained_in_their_language(alice, mallory, lena):
    from channels.models import Model
    from tests.api.conftest import token_client

    alice.allowed_models.set([Model.objects.create(name="open-model")])
    Model.objects.create(name="closed-model")
    zh = {"format": "json", "HTTP_ACCEPT_LANGUAGE": "zh-hans"}
    lena_api = token_client(lena)
    foreign = lena_api.post("/api/keys/", {"owner": mallory.pk, "name": "x"}, **zh)
    assert foreign.json() == {"owner": ["你只能为自己创建密钥（团队负责人：可为团队成员创建）。"]}
    closed = lena_api.post("/api/keys/", {"owner": alice.pk, "name": "x", "allowed_models": ["closed-model"]}, **zh)
    assert closed.json() == {"allowed_models": ["alice 不能使用：closed-model。"]}
    both = lena_api.post("/api/budgets/", {"user": alice.pk, "team": alice.team_id, "amount": "1"}, **zh)
    assert both.json() == {"non_field_errors": ["密钥、用户、团队三者必须且只能设置一个。"]}
