"""Money: every usage record's cost from the route's price in effect, and budgets enforced in the
same atomic Redis admission as the token limits (reserve the most a request can cost, settle to
the real cost), exact across two gateway processes."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal

import httpx
import pytest
import redis
from django.conf import settings as django_settings
from django.urls import reverse
from django.utils import timezone

from accounts.choices import Role
from accounts.models import User
from channels.models import Model
from channels.prices import NANOS
from channels.services import set_route_price
from clientconfigs.services import usable_models
from keys.models import Budget, UsageDaily, UsageRecord
from keys.services import issue_key, rotate_key
from tests.gateway.conftest import add_channel, leave_once, wait_for
from tests.gateway.test_limits import SHORT, burst, post
from tests.gateway.test_metrics import TOKEN, delta, scrape
from tests.gateway.test_team_limits import burst_keys

# One SHORT request: 1 prompt token and 5 reserved output tokens.
# At 1000 / 2000 per million tokens it reserves 1 * 1000 + 5 * 2000 = 11,000 per million: $0.011.
INPUT, OUTPUT = Decimal("1000"), Decimal("2000")
MOST = (1 * 1000 + 5 * 2000) * 1000  # nano-units
DAILY = Decimal("0.05")


def cost_of(prompt: int, completion: int, *, input=INPUT, output=OUTPUT, cached: int = 0, cached_price=None) -> int:
    per = 1000  # nano-units per token for a price of 1 per million
    cached_price = input if cached_price is None else cached_price
    return int(((prompt - cached) * input + cached * cached_price + completion * output) * per)


def spend(**match) -> int:
    return sum(r.cost_nanos or 0 for r in UsageRecord.objects.filter(status="ok", **match))


def test_cached_tokens_are_priced_at_their_price(setup, gateway_url, upstream, settings):
    settings.PORTAL_METRICS_TOKEN = TOKEN
    before = scrape(gateway_url)
    set_route_price(setup.route, input="1.000", cached_input="0.100", output="2.000")
    upstream.behave(cached=4, tokens=3)
    body = {**SHORT, "messages": [{"role": "user", "content": " ".join(["word"] * 10)}], "max_tokens": 3}
    assert post(gateway_url, setup.plaintext, body).status_code == 200
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (10, 4, 3)
    # 6 plain prompt tokens at 1.000, 4 cached at 0.100, 3 output at 2.000 per million
    assert record.cost_nanos == 6 * 1000 + 4 * 100 + 3 * 2000 == 12_400
    assert record.pricing == "priced"
    assert UsageDaily.objects.get(key=setup.key).cost_nanos == 12_400
    cost = delta(scrape(gateway_url), before, "gateway_cost_total", model="qwen3-32b", currency="USD")
    assert sum(cost.values()) == pytest.approx(12_400 / NANOS)


def test_a_price_change_mid_month_keeps_earlier_costs(setup, gateway_url, upstream):
    set_route_price(setup.route, input="1", output="2", effective_from=timezone.now() - dt.timedelta(days=10))
    assert post(gateway_url, setup.plaintext).status_code == 200
    first = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert first.cost_nanos == cost_of(1, 5, input=1, output=2)
    set_route_price(setup.route, input="3", output="7")  # from now on
    # and one not yet in effect, which must not apply
    set_route_price(setup.route, input="100", output="100", effective_from=timezone.now() + dt.timedelta(days=3))
    assert post(gateway_url, setup.plaintext).status_code == 200
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 2)
    second = UsageRecord.objects.filter(key=setup.key).exclude(pk=first.pk).get()
    assert second.cost_nanos == cost_of(1, 5, input=3, output=7)
    first.refresh_from_db()
    assert first.cost_nanos == cost_of(1, 5, input=1, output=2)


def test_an_unpriced_route_is_no_price_not_zero(setup, gateway_url):
    assert post(gateway_url, setup.plaintext).status_code == 200
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert record.cost_nanos is None and record.pricing == "none"
    wait_for(lambda: UsageDaily.objects.filter(key=setup.key, unpriced_requests=1).exists())


@pytest.fixture
def local_unpriced(transactional_db, upstream, alice):
    model = Model.objects.create(name="local-coder")
    add_channel(upstream, "gpu-box", model=model, locality="local")
    key, plaintext = issue_key(owner=alice, name="budgeted")
    Budget.objects.create(key=key, window="day", amount=DAILY)
    return key, plaintext


def test_a_budgeted_key_is_refused_on_an_unpriced_route_when_the_admin_chose_so(local_unpriced, gateway_url, settings):
    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    key, plaintext = local_unpriced
    refused = post(gateway_url, plaintext, {**SHORT, "model": "local-coder"})
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["code"] == "model_not_priced" and "has no price" in error["message"]
    # a key without a budget still uses it (its record says "no price")
    free, free_plain = issue_key(owner=key.owner, name="unbudgeted")
    assert post(gateway_url, free_plain, {**SHORT, "model": "local-coder"}).status_code == 200
    # What is refused is not offered (regression: the budgeted key's list and its client files
    # named local-coder, and a developer who picked it in their client met the 403).
    assert "local-coder" not in listed(gateway_url, plaintext) and "local-coder" in listed(gateway_url, free_plain)
    one = httpx.get(f"{gateway_url}/v1/models/local-coder", headers={"Authorization": f"Bearer {plaintext}"})
    assert one.status_code == 403 and one.json()["error"]["code"] == "model_not_priced"  # said, as a request is
    free_one = httpx.get(f"{gateway_url}/v1/models/local-coder", headers={"Authorization": f"Bearer {free_plain}"})
    assert free_one.status_code == 200 and free_one.json()["id"] == "local-coder"
    assert "local-coder" not in names(usable_models(key.owner, key)) and "local-coder" in names(
        usable_models(key.owner, free)
    )


def listed(gateway_url: str, plaintext: str) -> set[str]:
    """The ids `/v1/models` lists to a key (OpenAI's shape and Anthropic's, which Claude Code reads)."""
    openai = httpx.get(f"{gateway_url}/v1/models", headers={"Authorization": f"Bearer {plaintext}"}).json()["data"]
    claude = httpx.get(
        f"{gateway_url}/v1/models", headers={"x-api-key": plaintext, "anthropic-version": "2023-06-01"}
    ).json()["data"]
    assert {m["id"] for m in openai} == {m["id"] for m in claude}
    return {m["id"] for m in openai}


def names(models) -> set[str]:
    return {m.name for m in models}


def test_a_budgeted_key_pays_the_fallback_on_an_unpriced_route_when_the_admin_chose_so(
    local_unpriced, gateway_url, settings
):
    settings.PORTAL_UNPRICED_ROUTES = "fallback"
    settings.PORTAL_UNPRICED_FALLBACK_PRICE = "2000"
    key, plaintext = local_unpriced
    assert post(gateway_url, plaintext, {**SHORT, "model": "local-coder"}).status_code == 200
    record = wait_for(lambda: UsageRecord.objects.filter(key=key).first())
    assert record.pricing == "fallback" and record.cost_nanos == 6 * 2000 * 1000
    # $0.05 at $0.012 a request (1 + 5 tokens at 2000 per million): three more fit, the fifth does not
    for _ in range(3):
        assert post(gateway_url, plaintext, {**SHORT, "model": "local-coder"}).status_code == 200
    refused = post(gateway_url, plaintext, {**SHORT, "model": "local-coder"})
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"


def test_an_admin_chooses_per_route_what_a_budgeted_key_meets_while_it_is_unpriced(
    local_unpriced, gateway_url, settings, admin_client
):
    """The portal refuses unpriced routes by default; the admin lets this one charge the fallback
    on the Prices page, then refuses it again although the portal's default is the fallback."""
    from channels.models import ModelRoute

    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    settings.PORTAL_UNPRICED_FALLBACK_PRICE = "2000"
    key, plaintext = local_unpriced
    route = ModelRoute.objects.get(model__name="local-coder")
    assert post(gateway_url, plaintext, {**SHORT, "model": "local-coder"}).status_code == 403
    page = admin_client.get(reverse("price_list")).content.decode()
    assert 'data-testid="unpriced-policy"' in page
    assert "local-coder" not in listed(gateway_url, plaintext)
    saved = admin_client.post(reverse("price_list"), {"action": "unpriced", "route": route.pk, "unpriced": "fallback"})
    assert saved.status_code == 302
    wait_for(lambda: post(gateway_url, plaintext, {**SHORT, "model": "local-coder"}).status_code == 200)
    assert "local-coder" in listed(gateway_url, plaintext) and "local-coder" in names(usable_models(key.owner, key))
    record = wait_for(lambda: UsageRecord.objects.filter(key=key, status="ok").first())
    assert record.pricing == "fallback" and record.cost_nanos == 6 * 2000 * 1000
    settings.PORTAL_UNPRICED_ROUTES = "fallback"
    admin_client.post(reverse("price_list"), {"action": "unpriced", "route": route.pk, "unpriced": "refuse"})
    refused = wait_for(
        lambda: (r := post(gateway_url, plaintext, {**SHORT, "model": "local-coder"})).status_code == 403 and r
    )
    assert refused.json()["error"]["code"] == "model_not_priced"
    assert (
        admin_client.post(
            reverse("price_list"), {"action": "unpriced", "route": route.pk, "unpriced": "free"}
        ).status_code
        == 400
    )


