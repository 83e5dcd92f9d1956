"""Team limits: a ceiling over all the team's members together, in the same admission script as the
key's and the user's, exact across two gateway processes; the team's models bound its members';
usage records keep the team the request was made under."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from accounts.choices import Role
from accounts.models import Team, User
from channels.models import Model, ModelRoute
from keys.models import UsageDaily, UsageRecord
from keys.services import issue_key
from tests.gateway.conftest import wait_for
from tests.gateway.test_limits import SHORT, post


async def burst_keys(urls: list[str], keys: list[str], per_key: int) -> list[tuple[int, str]]:
    """Fire `per_key` requests for each key at once, spread over `urls`; (status, error message)."""
    n = per_key * len(keys)
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> tuple[int, str]:
            key = keys[i % len(keys)]
            url = urls[i % len(urls)] + "/v1/chat/completions"
            r = await client.post(url, json=SHORT, headers={"Authorization": f"Bearer {key}"})
            return r.status_code, (r.json().get("error", {}).get("message", "") if r.status_code != 200 else "")

        return await asyncio.gather(*(one(i) for i in range(n)))


@pytest.fixture
def three_members(setup, team) -> list[tuple[User, str]]:
    """alice and two more members of the team, 20 requests/min each, one key each."""
    members = [User.objects.get(pk=setup.key.owner_id)]
    members += [
        User.objects.create_user(username=f"dev{i}", password="x-pass-123456", role=Role.DEVELOPER, team=team)
        for i in (2, 3)
    ]
    out = []
    for m in members:
        m.requests_per_minute = 20
        m.save()
        out.append((m, setup.plaintext if m.pk == setup.key.owner_id else issue_key(owner=m, name="laptop")[1]))
    return out


def test_a_team_ceiling_is_exact_across_two_replicas(setup, team, three_members, spawn_gateway):
    """A team at 30 requests/min with three members at 20 each: 90 concurrent requests over two
    processes, exactly 30 pass (each member alone could have had 20)."""
    team.requests_per_minute = 30
    team.save()
    urls = [s.url for s in spawn_gateway(2)]
    results = asyncio.run(burst_keys(urls, [plain for _m, plain in three_members], 30))
    statuses = [status for status, _ in results]
    assert (statuses.count(200), statuses.count(429)) == (30, 60)
    assert any("for your team is 30" in message for _s, message in results)
    # Each process flushes its own batches: wait for both kinds of record, from both.
    wait_for(lambda: UsageRecord.objects.filter(team=team).count() == 90)
    assert UsageRecord.objects.filter(team=team, status="ok").count() == 30
    assert sum(d.requests for d in UsageDaily.objects.filter(team=team)) == 90


def test_a_team_limit_refuses_with_the_teams_name_and_applies_at_once(setup, team, gateway_url):
    assert post(gateway_url, setup.plaintext).status_code == 200  # cached before the change
    team.tokens_per_day = 10  # 6 tokens were used; the next reservation of 6 does not fit
    team.save()
    refused = post(gateway_url, setup.plaintext)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert "tokens per day for your team is 10" in refused.json()["error"]["message"]


def test_a_team_shares_its_ceiling_between_members(setup, team, gateway_url, lena):
    team.requests_per_minute = 2
    team.save()
    _key, lenas = issue_key(owner=lena, name="lena laptop")
    assert post(gateway_url, setup.plaintext).status_code == 200
    assert post(gateway_url, lenas).status_code == 200
    assert post(gateway_url, setup.plaintext).status_code == 429
    assert post(gateway_url, lenas).status_code == 429


def test_the_teams_models_bound_its_members(setup, team, gateway_url, upstream):
    other = Model.objects.create(name="llama-3")
    ModelRoute.objects.create(model=other, channel=setup.channel, upstream_model="llama-3")
    team.allowed_models.set([other])
    refused = post(gateway_url, setup.plaintext)  # qwen3-32b exists but is not the team's
    assert refused.status_code == 403
    assert "llama-3" in refused.json()["error"]["message"]
    assert post(gateway_url, setup.plaintext, {**SHORT, "model": "llama-3"}).status_code == 200


def test_usage_keeps_the_team_it_was_made_under(setup, team, gateway_url, alice):
    assert post(gateway_url, setup.plaintext).status_code == 200
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 1)
    beta = Team.objects.create(name="beta")
    alice.team = beta
    alice.save()
    assert post(gateway_url, setup.plaintext).status_code == 200
    wait_for(lambda: UsageRecord.objects.filter(key=setup.key).count() == 2)
    teams = list(UsageRecord.objects.filter(key=setup.key).order_by("created").values_list("team__name", flat=True))
    assert teams == ["alpha", "beta"]
    assert sorted(UsageDaily.objects.filter(key=setup.key).values_list("team__name", flat=True)) == ["alpha", "beta"]
