"""Who may set, change and remove a budget, through the API and the budgets page: admins any; a team
lead their members' and their members' keys', never one an admin set and never one on themselves."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from keys.models import Budget, Key
from keys.services import issue_key, revoke_key, rotate_key
from tests.api.conftest import token_client

pytestmark = pytest.mark.django_db


def api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


@pytest.mark.parametrize("target", ["lena", "alice"])
def test_a_lead_can_neither_raise_nor_remove_a_budget_an_admin_set(request, admin, lena, alice, target):
    person = request.getfixturevalue(target)
    created = api(admin).post("/api/budgets/", {"user": person.pk, "window": "month", "amount": "1"}, format="json")
    assert created.status_code == 201, created.json()
    url = f"/api/budgets/{created.json()['id']}/"
    raised = api(lena).patch(url, {"amount": "9999"}, format="json")
    assert raised.status_code == 403, raised.json()
    assert "only an admin" in raised.json()["detail"].lower()
    assert api(lena).delete(url).status_code == 403
    replaced = api(lena).post("/api/budgets/", {"user": person.pk, "window": "month", "amount": "9999"}, format="json")
    assert replaced.status_code in (400, 403)
    assert Budget.objects.get(user=person, window="month").amount == 1


def test_a_lead_never_sets_a_budget_on_themselves_or_their_own_keys(lena):
    key, _plaintext = issue_key(owner=lena, name="lena laptop")
    for body in ({"user": lena.pk}, {"key": key.pk}):
        response = api(lena).post("/api/budgets/", {**body, "window": "day", "amount": "1000"}, format="json")
        assert response.status_code == 403, response.json()
        assert "Only an admin" in response.json()["detail"]
    assert not Budget.objects.exists()


def test_a_lead_changes_the_budgets_they_set_until_an_admin_changes_one(admin, lena, alice):
    created = api(lena).post("/api/budgets/", {"user": alice.pk, "window": "day", "amount": "5"}, format="json")
    assert created.status_code == 201 and created.json()["set_by_admin"] is False
    url = f"/api/budgets/{created.json()['id']}/"
    assert api(lena).patch(url, {"amount": "6"}, format="json").status_code == 200
    assert api(admin).patch(url, {"amount": "4"}, format="json").json()["set_by_admin"] is True
    assert api(lena).patch(url, {"amount": "6"}, format="json").status_code == 403
    assert Budget.objects.get().amount == 4


def test_the_budgets_page_holds_a_lead_to_the_same_rules(admin, lena, alice):
    mine = Budget.objects.create(user=lena, window="month", amount=Decimal("1"), set_by_admin=True)
    alices = Budget.objects.create(user=alice, window="month", amount=Decimal("2"), set_by_admin=True)
    own_key, _plaintext = issue_key(owner=lena, name="lena laptop")
    client = Client()
    client.force_login(lena)
    page = client.get(reverse("budget_list")).content.decode()
    assert f"user:{alice.pk}" in page
    assert f"user:{lena.pk}" not in page and f"key:{own_key.pk}" not in page
    assert "/remove/" not in page  # both budgets are an admin's: no Remove button
    refused = client.post(reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "month", "amount": "99"})
    assert refused.status_code == 400 and "only an admin can change or remove it" in refused.content.decode()
    for way in (client.get, client.post):  # the confirmation page refuses too, not only its button
        removed = way(reverse("budget_delete", args=[mine.pk]), follow=True)
        assert "Only an admin can set or remove a budget on you" in removed.content.decode()
    client.post(reverse("budget_delete", args=[alices.pk]))
    assert Budget.objects.filter(pk__in=[mine.pk, alices.pk]).count() == 2


def test_removing_a_budget_asks_first(admin, alice):
    budget = Budget.objects.create(user=alice, window="month", amount=Decimal("2"))
    client = Client()
    client.force_login(admin)
    url = reverse("budget_delete", args=[budget.pk])
    assert url in client.get(reverse("budget_list")).content.decode()
    asked = client.get(url).content.decode()
    assert "Remove the per month budget of $2.00 on alice?" in asked and Budget.objects.filter(pk=budget.pk).exists()
    done = client.post(url, follow=True)
    assert "Budget removed." in done.content.decode() and not Budget.objects.filter(pk=budget.pk).exists()


def test_the_remove_budget_page_is_in_the_readers_language(admin, alice):
    budget = Budget.objects.create(user=alice, window="month", amount=Decimal("2"))
    client = Client()
    client.force_login(admin)
    url = reverse("budget_delete", args=[budget.pk])
    asked = client.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "<h1>移除预算</h1>" in asked
    assert "移除 alice 的" in asked and "Remove budget" not in asked
    assert "Remove the per month budget" in client.get(url, HTTP_ACCEPT_LANGUAGE="en").content.decode()


def test_a_second_budget_for_the_same_target_and_window_is_refused_not_swapped_in(admin, alice):
    body = {"user": alice.pk, "window": "day", "amount": "5", "alert_percent": 80}
    first = api(admin).post("/api/budgets/", body, format="json")
    assert first.status_code == 201
    second = api(admin).post("/api/budgets/", {"user": alice.pk, "window": "day", "amount": "50"}, format="json")
    assert second.status_code == 400
    assert second.json() == {"window": ["alice already has a budget for this window; change that one instead."]}
    kept = Budget.objects.get(user=alice)
    assert (kept.pk, kept.amount, kept.alert_percent) == (first.json()["id"], 5, 80)


@pytest.mark.django_db(transaction=True)
def test_of_budgets_posted_at_once_for_one_target_and_window_one_is_created(admin, alice):
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from django.db import connection

    start = Barrier(4)

    def post(amount: int) -> int:
        try:
            client = api(admin)
            start.wait()
            body = {"user": alice.pk, "window": "week", "amount": str(amount)}
            return client.post("/api/budgets/", body, format="json").status_code
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(post, range(1, 5)))
    assert codes == [201, 400, 400, 400]
    assert Budget.objects.filter(user=alice, window="week").count() == 1


def test_what_a_budget_applies_to_cannot_be_patched_and_is_no_error_sent_unchanged(admin, alice, mallory, team):
    budget = Budget.objects.create(user=alice, window="day", amount=Decimal("5"))
    url = f"/api/budgets/{budget.pk}/"
    refused = "This cannot be changed on a budget; create a new budget instead."
    changes = [
        ({"window": "month"}, ["window"]),
        ({"user": mallory.pk}, ["user"]),
        ({"user": None, "team": team.pk}, ["user", "team"]),
        ({"user": alice.pk, "team": team.pk}, ["team"]),
    ]
    for change, fields in changes:
        response = api(admin).patch(url, {**change, "amount": "7"}, format="json")
        assert response.status_code == 400, (change, response.json())
        assert response.json() == {f: [refused] for f in fields}
    budget.refresh_from_db()
    assert (budget.user_id, budget.team_id, budget.window, budget.amount) == (alice.pk, None, "day", 5)
    same = api(admin).patch(url, {"user": alice.pk, "key": None, "window": "day", "amount": "7"}, format="json")
    assert same.status_code == 200 and same.json()["amount"] == "7.0000"


def test_a_top_up_ending_in_the_past_is_an_error_on_the_field_sent(admin, alice):
    budget = Budget.objects.create(user=alice, window="day", amount=Decimal("5"))
    response = api(admin).post(
        f"/api/budgets/{budget.pk}/top-up/", {"amount": "5", "until": "2020-01-01T00:00:00Z"}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"until": ["The top-up must end in the future."]}


def test_a_budget_an_admin_topped_up_is_theirs_a_lead_can_neither_remove_nor_change_it(admin, lena, alice):
    """The lead set alice's budget, the admin raised it for a while: the lead removing it would lift
    the cap the admin set, in the API and on the page alike."""
    created = api(lena).post("/api/budgets/", {"user": alice.pk, "window": "day", "amount": "5"}, format="json")
    url = f"/api/budgets/{created.json()['id']}/"
    until = (timezone.now() + datetime.timedelta(days=1)).isoformat()
    topped = api(admin).post(f"{url}top-up/", {"amount": "50", "until": until}, format="json")
    assert topped.status_code == 200 and topped.json()["set_by_admin"] is True

    token = token_client(lena)
    for refused in (token.delete(url), token.patch(url, {"amount": "1"}, format="json")):
        assert refused.status_code == 403
        assert refused.json()["detail"] == "An admin set this budget; only an admin can change or remove it."
    client = Client()
    client.force_login(lena)
    assert "/remove/" not in client.get(reverse("budget_list")).content.decode()
    removed = client.post(reverse("budget_delete", args=[created.json()["id"]]), follow=True)
    assert "An admin set this budget; only an admin can change or remove it." in removed.content.decode()
    assert (Budget.objects.get().amount, Budget.objects.get().topup) == (5, 50)


def test_the_budgets_page_offers_no_key_that_stopped_working(lena, alice):
    """Every reinstall from the Connect page rotates a key away: those that stopped (and revoked
    ones) are not offered as what a budget applies to."""
    kept, _plaintext = issue_key(owner=alice, name="desk")
    stopped, _plaintext = issue_key(owner=alice, name="llm@laptop")
    replacement, _plaintext = rotate_key(stopped, grace=datetime.timedelta(minutes=10))
    Key.objects.filter(pk=stopped.pk).update(expires_at=timezone.now() - datetime.timedelta(seconds=1))  # grace over
    gone, _plaintext = issue_key(owner=alice, name="old")
    revoke_key(gone)
    page = Client()
    page.force_login(lena)
    html = page.get(reverse("budget_list")).content.decode()
    assert f'value="key:{kept.pk}"' in html and f'value="key:{replacement.pk}"' in html
    assert f'value="key:{stopped.pk}"' not in html and f'value="key:{gone.pk}"' not in html


def test_a_budget_on_someone_whose_models_have_no_price_says_which_ones_stop_working(lena, alice, settings):
    """The gateway refuses a budgeted key on a model without a price (403 model_not_priced): the
    lead who sets the budget is told which of the member's models that stops, not left to find out."""
    from channels.models import Channel, Model, ModelRoute
    from channels.services import set_route_price

    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    channel = Channel.objects.create(name="gpu", base_url="http://127.0.0.1:9/v1", locality="local")
    for name in ("free-chat", "paid-chat"):
        ModelRoute.objects.create(model=Model.objects.create(name=name), channel=channel, upstream_model=name)
    set_route_price(ModelRoute.objects.get(model__name="paid-chat"), input=Decimal("1"), output=Decimal("2"))
    page = Client()
    page.force_login(lena)
    saved = page.post(
        reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "day", "amount": "5"}, follow=True
    ).content.decode()
    assert Budget.objects.filter(user=alice, window="day").exists()
    assert "alice cannot use these models" in saved and "free-chat" in saved, saved
    assert "paid-chat" not in saved.split("cannot use these models")[1].split("</")[0]
    from keys.budgets.services import refused_models

    scoped, _plaintext = issue_key(owner=alice, name="paid only")
    scoped.allowed_models.set(Model.objects.filter(name="paid-chat"))
    assert refused_models(scoped) == [] and refused_models(alice.team) == ["free-chat"]
    ModelRoute.objects.filter(model__name="free-chat").update(unpriced="fallback")  # the admin allows a fallback
    again = page.post(
        reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "day", "amount": "6"}, follow=True
    ).content.decode()
    assert "Budget saved." in again and "cannot use these models" not in again