def test_the_429_names_the_budget_and_when_it_resets(setup, gateway_url):
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("0.02"))
    assert post(gateway_url, setup.plaintext).status_code == 200
    refused = post(gateway_url, setup.plaintext)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert "daily budget of this key is $0.02" in error["message"]
    tomorrow = (timezone.now() + dt.timedelta(days=1)).strftime("%Y-%m-%d 00:00 UTC")
    assert f"It resets at {tomorrow}" in error["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 86400


def test_a_one_off_budget_never_resets_and_an_admin_top_up_lifts_it(setup, gateway_url):
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    budget = Budget.objects.create(key=setup.key, window="once", amount=Decimal("0.02"))
    assert post(gateway_url, setup.plaintext).status_code == 200
    refused = post(gateway_url, setup.plaintext)
    assert refused.status_code == 429 and "does not reset" in refused.json()["error"]["message"]
    assert "retry-after" not in refused.headers
    budget.topup, budget.topup_until = Decimal("0.02"), timezone.now() + dt.timedelta(hours=1)
    budget.save()
    assert post(gateway_url, setup.plaintext).status_code == 200


def test_rotating_a_key_keeps_its_budget_window(setup, gateway_url):
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("0.02"))
    assert post(gateway_url, setup.plaintext).status_code == 200
    new, plaintext = rotate_key(setup.key)
    assert Budget.objects.get().key_id == new.pk
    refused = post(gateway_url, plaintext)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "budget_exceeded"


