"""/api/teams/ beyond the role matrix: the lead manages members' limits within the team's and
below an admin's; keys for the team's members; moving a user checks the new team's ceilings."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_a_lead_sets_member_limits_within_the_team_and_below_an_admin(lead_api, admin_api, team, alice):
    team.tokens_per_day, team.tokens_per_minute = 10_000, 1000
    team.save()
    assert admin_api.patch(f"/api/users/{alice.pk}/", {"tokens_per_day": 5000}, format="json").status_code == 200
    url = f"/api/teams/{team.pk}/members/{alice.pk}/"
    above = lead_api.patch(url, {"tokens_per_day": 6000}, format="json")
    assert above.status_code == 400
    assert above.json()["tokens_per_day"] == ["An admin set this limit to 5,000; you can lower it but not raise it."]
    cleared = lead_api.patch(url, {"tokens_per_day": None}, format="json")
    assert cleared.status_code == 400 and "not remove it" in cleared.json()["tokens_per_day"][0]
    over_team = lead_api.patch(url, {"requests_per_minute": 5, "tokens_per_minute": 20_000}, format="json")
    assert over_team.status_code == 400 and "requests_per_minute" not in over_team.json()
    assert over_team.json()["tokens_per_minute"] == ["Cannot exceed the team alpha's limit of 1,000."]
    lowered = lead_api.patch(url, {"tokens_per_day": 4000, "requests_per_minute": 5}, format="json")
    assert lowered.status_code == 200
    assert (lowered.json()["tokens_per_day"], lowered.json()["admin_ceilings"]) == (4000, {"tokens_per_day": 5000})
    # the admin is not bound by their own ceiling, only by the team's
    assert admin_api.patch(url, {"tokens_per_day": 9000}, format="json").status_code == 200
    assert admin_api.patch(url, {"tokens_per_day": 20_000}, format="json").status_code == 400


def test_team_limits_are_the_admins(lead_api, admin_api, team):
    assert lead_api.patch(f"/api/teams/{team.pk}/", {"requests_per_minute": 1000}, format="json").status_code == 403
    got = admin_api.patch(f"/api/teams/{team.pk}/", {"requests_per_minute": 30}, format="json")
    assert got.status_code == 200 and got.json()["requests_per_minute"] == 30
    assert lead_api.get(f"/api/teams/{team.pk}/").json()["leads"] == ["lena"]


def test_a_lead_creates_keys_for_members_only_and_within_the_team(lead_api, team, alice, mallory):
    team.requests_per_minute = 30
    team.save()
    made = lead_api.post("/api/keys/", {"name": "ci", "owner": alice.pk, "requests_per_minute": 10}, format="json")
    assert made.status_code == 201 and made.json()["owner_username"] == "alice" and made.json()["key"]
    over = lead_api.post("/api/keys/", {"name": "ci2", "owner": alice.pk, "requests_per_minute": 31}, format="json")
    assert over.status_code == 400 and "team alpha's limit of 30" in over.json()["requests_per_minute"][0]
    other = lead_api.post("/api/keys/", {"name": "ci", "owner": mallory.pk}, format="json")
    assert other.status_code == 400 and "owner" in other.json()


def test_moving_a_user_checks_the_new_teams_ceilings(admin_api, alice, team):
    alice.requests_per_minute = 100
    alice.save()
    team.requests_per_minute = 30
    team.save()
    beta = admin_api.post("/api/teams/", {"name": "beta"}, format="json").json()
    assert admin_api.patch(f"/api/users/{alice.pk}/", {"team": team.pk}, format="json").status_code == 400
    moved = admin_api.patch(f"/api/users/{alice.pk}/", {"team": "beta"}, format="json")
    assert moved.status_code == 200 and moved.json()["team"] == beta["id"]
    assert moved.json()["admin_ceilings"] == {}  # moving is not setting limits


def test_moving_a_user_with_a_limit_in_the_same_edit_checks_the_limits_they_keep(admin_api, alice, team):
    """Regression: a limit given with the move was checked against the new team, the ones kept were
    not (a move alone checks them), so a member kept 100 requests a minute in a team of 30."""
    alice.requests_per_minute, alice.tokens_per_minute = 100, 5000
    alice.save()
    beta = admin_api.post("/api/teams/", {"name": "beta", "requests_per_minute": 30}, format="json").json()
    url = f"/api/users/{alice.pk}/"
    refused = admin_api.patch(url, {"team": beta["id"], "tokens_per_day": 5000}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"requests_per_minute": ["Cannot exceed the team beta's limit of 30."]}
    alice.refresh_from_db()
    assert (alice.team_id, alice.tokens_per_day) == (team.pk, None)
    moved = admin_api.patch(url, {"team": beta["id"], "tokens_per_day": 5000, "requests_per_minute": 20}, format="json")
    assert moved.status_code == 200 and moved.json()["team"] == beta["id"]
    assert moved.json()["tokens_per_minute"] == 5000
    # only the limits given become the admin's ceilings, not those the member kept
    assert moved.json()["admin_ceilings"] == {"tokens_per_day": 5000, "requests_per_minute": 20}


def test_a_lead_does_not_manage_an_admin_or_another_lead_in_the_team(lead_api, team, admin, alice, django_user_model):
    from accounts.choices import Role
    from keys.services import issue_key

    admin.team = team
    admin.save()
    other_lead = django_user_model.objects.create_user(username="leo", role=Role.TEAM_LEAD, team=team)
    for person in (admin, other_lead):
        key, _plaintext = issue_key(owner=person, name="own")
        member = lead_api.patch(f"/api/teams/{team.pk}/members/{person.pk}/", {"requests_per_minute": 1}, format="json")
        assert member.status_code in (403, 404)
        made = lead_api.post("/api/keys/", {"name": "for-lead", "owner": person.pk}, format="json")
        assert made.status_code == 400 and "owner" in made.json()
        assert lead_api.get(f"/api/keys/{key.pk}/").status_code == 404
        assert lead_api.post(f"/api/keys/{key.pk}/rotate/", {}, format="json").status_code == 404
        assert lead_api.patch(f"/api/keys/{key.pk}/", {"tokens_per_day": 1}, format="json").status_code == 404
    admin.refresh_from_db()
    assert admin.requests_per_minute is None
    assert {k["owner_username"] for k in lead_api.get("/api/keys/").json()["results"]} <= {"alice", "lena"}
    # Their own members stay theirs to manage.
    assert (
        lead_api.patch(
            f"/api/teams/{team.pk}/members/{alice.pk}/", {"requests_per_minute": 1}, format="json"
        ).status_code
        == 200
    )


def test_a_lead_cannot_raise_or_clear_their_own_limits_or_their_own_keys_by_token(lena, alice, team):
    from keys.services import issue_key
    from tests.api.conftest import token_client

    lena.tokens_per_day = 1000  # no admin ceiling recorded
    lena.save()
    api = token_client(lena)
    url = f"/api/teams/{team.pk}/members/{lena.pk}/"
    raised = api.patch(url, {"tokens_per_day": 5000}, format="json")
    assert raised.status_code == 400
    assert raised.json()["tokens_per_day"] == ["Only an admin can raise your own limit above 1,000; you can lower it."]
    cleared = api.patch(url, {"tokens_per_day": None}, format="json")
    assert cleared.status_code == 400
    assert cleared.json()["tokens_per_day"] == ["Only an admin can remove your own limit of 1,000; you can lower it."]
    assert api.patch(url, {"tokens_per_day": 900}, format="json").json()["tokens_per_day"] == 900

    own = issue_key(owner=lena, name="ci", requests_per_minute=10)[0]
    raised = api.patch(f"/api/keys/{own.pk}/", {"requests_per_minute": 100}, format="json")
    assert raised.status_code == 400
    assert raised.json()["requests_per_minute"] == [
        "Only an admin can raise your own limit above 10; you can lower it."
    ]
    assert api.patch(f"/api/keys/{own.pk}/", {"requests_per_minute": None}, format="json").status_code == 400
    assert api.patch(f"/api/keys/{own.pk}/", {"requests_per_minute": 5}, format="json").status_code == 200
    lena.refresh_from_db()
    own.refresh_from_db()
    assert (lena.tokens_per_day, own.requests_per_minute) == (900, 5)
    # Her member's key is still hers to raise.
    alices = issue_key(owner=alice, name="ci", requests_per_minute=10)[0]
    assert api.patch(f"/api/keys/{alices.pk}/", {"requests_per_minute": 100}, format="json").status_code == 200