def test_the_models_a_budget_stops_are_listed_the_chinese_way_in_chinese(lena, alice, settings):
    """Regression (probe): a list in a sentence was joined with ", " in Chinese too, where "、" is
    the separator."""
    from channels.models import Channel, Model, ModelRoute

    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    channel = Channel.objects.create(name="gpu", base_url="http://127.0.0.1:9/v1", locality="local")
    for name in ("free-chat", "free-code"):
        ModelRoute.objects.create(model=Model.objects.create(name=name), channel=channel, upstream_model=name)
    lena.language = "zh-hans"
    lena.save(update_fields=["language"])
    page = Client()
    page.force_login(lena)
    saved = page.post(
        reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "day", "amount": "5"}, follow=True
    ).content.decode()
    assert "free-chat、free-code" in saved, saved
    lena.language = "en"
    lena.save(update_fields=["language"])
    again = page.post(
        reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "day", "amount": "6"}, follow=True
    ).content.decode()
    assert "free-chat, free-code" in again


def test_a_budget_posted_without_a_window_is_monthly(admin, alice):
    """`window` is optional in the schema (default month): leaving it out was a 500 (KeyError)."""
    response = api(admin).post("/api/budgets/", {"user": alice.pk, "amount": "5"}, format="json")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["window"] == "month"
    assert Budget.objects.get(user=alice).window == "month"