def test_a_key_running_out_its_grace_keeps_the_budget_that_moved_to_its_replacement(setup, gateway_url):
    """Regression (journey: "download again" on Connect replaces a budgeted key): the budgets move
    to the new key, and the old one, which works on for its grace period (up to 7 days when
    rotated by hand), spent with no budget at all."""
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("0.02"))
    new, plaintext = rotate_key(setup.key, grace=dt.timedelta(days=7))
    assert post(gateway_url, setup.plaintext).status_code == 200  # the old key works on...
    refused = post(gateway_url, setup.plaintext)  # ...under its budget (0.011 spent, 0.011 more passes 0.02)
    assert refused.status_code == 429 and "daily budget of this key" in refused.json()["error"]["message"]
    assert post(gateway_url, plaintext).status_code == 429  # one window for both
    newer, _plain = rotate_key(new, grace=dt.timedelta(days=7))
    assert post(gateway_url, setup.plaintext).status_code == 429  # two rotations on
    assert Budget.objects.get().key_id == newer.pk


def test_a_key_running_out_its_grace_is_refused_an_unpriced_model_as_its_replacement_is(
    local_unpriced, gateway_url, settings
):
    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    key, plaintext = local_unpriced
    rotate_key(key, grace=dt.timedelta(hours=1))
    refused = post(gateway_url, plaintext, {**SHORT, "model": "local-coder"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_priced"


def test_the_most_restrictive_budget_wins(setup, gateway_url, alice):
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="month", amount=Decimal("10"))
    Budget.objects.create(user=alice, window="week", amount=Decimal("0.02"))
    assert post(gateway_url, setup.plaintext).status_code == 200
    refused = post(gateway_url, setup.plaintext)
    assert refused.status_code == 429
    assert "weekly budget of your account" in refused.json()["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_mid_answer_pays_for_what_was_generated(
    setup, gateway_url, upstream, redis_namespace, upstream_reads, stream
):
    """The gateway asks the upstream for a stream even for a client that did not (the answer is
    assembled from it). A client that left while its answer was being assembled was recorded as a
    client error of 0 tokens, though the upstream had generated (and on a paid channel billed)
    part of it: the key spent without its budget knowing. It pays for the prompt and the output
    the gateway read, as a streaming client that leaves does."""
    set_route_price(setup.route, input=INPUT, output=OUTPUT, effective_from=timezone.now() - dt.timedelta(hours=1))
    budget = Budget.objects.create(key=setup.key, window="day", amount=DAILY)
    upstream.behave(mode="stall", stall_after=4, tokens=20)  # its role and 3 tokens, then generating on
    body = {**SHORT, "max_tokens": 20, "stream": stream}
    leave_once(gateway_url, setup.plaintext, body, lambda: b"tok2" in b"".join(upstream_reads))
    record = wait_for(lambda: UsageRecord.objects.filter(key=setup.key).first())
    assert (record.status, record.http_status, record.stream) == ("client_disconnected", 499, stream)
    assert record.completion_tokens == 3 and record.prompt_tokens >= 1 and record.estimated
    assert record.channel_id == setup.channel.id
    assert record.cost_nanos == cost_of(record.prompt_tokens, 3)
    wait_for(lambda: redis_spend(redis_namespace, budget) == record.cost_nanos)


# --- two gateway processes sharing Redis and PostgreSQL --------------------------------------


@pytest.fixture
def replicas(setup, spawn_gateway):
    return [s.url for s in spawn_gateway(2)]


def redis_spend(redis_namespace: str, budget: Budget) -> int:
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    tag = {"day": "%Y%m%d", "month": "%Y%m"}[budget.window]
    return int(client.get(f"{redis_namespace}:b:{budget.id}:{dt.datetime.now(dt.UTC).strftime(tag)}") or 0)


def test_a_daily_budget_holds_across_two_replicas(setup, replicas, upstream, redis_namespace):
    """$0.05/day, 100 concurrent requests over two processes, each reserving $0.011 and using less:
    the spend never passes the budget by more than one request's maximum, and the Redis counter
    equals the records' costs once every reservation is settled."""
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    budget = Budget.objects.create(key=setup.key, window="day", amount=DAILY)
    upstream.behave(tokens=2)  # uses 1 + 2 of the 1 + 5 reserved
    statuses = asyncio.run(burst(replicas, setup.plaintext, 100))
    ok = statuses.count(200)
    assert ok >= 4 and statuses.count(429) == 100 - ok
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 100, timeout=30)
    spent = spend(key=setup.key)
    assert spent == ok * cost_of(1, 2)
    assert spent <= int(DAILY * NANOS) + MOST
    assert UsageRecord.objects.filter(key=setup.key, status="rate_limited", error__contains="daily budget").count() == (
        100 - ok
    )
    wait_for(lambda: redis_spend(redis_namespace, budget) == spent, timeout=15)
    # Spend keeps being admitted until the budget is used up, one request after another.
    while (r := post(replicas[0], setup.plaintext)).status_code == 200:
        pass
    assert r.json()["error"]["code"] == "budget_exceeded"
    wait_for(lambda: redis_spend(redis_namespace, budget) == spend(key=setup.key), timeout=15)
    assert int(DAILY * NANOS) - MOST < spend(key=setup.key) <= int(DAILY * NANOS)


