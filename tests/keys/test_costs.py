"""Cost beside tokens: the usage pages (with a visible "no price" warning), the CSV, the usage API
and the daily buckets; budgets on My usage and Connect; the price catalogue as data."""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from channels.models import Channel, Model, ModelRoute, RoutePrice
from channels.prices import NANOS, Rates, amount_text, format_money, in_effect, per_token
from channels.services import load_price_catalogue, set_route_price
from gateway.usage import write_batch
from keys.budgets.services import save_budget, status_of
from keys.models import Budget, UsageDaily
from keys.services import issue_key
from tests.keys.test_usage import event

pytestmark = pytest.mark.django_db

CENT = NANOS // 100


@pytest.fixture
def alice_key(alice):
    return issue_key(owner=alice, name="laptop")[0]


def test_price_arithmetic_is_exact():
    assert per_token("0.075") == 75  # nano-units per token
    rates = Rates(
        since=0,
        input=per_token("3"),
        cached_input=per_token("0.3"),
        cache_write=per_token("3.75"),
        output=per_token("15"),
    )
    # 1000 prompt tokens of which 600 cached and 100 written, 200 output
    assert rates.cost(1000, 200, cached=600, written=100) == 300 * 3000 + 600 * 300 + 100 * 3750 + 200 * 15000
    assert rates.most(1000, 200) == 1000 * 3750 + 200 * 15000
    assert in_effect((Rates(10, 1, 1, 1, 1), Rates(20, 2, 2, 2, 2)), 15).input == 1
    assert in_effect((Rates(10, 1, 1, 1, 1),), 5) is None
    assert format_money(12_400) == "$0.0000"
    assert format_money(123_456_789) == "$0.1235"


def test_usage_pages_csv_and_api_show_the_cost_and_warn_of_no_price(alice_key, alice, admin):
    alice_client, admin_client = Client(), Client()
    alice_client.force_login(alice)
    admin_client.force_login(admin)
    write_batch([event(alice_key, cost_nanos=3 * CENT, pricing="priced")])
    write_batch([event(alice_key, cost_nanos=None, pricing="none", model="local-coder")])
    bucket = UsageDaily.objects.get(model="qwen3-32b")
    assert (bucket.cost_nanos, bucket.unpriced_requests) == (3 * CENT, 0)
    assert UsageDaily.objects.get(model="local-coder").unpriced_requests == 1

    mine = alice_client.get(reverse("usage")).content.decode()
    assert (
        "$0.0300" in mine and 'data-testid="no-price"' in mine and "1 request went to a route without a price" in mine
    )
    admin = admin_client.get(reverse("usage_admin") + "?group_by=model").content.decode()
    assert "$0.0300" in admin and "1 request with no price" in admin

    download = admin_client.get(reverse("usage_admin") + "?group_by=model&format=csv")
    rows = list(csv.DictReader(io.StringIO(download.content.decode("utf-8-sig"))))
    by_model = {r["Model"]: r for r in rows}
    assert by_model["qwen3-32b"]["Cost"] == "0.030000000" and by_model["qwen3-32b"]["Currency"] == "USD"
    assert by_model["local-coder"]["Unpriced requests"] == "1"

    api = APIClient()
    api.force_authenticate(alice)
    summary = api.get("/api/usage/summary/?group_by=model").json()
    assert summary["currency"] == "USD"
    costs = {r["group"]: (r["cost"], r["unpriced_requests"]) for r in summary["results"]}
    assert costs == {"qwen3-32b": ("0.030000000", 0), "local-coder": ("0.000000000", 1)}
    records = {r["model"]: (r["cost"], r["pricing"]) for r in api.get("/api/usage/records/").json()["results"]}
    assert records == {"qwen3-32b": ("0.030000000", "priced"), "local-coder": (None, "none")}


def test_developer_sees_spend_and_remaining_budget_on_my_usage_and_connect(alice_key, alice_client, alice, team):
    Budget.objects.create(team=team, window="month", amount=Decimal("10"))
    Budget.objects.create(key=alice_key, window="day", amount=Decimal("0.05"))
    write_batch([event(alice_key, cost_nanos=2 * CENT, team_id=team.id)])
    for page in (reverse("usage"), reverse("connect")):
        html = alice_client.get(page).content.decode()
        assert 'data-testid="budgets"' in html
        assert "$0.03" in html  # $0.05 - $0.02 left of the key's daily budget
        assert "$9.98" in html  # of the team's monthly