def test_a_lead_sees_no_budget_of_an_admin_or_another_lead_in_the_team(django_user_model, admin, lena, alice, team):
    """Their keys are not the lead's to see (404), nor is what they spend."""
    from accounts.choices import Role

    carl = django_user_model.objects.create_user(
        username="carl", password="x-pass-123456", role=Role.TEAM_LEAD, team=team
    )
    boss = django_user_model.objects.create_user(username="boss", password="x-pass-123456", role=Role.ADMIN, team=team)
    hidden = [
        Budget.objects.create(key=issue_key(owner=carl, name="c")[0], window="day", amount=Decimal("3")),
        Budget.objects.create(user=boss, window="day", amount=Decimal("4"), set_by_admin=True),
    ]
    shown = Budget.objects.create(user=alice, window="day", amount=Decimal("5"))
    token = token_client(lena)
    assert [b["id"] for b in token.get("/api/budgets/").json()["results"]] == [shown.pk]
    for budget in hidden:
        assert token.get(f"/api/budgets/{budget.pk}/").status_code == 404
    client = Client()
    client.force_login(lena)
    for page in (reverse("budget_list"), reverse("team_detail", args=[team.pk])):
        html = client.get(page).content.decode()
        assert "alice" in html and "carl" not in html and "boss" not in html, page
    assert token_client(admin).get("/api/budgets/").json()["count"] == 3