def test_a_team_budget_holds_across_three_members_and_two_replicas(setup, team, replicas):
    """Three members, ten requests each at once, a $0.05/day team budget: exactly four fit
    ($0.044; each request uses what it reserved), whoever sent them."""
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(team=team, window="day", amount=DAILY)
    members = [User.objects.get(pk=setup.key.owner_id)]
    members += [
        User.objects.create_user(username=f"dev{i}", password="x-pass-123456", role=Role.DEVELOPER, team=team)
        for i in (2, 3)
    ]
    keys = [setup.plaintext] + [issue_key(owner=m, name="laptop")[1] for m in members[1:]]
    results = asyncio.run(burst_keys(replicas, keys, 10))
    statuses = [s for s, _m in results]
    assert (statuses.count(200), statuses.count(429)) == (4, 26)
    assert all("daily budget of your team" in m for s, m in results if s == 429)
    wait_for(lambda: UsageRecord.objects.filter(team=team).count() == 30, timeout=30)
    assert spend(team=team) == 4 * MOST <= int(DAILY * NANOS)


def test_budget_answers_are_openai_shaped(setup, gateway_url):
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("0"))
    r = httpx.post(
        gateway_url + "/v1/chat/completions",
        json=SHORT,
        headers={"Authorization": f"Bearer {setup.plaintext}"},
        timeout=30,
    )
    assert r.status_code == 429
    assert set(r.json()["error"]) >= {"message", "type", "code"}