def test_a_budget_row_shows_its_three_amounts_with_the_same_decimals(alice_key, alice_client, team):
    """Regression (probe): the cap had 2 decimals, the spend and what remains 4 ($12.50 against
    $12.5000). Cents for all three; 4 decimals for all three only when an amount would read $0.00."""
    budget = Budget.objects.create(team=team, window="month", amount=Decimal("12.5"))
    write_batch([event(alice_key, cost_nanos=3 * CENT, team_id=team.id)])

    def row() -> list[str]:
        html = alice_client.get(reverse("usage")).content.decode()
        table = html[html.index('data-testid="budgets"') :]
        return re.findall(r"\$[0-9.]+", table[: table.index("</table>")])

    assert row() == ["$0.03", "$12.50", "$12.47"]
    budget.amount = Decimal("0.035")  # $0.005 left: as cents it would read $0.00
    budget.save()
    assert row() == ["$0.0300", "$0.0350", "$0.0050"]


def test_the_key_and_team_pages_show_their_budgets(alice_key, alice_client, alice, mallory, team, lena, client):
    Budget.objects.create(team=team, window="month", amount=Decimal("10"))
    Budget.objects.create(key=alice_key, window="day", amount=Decimal("0.05"))
    Budget.objects.create(user=mallory, window="day", amount=Decimal("7"))  # not alice's, not alpha's
    write_batch([event(alice_key, cost_nanos=2 * CENT, team_id=team.id)])
    html = alice_client.get(reverse("key_detail", args=[alice_key.pk])).content.decode()
    assert 'data-testid="budgets"' in html
    assert "$0.03" in html and "Team alpha (all members)" in html and "$9.98" in html
    assert "$7.00" not in html
    client.force_login(lena)
    team_page = client.get(reverse("team_detail", args=[team.pk])).content.decode()
    assert "Key laptop" in team_page and "$0.03" in team_page and "$9.98" in team_page
    assert "$7.00" not in team_page


def test_a_lead_sets_members_budgets_within_the_teams(lena, alice, mallory, team, admin):
    from django.core.exceptions import PermissionDenied, ValidationError

    save_budget(editor=admin, target=team, window="month", amount="100")
    budget = save_budget(editor=lena, target=alice, window="month", amount="40")
    assert status_of(budget).cap == 40 * NANOS
    with pytest.raises(ValidationError):
        save_budget(editor=lena, target=alice, window="month", amount="101")
    with pytest.raises(PermissionDenied):
        save_budget(editor=lena, target=mallory, window="month", amount="1")
    with pytest.raises(PermissionDenied):
        save_budget(editor=lena, target=team, window="month", amount="1000")
    with pytest.raises(PermissionDenied):
        save_budget(editor=alice, target=alice, window="day", amount="1")


def test_the_catalogue_prices_known_external_routes_and_keeps_history():
    cloud = Channel.objects.create(name="openai", base_url="https://api.openai.com/v1", locality="external")
    local = Channel.objects.create(name="gpu", base_url="http://10.0.0.5:8000/v1", locality="local")
    mini = ModelRoute.objects.create(
        model=Model.objects.create(name="mini"), channel=cloud, upstream_model="gpt-4o-mini-2024-07-18"
    )
    ModelRoute.objects.create(model=Model.objects.create(name="qwen"), channel=local, upstream_model="gpt-4o")
    ModelRoute.objects.create(model=Model.objects.create(name="odd"), channel=cloud, upstream_model="unknown-model")
    added = load_price_catalogue()
    assert [p.route_id for p in added] == [mini.id]
    price = RoutePrice.objects.get(route=mini)
    assert (price.input, price.cached_input, price.output) == (Decimal("0.150"), Decimal("0.075"), Decimal("0.600"))
    assert load_price_catalogue() == []  # priced routes are left alone
    out = io.StringIO()
    call_command("load_price_catalogue", "--overwrite", stdout=out)
    assert "1 route(s) priced" in out.getvalue()
    assert RoutePrice.objects.filter(route=mini).count() == 2  # a new row; the old one kept


def test_a_price_row_is_never_edited_twice_at_the_same_moment(alice_key):
    from django.core.exceptions import ValidationError
    from django.utils import timezone

    channel = Channel.objects.create(name="c", base_url="https://example.com/v1")
    route = ModelRoute.objects.create(model=Model.objects.create(name="m"), channel=channel)
    when = timezone.now()
    set_route_price(route, input="1", output="2", effective_from=when)
    with pytest.raises(ValidationError):
        set_route_price(route, input="3", output="4", effective_from=when)
    with pytest.raises(ValidationError):
        set_route_price(route, input="-1", output="4")


