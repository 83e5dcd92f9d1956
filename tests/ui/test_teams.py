"""Team pages: admins make teams and set their ceilings; a team lead manages the members' limits
and keys within them (and nothing else); usage by team."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from accounts.models import Team
from gateway.usage import write_batch
from keys.models import Key
from keys.services import issue_key
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db


def test_an_admin_creates_a_team_and_puts_a_user_in_it(admin_client, alice):
    response = admin_client.post(
        reverse("team_create"), {"name": "alpha", "description": "", "requests_per_minute": "30"}
    )
    team = Team.objects.get(name="alpha")
    assert response.status_code == 302 and response["Location"] == reverse("team_detail", args=[team.pk])
    edit = {"email": "", "first_name": "", "last_name": "", "role": "team_lead", "team": team.pk}
    assert admin_client.post(reverse("user_edit", args=[alice.pk]), edit).status_code == 302
    alice.refresh_from_db()
    assert (alice.team, alice.is_team_lead) == (team, True)
    page = admin_client.get(reverse("team_detail", args=[team.pk])).content.decode()
    assert 'data-member="alice"' in page
    person = admin_client.get(reverse("user_detail", args=[alice.pk])).content.decode()
    assert 'alpha</a> <small class="muted">(its lead)</small>' in person


def test_an_admin_cannot_set_a_member_above_the_teams_limit(admin_client, alice, team):
    team.tokens_per_day = 1000
    team.save()
    edit = {"email": "", "first_name": "", "last_name": "", "role": "developer", "team": team.pk}
    response = admin_client.post(reverse("user_edit", args=[alice.pk]), {**edit, "tokens_per_day": "5000"})
    assert response.status_code == 400
    assert "Cannot exceed the team alpha&#x27;s limit of 1,000." in response.content.decode()


def test_a_lead_sets_a_members_limits_within_the_teams_and_below_an_admins(client, admin_client, lena, alice, team):
    team.requests_per_minute = 30
    team.save()
    edit = {"email": "", "first_name": "", "last_name": "", "role": "developer", "team": team.pk}
    assert (
        admin_client.post(reverse("user_edit", args=[alice.pk]), {**edit, "tokens_per_day": "800"}).status_code == 302
    )
    client.force_login(lena)
    url = reverse("team_member", args=[team.pk, alice.pk])
    assert client.get(url).status_code == 200
    above_team = client.post(url, {"requests_per_minute": "31", "tokens_per_day": "800"})
    assert above_team.status_code == 400 and "limit of 30" in above_team.content.decode()
    above_admin = client.post(url, {"requests_per_minute": "20", "tokens_per_day": "900"})
    assert above_admin.status_code == 400 and "An admin set this limit to 800" in above_admin.content.decode()
    cleared = client.post(url, {"requests_per_minute": "20", "tokens_per_day": ""})
    assert cleared.status_code == 400 and "not remove it" in cleared.content.decode()
    assert client.post(url, {"requests_per_minute": "20", "tokens_per_day": "500"}).status_code == 302
    alice.refresh_from_db()
    assert (alice.requests_per_minute, alice.tokens_per_day, alice.admin_ceilings) == (20, 500, {"tokens_per_day": 800})


def test_a_lead_manages_the_members_keys_and_nothing_else(client, lena, alice, mallory, team):
    alices = issue_key(owner=alice, name="laptop")[0]
    mallorys = issue_key(owner=mallory, name="laptop")[0]
    client.force_login(lena)
    listed = client.get(reverse("key_all")).content.decode()
    assert "Team keys" in listed and alices.masked in listed and mallorys.masked not in listed
    edit = client.post(
        reverse("key_edit", args=[alices.pk]), {"owner": alice.pk, "name": "laptop", "tokens_per_day": "50"}
    )
    assert edit.status_code == 302
    alices.refresh_from_db()
    assert alices.tokens_per_day == 50
    created = client.post(reverse("key_create"), {"owner": alice.pk, "name": "ci"})
    assert created.status_code == 302 and Key.objects.filter(owner=alice, name="ci").exists()
    refused = client.post(reverse("key_create"), {"owner": mallory.pk, "name": "sneaky"})
    assert refused.status_code == 400 and not Key.objects.filter(name="sneaky").exists()
    assert client.get(reverse("key_detail", args=[mallorys.pk])).status_code == 404
    assert client.post(reverse("key_revoke", args=[mallorys.pk])).status_code == 404
    other = Team.objects.create(name="beta")
    assert client.get(reverse("team_detail", args=[other.pk])).status_code == 404
    for admin_page in ("user_list", "team_list", "host_list", "audit_log"):
        assert client.get(reverse(admin_page)).status_code == 403, admin_page
    assert client.get(reverse("team_member", args=[team.pk, mallory.pk])).status_code == 404


def test_a_member_who_is_not_the_lead_cannot_manage_the_team(client, alice, lena, team):
    client.force_login(alice)
    assert client.get(reverse("team_detail", args=[team.pk])).status_code == 403
    assert client.get(reverse("team_member", args=[team.pk, lena.pk])).status_code == 403
    assert client.get(reverse("key_all")).status_code == 403


def test_usage_by_team_for_admins_and_the_teams_own_for_its_lead(client, admin_client, lena, alice, mallory, team):
    write_batch(
        [
            event(issue_key(owner=alice, name="laptop")[0], team_id=team.pk, completion_tokens=97),
            event(issue_key(owner=mallory, name="laptop")[0], completion_tokens=7),
        ]
    )
    assert reverse("request_log_list") in admin_client.get(reverse("usage_admin")).content.decode()
    download = admin_client.get(reverse("usage_admin") + "?group_by=team&format=csv")
    header, *rows = csv.reader(io.StringIO(download.content.decode("utf-8-sig")))
    tokens = {r[0]: r[header.index("Total tokens")] for r in rows}
    assert (tokens["alpha"], tokens["(none)"]) == ("100", "10")
    # The page and the CSV say "no team" in their reader's language (the API keeps "(none)").
    admin_client.post(reverse("set_language"), {"language": "zh-hans", "next": "/"})
    chinese = admin_client.get(reverse("usage_admin") + "?group_by=team").content.decode()
    assert '<td><span class="muted">（无）</span></td>' in chinese
    chinese_csv = admin_client.get(reverse("usage_admin") + "?group_by=team&format=csv").content.decode("utf-8-sig")
    assert "\n（无）," in chinese_csv and "(none)" not in chinese_csv
    admin_client.post(reverse("set_language"), {"language": "en", "next": "/"})
    client.force_login(lena)
    page = client.get(reverse("usage_admin") + "?group_by=user")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Team usage by user" in html and "alice" in html and "mallory" not in html
    assert reverse("request_log_list") not in html  # request logs are the admins' (linked for them above)
    lead_csv = client.get(reverse("usage_admin") + "?group_by=user&format=csv").content.decode("utf-8-sig")
    assert [r[0] for r in csv.reader(io.StringIO(lead_csv))] == ["User", "alice"]


def test_my_usage_shows_the_teams_use_against_its_limits(client, alice, lena, team):
    team.tokens_per_day = 1000
    team.save()
    write_batch(
        [
            event(issue_key(owner=alice, name="laptop")[0], team_id=team.pk, completion_tokens=97),
            event(issue_key(owner=lena, name="laptop")[0], team_id=team.pk, completion_tokens=97),
        ]
    )
    client.force_login(alice)
    html = client.get(reverse("usage")).content.decode()
    row = html[html.index("Your team alpha (all members)") :][:400]
    assert "200" in row and "1,000" in row


def test_the_team_keys_owner_filter_names_only_the_team(client, lena, alice, mallory, team):
    client.force_login(lena)
    html = client.get(reverse("key_all")).content.decode()
    assert ">alice<" in html and ">lena<" in html and "mallory" not in html


def test_an_admin_saving_a_user_records_only_the_limits_they_changed(admin_client, lena, alice, team):
    alice.requests_per_minute = 20  # as her lead set it
    alice.save()
    edit = {"email": "", "first_name": "", "last_name": "", "role": "developer", "team": team.pk}
    response = admin_client.post(
        reverse("user_edit", args=[alice.pk]), {**edit, "requests_per_minute": "20", "tokens_per_day": "800"}
    )
    assert response.status_code == 302
    alice.refresh_from_db()
    assert alice.admin_ceilings == {"tokens_per_day": 800}


def test_a_member_cannot_lift_a_limit_their_lead_set_and_the_key_page_credits_the_lead(client, lena, alice, team):
    key = issue_key(owner=alice, name="laptop")[0]
    client.force_login(lena)
    form = {"owner": alice.pk, "name": "laptop", "tokens_per_day": "50"}
    assert client.post(reverse("key_edit", args=[key.pk]), form).status_code == 302
    key.refresh_from_db()
    assert key.lead_ceilings == {"tokens_per_day": 50}

    client.force_login(alice)
    edit_page = client.get(reverse("key_edit", args=[key.pk])).content.decode()
    assert "Set by a team lead: at most 50" in edit_page
    cleared = client.post(reverse("key_edit", args=[key.pk]), {**form, "tokens_per_day": ""})
    assert cleared.status_code == 400
    assert "A team lead set this limit to 50; you can lower it but not remove it." in cleared.content.decode()
    key.refresh_from_db()
    assert key.tokens_per_day == 50
    page = client.get(reverse("key_detail", args=[key.pk])).content.decode()
    row = page.split('data-limit="tokens_per_day"')[1].split("</tr>")[0]
    assert "key, set by a team lead" in row and "a team lead's ceiling on this key: 50" in row
    assert "set by alice" not in row

    # Lowered by alice, the row credits her; the lead's ceiling still holds.
    assert client.post(reverse("key_edit", args=[key.pk]), {**form, "tokens_per_day": "20"}).status_code == 302
    row = client.get(reverse("key_detail", args=[key.pk])).content.decode().split('data-limit="tokens_per_day"')[1]
    assert "key, set by alice" in row.split("</tr>")[0]
    assert client.post(reverse("key_edit", args=[key.pk]), {**form, "tokens_per_day": "51"}).status_code == 400

    # The lead lifts it.
    client.force_login(lena)
    assert client.post(reverse("key_edit", args=[key.pk]), {**form, "tokens_per_day": ""}).status_code == 302
    key.refresh_from_db()
    assert (key.tokens_per_day, key.lead_ceilings) == (None, {})


def test_a_key_made_for_someone_else_says_whose_it_is(client, lena, alice, team):
    client.force_login(lena)
    created = client.post(reverse("key_create"), {"owner": alice.pk, "name": "ci"})
    page = client.get(created["Location"]).content.decode()
    assert "Key for alice" in page and "Your new key" not in page
    assert "← Keys of alice" in page and "← My keys" not in page


def test_a_lead_does_not_see_or_manage_an_admin_in_the_team(client, lena, team, admin):
    admin.team = team
    admin.save()
    key, _plaintext = issue_key(owner=admin, name="own")
    client.force_login(lena)
    page = client.get(reverse("team_detail", args=[team.pk])).content.decode()
    assert 'data-member="alice"' in page and 'data-member="admin"' not in page
    assert client.get(reverse("team_member", args=[team.pk, admin.pk])).status_code == 404
    for name in ("key_detail", "key_edit", "key_rotate"):
        assert client.get(reverse(name, args=[key.pk])).status_code == 404
    assert client.post(reverse("key_rotate", args=[key.pk]), {"grace": "0"}).status_code == 404
    assert Key.objects.get(pk=key.pk).revoked_at is None


def test_moving_a_member_out_of_the_team_on_the_user_page_lifts_the_leads_locks(client, admin, lena, alice, team):
    key = issue_key(owner=alice, name="laptop")[0]
    client.force_login(lena)
    form = {"owner": alice.pk, "name": "laptop", "tokens_per_day": "50"}
    assert client.post(reverse("key_edit", args=[key.pk]), form).status_code == 302
    client.force_login(admin)
    edit = {"email": "", "first_name": "", "last_name": "", "role": "developer", "team": ""}
    assert client.post(reverse("user_edit", args=[alice.pk]), edit).status_code == 302
    key.refresh_from_db()
    assert (key.tokens_per_day, key.lead_ceilings) == (50, {})
    audit = client.get(reverse("audit_log")).content.decode()
    assert "left the team alpha: the locks its leads set on 1 key(s) were lifted" in audit

    client.force_login(alice)
    assert "Set by a team lead" not in client.get(reverse("key_edit", args=[key.pk])).content.decode()
    assert client.post(reverse("key_edit", args=[key.pk]), {**form, "tokens_per_day": ""}).status_code == 302


def test_a_lead_choosing_someone_outside_the_team_as_a_keys_owner_is_told_in_their_language(client, lena, mallory):
    lena.language = "zh-hans"
    lena.save()
    client.force_login(lena)
    refused = client.post(reverse("key_create"), {"owner": mallory.pk, "name": "z"})
    assert refused.status_code == 400 and "请选择你团队中一个已启用的成员。" in refused.content.decode()


def test_a_lead_can_lower_but_not_raise_or_clear_their_own_limits_on_the_member_page(client, admin, lena, team):
    # As an admin left them before ceilings were recorded (or through a command): no admin ceiling.
    lena.tokens_per_day, lena.requests_per_minute = 1000, None
    lena.save()
    client.force_login(lena)
    url = reverse("team_member", args=[team.pk, lena.pk])
    raised = client.post(url, {"tokens_per_day": "5000"})
    assert raised.status_code == 400
    assert "Only an admin can raise your own limit above 1,000; you can lower it." in raised.content.decode()
    assert "only an admin can raise or clear it" in client.get(url).content.decode()
    cleared = client.post(url, {"tokens_per_day": ""})
    assert cleared.status_code == 400
    assert "Only an admin can remove your own limit of 1,000; you can lower it." in cleared.content.decode()
    lena.language = "zh-hans"
    lena.save()
    chinese = client.post(url, {"tokens_per_day": "5000"})
    assert chinese.status_code == 400 and "只有管理员才能把你自己的限额提高到 1,000 以上" in chinese.content.decode()
    lena.refresh_from_db()
    assert (lena.tokens_per_day, lena.requests_per_minute) == (1000, None)
    lena.language = "en"
    lena.save()

    # Lowering is theirs; what they lowered stays theirs to raise no further.
    assert client.post(url, {"tokens_per_day": "600", "requests_per_minute": "10"}).status_code == 302
    lena.refresh_from_db()
    assert (lena.tokens_per_day, lena.requests_per_minute, lena.admin_ceilings) == (600, 10, {})
    assert client.post(url, {"tokens_per_day": "800", "requests_per_minute": "10"}).status_code == 400

    # Under a ceiling an admin recorded, they may come back up to it, not past it.
    client.force_login(admin)
    assert client.post(url, {"tokens_per_day": "2000", "requests_per_minute": "10"}).status_code == 302
    client.force_login(lena)
    assert client.post(url, {"tokens_per_day": "1500", "requests_per_minute": "10"}).status_code == 302
    assert client.post(url, {"tokens_per_day": "2000", "requests_per_minute": "10"}).status_code == 302
    over = client.post(url, {"tokens_per_day": "2001", "requests_per_minute": "10"})
    assert over.status_code == 400 and "An admin set this limit to 2,000" in over.content.decode()


def test_a_lead_can_lower_but_not_raise_or_clear_the_limits_of_their_own_key(client, lena, alice, team):
    own = issue_key(owner=lena, name="laptop", tokens_per_day=1000)[0]
    client.force_login(lena)
    url = reverse("key_edit", args=[own.pk])
    form = {"owner": lena.pk, "name": "laptop"}
    raised = client.post(url, {**form, "tokens_per_day": "5000"})
    assert raised.status_code == 400
    assert "Only an admin can raise your own limit above 1,000; you can lower it." in raised.content.decode()
    assert "Your own key: at most 1,000" in client.get(url).content.decode()
    cleared = client.post(url, {**form, "tokens_per_day": ""})
    assert cleared.status_code == 400 and "Only an admin can remove your own limit" in cleared.content.decode()
    own.refresh_from_db()
    assert own.tokens_per_day == 1000
    assert client.post(url, {**form, "tokens_per_day": "400"}).status_code == 302
    own.refresh_from_db()
    assert own.tokens_per_day == 400

    # A member's key is still the lead's to raise (within what an admin and the team allow).
    alices = issue_key(owner=alice, name="laptop", tokens_per_day=1000)[0]
    member = {"owner": alice.pk, "name": "laptop", "tokens_per_day": "5000"}
    assert client.post(reverse("key_edit", args=[alices.pk]), member).status_code == 302