def test_a_budget_past_its_alert_share_tells_the_alert_targets_and_the_owner_once(setup, gateway_url, settings):
    from django.core import mail

    from channels.models import AlertTarget

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    User.objects.filter(pk=setup.key.owner_id).update(email="alice@example.com")
    AlertTarget.objects.create(name="finance", kind="email", email="finance@example.com")
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=DAILY, alert_percent=50)
    # $0.011 reserved each: the third takes the day past $0.025
    for _ in range(4):
        assert post(gateway_url, setup.plaintext).status_code == 200
    wait_for(lambda: len(mail.outbox) >= 2)
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 4)
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "finance@example.com"]
    assert all("has used 50% of its per day budget" in m.body for m in mail.outbox)


def test_a_team_budgets_alert_goes_to_the_teams_lead(setup, team, lena, gateway_url, settings):
    from django.core import mail

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    User.objects.filter(pk=lena.pk).update(email="lena@example.com", language="zh-hans")
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(team=team, window="day", amount=DAILY, alert_percent=20)
    assert post(gateway_url, setup.plaintext).status_code == 200  # $0.011 of $0.05: past 20 %
    wait_for(lambda: len(mail.outbox) >= 1)
    body = mail.outbox[0].body
    assert mail.outbox[0].to == ["lena@example.com"] and "alpha" in body
    # In lena's language; and the spend is at least the share crossed, even before the request's
    # usage is written (it was "$0.0000 of $0.05").
    assert body.startswith("预算告警") and "已用掉 20%" in body, body
    assert "$0.00 " not in body and "$0.01 " in body, body