def test_admin_sets_a_price_and_loads_the_catalogue_on_the_prices_page(admin, alice):
    admin_client, alice_client = Client(), Client()
    admin_client.force_login(admin)
    alice_client.force_login(alice)
    channel = Channel.objects.create(name="openai", base_url="https://api.openai.com/v1", locality="external")
    route = ModelRoute.objects.create(model=Model.objects.create(name="m"), channel=channel, upstream_model="gpt-4.1")
    page = admin_client.get(reverse("price_list")).content.decode()
    assert "no price" in page and 'data-testid="unpriced-routes"' in page
    r = admin_client.post(reverse("price_list"), {"route": route.pk, "input": "-1", "output": "2"})
    assert r.status_code == 400 and not RoutePrice.objects.exists()
    r = admin_client.post(reverse("price_list"), {"route": route.pk, "input": "2.5", "output": "10"})
    assert r.status_code == 302 and RoutePrice.objects.get().output == Decimal("10.000")
    other = ModelRoute.objects.create(model=Model.objects.create(name="n"), channel=channel, upstream_model="o3")
    admin_client.post(reverse("price_list"), {"action": "catalogue"})
    assert RoutePrice.objects.get(route=other).input == Decimal("2.000")
    assert alice_client.get(reverse("price_list")).status_code == 403


def test_a_lead_sets_a_members_budget_on_the_budgets_page_within_the_teams(lena, alice, team, admin, client):
    save_budget(editor=admin, target=team, window="month", amount="100")
    client.force_login(lena)
    page = client.get(reverse("budget_list")).content.decode()
    assert f"user:{alice.pk}" in page and f"team:{team.pk}" not in page
    too_much = client.post(reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "month", "amount": "150"})
    assert too_much.status_code == 400 and "the team&#x27;s budget" in too_much.content.decode()
    ok = client.post(reverse("budget_list"), {"target": f"user:{alice.pk}", "window": "month", "amount": "50"})
    assert ok.status_code == 302 and Budget.objects.get(user=alice).amount == 50
    client.force_login(alice)
    assert client.get(reverse("budget_list")).status_code == 403


def test_a_budgets_spend_is_the_records_of_its_window_at_its_edges_even_after_they_are_pruned(
    alice_key, alice, team, alice_client, monkeypatch
):
    """Each window is whole UTC days, as the gateway's Redis counters: a record an instant before
    it starts or at its end counts in the neighbouring window, one at its start or an instant before
    its end counts in it. The pages read the daily rollups, so the spend equals the sum of the raw
    records of the window, and a one-off budget keeps it once the raw records are pruned."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from keys.budgets.services import statuses, window_bounds
    from keys.models import UsageRecord

    now = dt.datetime(2026, 11, 18, 12, tzinfo=dt.UTC)  # a Wednesday
    monkeypatch.setattr(timezone, "now", lambda: now)
    budgets = [
        Budget.objects.create(key=alice_key, window="day", amount=Decimal("1000")),
        Budget.objects.create(user=alice, window="week", amount=Decimal("1000")),
        Budget.objects.create(team=team, window="month", amount=Decimal("1000")),
        Budget.objects.create(key=alice_key, window="once", amount=Decimal("1000")),
    ]
    tick = dt.timedelta(microseconds=1)
    edges = sorted({edge for b in budgets[:3] for edge in window_bounds(b.window, now)})
    instants = [t for edge in edges for t in (edge - tick, edge)]
    # Costs of 1, 2, 4 … cents: every window's sum is its own amount.
    write_batch(
        [
            event(alice_key, created=t, team_id=team.id, cost_nanos=CENT << i, pricing="priced", request_id=f"r{i}")
            for i, t in enumerate(instants)
        ]
    )

    def of_records(budget: Budget) -> int:
        start, end = window_bounds(budget.window, now)
        records = UsageRecord.objects.all()
        if start is not None:
            records = records.filter(created__gte=start, created__lt=end)
        return sum(records.values_list("cost_nanos", flat=True))

    expected = [of_records(b) for b in budgets]
    assert expected[0] == (CENT << instants.index(edges[2])) + (CENT << instants.index(edges[3] - tick))
    assert len(set(expected)) == 4 and expected[3] == sum(CENT << i for i in range(len(instants)))
    with CaptureQueriesContext(connection) as q:
        shown = statuses(budgets)
    assert [s.spent for s in shown] == expected
    assert len([x for x in q.captured_queries if "keys_usagedaily" in x["sql"]]) == 1  # every budget, one query
    page = alice_client.get(reverse("key_detail", args=[alice_key.pk])).content.decode()
    assert all(s.spent_text in page for s in shown)
    api = APIClient()
    api.force_authenticate(alice)
    listed = api.get("/api/budgets/").json()
    listed = listed["results"] if isinstance(listed, dict) else listed
    assert {b["id"]: b["spent"] for b in listed} == {
        b.id: amount_text(n) for b, n in zip(budgets, expected, strict=True)
    }

    UsageRecord.objects.all().delete()  # the raw records' retention ran out; the rollups stay
    assert [s.spent for s in statuses(budgets)] == expected
