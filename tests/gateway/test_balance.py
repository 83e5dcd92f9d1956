"""Balancing policies through the real gateway, two fake replicas of one model at equal priority:
session affinity (sticky, spread, bounded load, moves when its replica goes down and stays where
its cache is when it comes back, shared by gateway processes through Redis) and least busy."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import socket

import httpx
import pytest

from channels.models import Channel
from gateway import balance
from gateway.resp import RespClient
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import UPSTREAM_KEY, add_channel, route_info, wait_for


@pytest.fixture
def second(setup):
    """A second replica of the model, same priority, on its own fake upstream."""
    with FakeUpstream(api_key=UPSTREAM_KEY) as up:
        up.channel, _ = add_channel(up, "second", model=setup.model)
        yield up


@pytest.fixture
def replicas(setup, upstream, second):
    upstream.channel = setup.channel
    return upstream, second


def use_policy(setup, policy: str) -> None:
    setup.model.balance = policy
    setup.model.save()


def auth(setup) -> dict:
    return {"Authorization": f"Bearer {setup.plaintext}"}


def counts(replicas) -> list[int]:
    return [len(r.requests) for r in replicas]


def set_status(channel: Channel, status: str) -> None:
    channel.status = status
    channel.save()  # as an admin edit: the route generation is bumped, every gateway reloads at once


class Agent:
    """One coding-agent session: the same system prompt and opening, a conversation that grows."""

    def __init__(self, name: str) -> None:
        self.messages = [
            {"role": "system", "content": f"You are a coding agent working in the repository {name}."},
            {"role": "user", "content": f"Fix the failing test in {name}."},
        ]

    def turn(self, url: str, setup) -> httpx.Response:
        r = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "qwen3-32b", "messages": self.messages, "max_tokens": 3},
            headers=auth(setup),
            timeout=30,
        )
        assert r.status_code == 200, r.text
        n = len(self.messages)
        self.messages += [
            {"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
            {"role": "user", "content": f"tool output {n}: " + "line " * n},
        ]
        return r


def test_twenty_turns_of_a_session_stay_on_one_replica_and_move_when_it_goes_down(setup, gateway_url, replicas):
    use_policy(setup, "affinity")
    agent = Agent("alpha")
    for _ in range(20):
        agent.turn(gateway_url, setup)
    assert sorted(counts(replicas)) == [0, 20]
    home, other = replicas if len(replicas[0].requests) else replicas[::-1]

    set_status(home.channel, "down")
    for _ in range(10):
        agent.turn(gateway_url, setup)
    assert (len(home.requests), len(other.requests)) == (20, 10)

    # Back up: the session stays where its prompt cache now is (the mapping in Redis says so).
    set_status(home.channel, "healthy")
    for _ in range(5):
        agent.turn(gateway_url, setup)
    assert (len(home.requests), len(other.requests)) == (20, 15)


def test_different_sessions_spread_over_both_replicas(setup, gateway_url, replicas):
    use_policy(setup, "affinity")
    agents = [Agent(f"repo-{i}") for i in range(40)]
    for agent in agents:
        agent.turn(gateway_url, setup)
    assert min(counts(replicas)) >= 5  # Binomial(40, 1/2): fewer than 5 happens once in 10 million
    for agent in agents[:10]:  # and each stays where it went
        before = counts(replicas)
        agent.turn(gateway_url, setup)
        agent.turn(gateway_url, setup)
        assert sorted(b - a for a, b in zip(before, counts(replicas), strict=True)) == [0, 2]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", lambda i: {"user": "dev-7", "messages": [{"role": "user", "content": f"q{i}"}]}),
        (
            "/v1/messages",
            lambda i: {
                "max_tokens": 3,
                "metadata": {"user_id": "user_ab12_account__session_5f0c"},
                "messages": [{"role": "user", "content": f"q{i}"}],
            },
        ),
        ("/v1/responses", lambda i: {"prompt_cache_key": "codex-thread-42", "input": f"q{i}"}),
    ],
    ids=["openai-user", "claude-code-metadata", "codex-prompt-cache-key"],
)
def test_the_clients_own_session_id_decides_not_the_content(setup, gateway_url, replicas, path, body):
    use_policy(setup, "affinity")
    for i in range(12):
        r = httpx.post(gateway_url + path, json={"model": "qwen3-32b", **body(i)}, headers=auth(setup), timeout=30)
        assert r.status_code == 200, r.text
    assert sorted(counts(replicas)) == [0, 12]


async def _open_stream(stack: contextlib.AsyncExitStack, client: httpx.AsyncClient, url: str, setup, body) -> None:
    """Open a streaming call and wait for its first chunk: from then on it is in flight (until
    the stack closes it; the chunk iterator is kept, as dropping it would close the response)."""
    r = await stack.enter_async_context(
        client.stream(
            "POST",
            url + "/v1/chat/completions",
            json={"model": "qwen3-32b", "stream": True, **body},
            headers=auth(setup),
        )
    )
    assert r.status_code == 200
    chunks = r.aiter_raw()
    stack.push_async_callback(chunks.aclose)
    await chunks.__anext__()


def test_a_hot_session_spills_over_within_the_load_bound(setup, gateway_url, replicas):
    use_policy(setup, "affinity")
    for r in replicas:
        r.behave(mode="stall", stall_after=1)  # every stream stays open after its first chunk
    body = {"messages": [{"role": "system", "content": "agent"}, {"role": "user", "content": "hot"}]}

    async def run() -> list[list[int]]:
        seen = []
        async with httpx.AsyncClient(timeout=30) as client, contextlib.AsyncExitStack() as stack:
            for _ in range(8):
                await _open_stream(stack, client, gateway_url, setup, body)
                seen.append(counts(replicas))
        return seen

    seen = asyncio.run(run())
    wait_for(lambda: not balance.load.in_flight)  # the clients left: every call let go of its replica
    for k, loads in enumerate(seen, start=1):
        assert max(loads) <= math.ceil(1.25 * k / 2), seen  # c = 1.25 of the fair share, at every step
    assert min(seen[-1]) >= 3, seen  # spilled, but the session's home carries the most


def test_least_busy_sends_the_next_call_to_the_idle_replica(setup, gateway_url, replicas):
    use_policy(setup, "least_busy")
    for r in replicas:
        r.behave(mode="stall", stall_after=1)
    body = {"messages": [{"role": "user", "content": "work"}]}

    async def run() -> list[list[int]]:
        seen = []
        async with httpx.AsyncClient(timeout=30) as client, contextlib.AsyncExitStack() as stack:
            for _ in range(6):
                await _open_stream(stack, client, gateway_url, setup, body)
                seen.append(sorted(counts(replicas)))
        return seen

    assert asyncio.run(run()) == [[0, 1], [1, 1], [1, 2], [2, 2], [2, 3], [3, 3]]
    wait_for(lambda: not balance.load.in_flight)


def test_the_session_mapping_is_shared_by_gateway_processes(setup, replicas, spawn_gateway):
    """Sessions that moved to one replica while the other was down stay there for every gateway
    replica: without the mapping in Redis about half of them would go back to their hash home."""
    use_policy(setup, "affinity")
    first = replicas[0]
    gw1, gw2 = spawn_gateway(2)
    set_status(first.channel, "down")
    agents = [Agent(f"shared-{i}") for i in range(16)]
    for agent in agents:
        agent.turn(gw1.url, setup)
    assert counts(replicas) == [0, 16]
    set_status(first.channel, "healthy")
    for agent in agents:
        agent.turn(gw2.url, setup)
    assert counts(replicas) == [0, 32]
    # New sessions do use the replica that came back: 4 whose hash home it is and 4 whose home is
    # the other, chosen by the ring (not drawn at random), so each goes exactly home.
    ring = [route(r.channel.id, r.channel.weight) for r in replicas]
    fresh: dict[int, list[Agent]] = {r.channel.id: [] for r in replicas}
    for i in itertools.count():
        agent = Agent(f"fresh-{i}")
        session = balance.session_of({"messages": agent.messages}, setup.key.id)
        homed = fresh[balance.ring_walk(ring, session)[0].channel_id]
        if len(homed) < 4:
            homed.append(agent)
        if all(len(agents) == 4 for agents in fresh.values()):
            break
    for agents in fresh.values():
        for agent in agents:
            agent.turn(gw2.url, setup)
    assert counts(replicas) == [4, 36]


# --- the policy's parts on their own ----------------------------------------------------------


route = route_info


def test_removing_a_replica_moves_only_its_sessions():
    three = [route(1), route(2), route(3)]
    sessions = [balance.session_of({"user": f"u{i}"}, 1) for i in range(300)]
    before = {s: balance.ring_walk(three, s)[0].channel_id for s in sessions}
    after = {s: balance.ring_walk(three[:2], s)[0].channel_id for s in sessions}
    moved = [s for s in sessions if before[s] != after[s]]
    assert moved and all(before[s] == 3 for s in moved)
    shares = [list(before.values()).count(c) for c in (1, 2, 3)]
    assert min(shares) > 60  # 64 points per replica keep the split near a third each


def test_the_reasons_say_what_happened(monkeypatch):
    monkeypatch.setattr(balance, "load", balance.Load())  # no other test's calls in flight
    group = [route(1), route(2)]
    session = balance.session_of({"prompt_cache_key": "k"}, 1)
    home = balance.ring_walk(group, session)[0].channel_id
    new = balance.Choice(session=session)
    assert balance.order(group, "affinity", new)[0].channel_id == home
    assert (new.reason, new.remember) == ("affinity new", True)
    hit = balance.Choice(session=session, remembered=3 - home)
    assert balance.order(group, "affinity", hit)[0].channel_id == 3 - home and hit.reason == "affinity hit"
    assert not hit.remember
    gone = balance.Choice(session=session, remembered=99)
    assert balance.order(group, "affinity", gone)[0].channel_id == home and gone.reason == "affinity moved"
    busy = balance.Choice(session=session, remembered=home)
    balance.load.in_flight[home] = 3
    assert balance.order(group, "affinity", busy)[0].channel_id == 3 - home
    assert (busy.reason, busy.remember) == ("affinity spill", False)
    balance.load.in_flight.pop(home)
    weighted = balance.Choice()
    balance.order(group, "weighted", weighted)
    assert weighted.reason == "weighted"


def test_least_busy_breaks_ties_by_the_faster_first_token(monkeypatch):
    # A load of its own: the process's carries what earlier tests' calls observed for these ids (an
    # EWMA that 40 ms does not overturn in one step), which once made channel 12 the slower.
    monkeypatch.setattr(balance, "load", balance.Load())
    group = [route(11), route(12)]
    balance.load.observe(11, 900.0)
    balance.load.observe(12, 40.0)
    assert all(balance.order(group, "least_busy")[0].channel_id == 12 for _ in range(20))
    balance.load.begin(12)
    assert all(balance.order(group, "least_busy")[0].channel_id == 11 for _ in range(20))


def test_the_session_is_the_clients_id_else_the_conversations_opening():
    opening = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    turn1 = balance.session_of({"messages": opening}, 1)
    turn9 = balance.session_of({"messages": [*opening, {"role": "assistant", "content": "x"}]}, 1)
    assert turn1 == turn9
    assert balance.session_of({"messages": opening}, 2) != turn1  # another key, another session
    other = balance.session_of({"messages": [opening[0], {"role": "user", "content": "other"}]}, 1)
    assert other != turn1
    claude = {"metadata": {"user_id": "session_1"}, "system": "s", "messages": opening[1:]}
    assert balance.session_of(claude, 1) == balance.session_of({**claude, "system": "changed"}, 1)


def test_a_redis_that_does_not_answer_falls_back_to_the_hash():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]

    async def run() -> int | None:
        return await balance.recall(RespClient(f"redis://127.0.0.1:{dead}/0", timeout=1.0), 1, "ab" * 12)

    assert asyncio.run(run()) is None