def mails_to(folder, address: str) -> int:
    """Messages to `address` in the file e-mail backend's folder (every process writes its own files)."""
    return sum(f.read_text().count(f"To: {address}") for f in folder.glob("*.log")) if folder.exists() else 0


def test_two_replicas_send_a_budgets_alert_once(setup, spawn_gateway, tmp_path):
    """20 requests at once over two gateway processes take a $0.20 budget past its 50 % alert share:
    the owner gets one e-mail, not one per replica (the admission script's SET NX decides)."""
    mail_dir = tmp_path / "mail"
    # django-environ drops the path's first slash: three, then the absolute path
    replicas = [s.url for s in spawn_gateway(2, EMAIL_URL=f"filemail:///{mail_dir}")]
    User.objects.filter(pk=setup.key.owner_id).update(email="alice@example.com")
    set_route_price(setup.route, input=INPUT, output=OUTPUT)
    Budget.objects.create(key=setup.key, window="day", amount=Decimal("0.20"), alert_percent=50)
    statuses = asyncio.run(burst(replicas, setup.plaintext, 20))
    assert statuses.count(200) == 18  # 18 x $0.011 <= $0.20
    wait_for(lambda: mails_to(mail_dir, "alice@example.com") >= 1, timeout=30)
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 20, timeout=30)
    assert mails_to(mail_dir, "alice@example.com") == 1


@pytest.fixture
def stopped_on_demand(transactional_db, upstream, alice):
    """An on-demand deployment that ran once and was stopped: its channel kept, disabled, with its
    route (a real host is never contacted: every request here is refused before a start)."""
    from channels.services import disable_served_channel, register_served_model
    from hosts.models import Deployment, Host

    host = Host.objects.create(name="gpu-a", address="127.0.0.1", username="gpu")
    deployment = Deployment.objects.create(
        name="cold-coder",
        host=host,
        backend="llamacpp",
        model_path="/models/coder.gguf",
        served_model_name="cold-coder",
        port=18080,
        on_demand=True,
        cold_start_budget=5,
    )
    channel = register_served_model(
        channel=None,
        name="cold-coder",
        kind="llamacpp",
        base_url=upstream.base_url,
        api_key="",
        model_name="cold-coder",
        upstream_model="cold-coder",
        context_window=4096,
        status_message="",
    )
    Deployment.objects.filter(pk=deployment.pk).update(channel=channel)
    disable_served_channel(channel.pk, status_message="stopped: idle")
    key, plaintext = issue_key(owner=alice, name="budgeted")
    return deployment, channel, key, plaintext


def test_a_cold_on_demand_request_reserves_its_cost_before_it_starts_the_model(stopped_on_demand, gateway_url):
    """The request that would start a stopped model reserves its most at the price its route had
    in the last run: a budget it could pass refuses it, and the model is not started."""
    from channels.models import ModelRoute
    from hosts.models import ColdStart

    deployment, channel, key, plaintext = stopped_on_demand
    set_route_price(ModelRoute.objects.get(channel=channel), input=INPUT, output=OUTPUT)
    Budget.objects.create(key=key, window="day", amount=Decimal("0.010"))  # below one request's $0.011
    refused = post(gateway_url, plaintext, {**SHORT, "model": "cold-coder"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "budget_exceeded"
    assert "may cost up to $0.0110" in refused.json()["error"]["message"]
    assert not ColdStart.objects.filter(deployment=deployment).exists()


def test_a_cold_on_demand_model_without_a_price_is_refused_to_a_budgeted_key(stopped_on_demand, gateway_url, settings):
    from hosts.models import ColdStart

    settings.PORTAL_UNPRICED_ROUTES = "refuse"
    deployment, _channel, key, plaintext = stopped_on_demand
    Budget.objects.create(key=key, window="day", amount=DAILY)
    refused = post(gateway_url, plaintext, {**SHORT, "model": "cold-coder"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_priced"
    assert not ColdStart.objects.filter(deployment=deployment).exists()
