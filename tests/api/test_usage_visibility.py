"""Whose usage rows a team lead sees. The team's totals count every member (an admin or another
lead in the team included); but the per-request records and per-key rows of those, whose keys are
not the lead's to see (a 404 on the key, no budgets), are not listed to the lead."""

from __future__ import annotations

import csv
import io

import pytest
from rest_framework.test import APIClient

from accounts.choices import Role
from gateway.usage import write_batch
from keys.models import UsageDaily, UsageRecord
from keys.services import issue_key
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db


@pytest.fixture
def team_usage(admin, alice, lena, team, django_user_model) -> dict:
    """One request each by alice (a developer), lena (the lead), an admin and another lead of the
    team, each through their own key: 8 tokens apiece."""
    admin.team = team
    admin.save()
    lou = django_user_model.objects.create_user(username="lou", role=Role.TEAM_LEAD, team=team)
    keys = {user.username: issue_key(owner=user, name=f"{user.username}-key")[0] for user in (alice, lena, admin, lou)}
    write_batch([event(key, team_id=team.pk, request_id=name) for name, key in keys.items()])
    return keys


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def listed(client, path: str, field: str) -> set:
    response = client.get(path)
    assert response.status_code == 200, response.content[:300]
    return {row[field] for row in response.json()["results"]}


def test_a_lead_lists_the_requests_of_the_members_they_manage_not_an_admins_or_another_leads(lena, team_usage):
    lead = api(lena)
    assert listed(lead, "/api/usage/records/", "request_id") == {"alice", "lena"}
    assert listed(lead, "/api/usage/daily/", "key") == {team_usage["alice"].pk, team_usage["lena"].pk}
    admins = UsageRecord.objects.get(request_id="admin")
    assert lead.get(f"/api/usage/records/{admins.pk}/").status_code == 404
    assert lead.get(f"/api/usage/daily/{UsageDaily.objects.get(key=team_usage['lou']).pk}/").status_code == 404
    assert lead.get(f"/api/keys/{team_usage['lou'].pk}/").status_code == 404  # the same rule as keys


def test_a_leads_team_totals_count_everyone_but_name_only_the_keys_they_may_see(lena, team_usage):
    lead = api(lena)
    by_user = lead.get("/api/usage/summary/?group_by=user").json()["results"]
    assert {row["group"]: row["total_tokens"] for row in by_user} == {"alice": 8, "lena": 8, "admin": 8, "lou": 8}
    by_key = {
        row["group"]: row["total_tokens"] for row in lead.get("/api/usage/summary/?group_by=key").json()["results"]
    }
    alice_key, lena_key = team_usage["alice"], team_usage["lena"]
    assert by_key == {
        f"alice-key ({alice_key.masked}, alice)": 8,
        f"lena-key ({lena_key.masked}, lena)": 8,
        "(keys you cannot see)": 16,
    }


def test_a_developer_lists_only_their_own_usage(alice, team_usage):
    developer = api(alice)
    assert listed(developer, "/api/usage/records/", "request_id") == {"alice"}
    assert listed(developer, "/api/usage/summary/?group_by=key", "group") == {
        f"alice-key ({team_usage['alice'].masked}, alice)"
    }


def test_an_admin_lists_and_names_everyones_usage(admin, team_usage):
    everyone = api(admin)
    assert listed(everyone, "/api/usage/records/", "request_id") == {"alice", "lena", "admin", "lou"}
    keys = listed(everyone, "/api/usage/summary/?group_by=key", "group")
    assert keys == {f"{key.name} ({key.masked}, {name})" for name, key in team_usage.items()}


def test_the_leads_usage_page_and_csv_by_key_do_not_name_an_admins_or_another_leads_key(client, lena, team_usage):
    client.force_login(lena)
    page = client.get("/usage/all/?group_by=key").content.decode()
    assert "alice-key" in page and "lena-key" in page and "(keys you cannot see)" in page
    assert "admin-key" not in page and "lou-key" not in page
    chinese = client.get("/usage/all/?group_by=key", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "(keys you cannot see)" not in chinese and "admin-key" not in chinese
    download = client.get("/usage/all/?group_by=key&format=csv").content.decode("utf-8-sig")
    header, *rows = csv.reader(io.StringIO(download))
    tokens = {row[0]: row[header.index("Total tokens")] for row in rows}
    assert tokens == {
        f"alice-key ({team_usage['alice'].masked}, alice)": "8",
        f"lena-key ({team_usage['lena'].masked}, lena)": "8",
        "(keys you cannot see)": "16",  # the admin's and lou's, counted in the team's total
    }


def test_the_admins_usage_page_names_every_key(admin_client, team_usage):
    page = admin_client.get("/usage/all/?group_by=key").content.decode()
    assert all(f"{name}-key" in page for name in team_usage) and "(keys you cannot see)" not in page
