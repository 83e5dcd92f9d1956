"""Models on demand at the gateway: hold a request for a cold model while it starts.

Admission calls `wait_until_warm` once the key's limits admitted the request (a key without
quota never starts a model). The first request opens the deployment's cold start in the database
(`hosts.ondemand.services.demand`: one active per deployment, so however many requests and
replicas ask, one launch); this process then watches it with ONE watcher per model and wakes every
request waiting for it. The watcher looks again when the workers announce that the model's
deployment moved (Redis pub/sub, `hosts.ondemand.activity.announce`; one subscription per
process), and otherwise every SAFETY_POLL_SECONDS, or every POLL_SECONDS while the subscription
is down (Redis away), so a lost message costs time, never an answer.

Each model holds at most GATEWAY_ONDEMAND_QUEUE requests per process; a stream gets its SSE
headers at once and a `: waiting for model` comment every few seconds; every
request waits at most the deployment's cold-start budget (less if the client sends
`Prefer: wait=N`; `wait=0` is "do not wait"). Whatever does not get the model in time is answered
503 with `Retry-After` from the model's cold-start history: never dropped.

While a request to an on-demand model (or to an alias that may send it to one) is in flight it is
counted in Redis (`hosts.ondemand.activity`), from the admission script's own step on (`busy`), so
the placement never evicts, and the idle sweep never stops, a deployment that is serving: a stop
takes it out of routing before it reads the count (`hosts.ondemand.services.take_out`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from hosts.ondemand import activity
from hosts.ondemand import services as ondemand

from . import metrics
from .cache import DatabaseUnavailable, ModelInfo, RouteInfo, run_db, snapshot
from .http import SSE_HEADERS, GatewayError, Request

logger = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 5.0
POLL_SECONDS = 0.5  # without the subscription
SAFETY_POLL_SECONDS = 5.0  # with it: only for a message that got lost
SUBSCRIBE_WAIT_SECONDS = 1.0  # a first cold request waits this long at most for the subscription
WAITING_COMMENT = b": waiting for model\n\n"
_PREFER_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=\s*(\d+)")


@dataclass(slots=True)
class _Model:
    """This process's waiters of one cold deployment."""

    waiting: int = 0
    outcome: asyncio.Future[dict[str, Any]] | None = None  # the cold start's end, seen by the poller
    poller: asyncio.Task[None] | None = None
    last: dict[str, Any] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # an announcement for this model


_models: dict[int, _Model] = {}


class _Events:
    """This process's subscription to the workers' announcements (`activity.events_channel()`),
    started by the first cold request and kept, reconnecting with a backoff when Redis goes."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None
        self.live = asyncio.Event()  # set while subscribed
        self.follower: asyncio.Task[None] | None = None
        self.again = False  # an announcement came while the follower was reading

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.task is None or self.task.done() or self.task.get_loop() is not loop:
            self.live = asyncio.Event()
            self.task = loop.create_task(self._listen())

    async def _listen(self) -> None:
        import redis.asyncio as aioredis

        delay = POLL_SECONDS
        while True:
            client = aioredis.Redis.from_url(
                settings.REDIS_URL, socket_connect_timeout=float(settings.GATEWAY_REDIS_TIMEOUT)
            )
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(activity.events_channel())
                async for message in pubsub.listen():
                    if message["type"] == "subscribe":
                        self.live.set()
                        delay = POLL_SECONDS
                        _wake(*_models)  # whatever was announced while we were not listening
                    elif message["type"] == "message":
                        _wake(int(message["data"]))
                        self.follow()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: the watchers poll every POLL_SECONDS meanwhile
                logger.warning("on-demand announcements unavailable (%r); polling", exc)
            finally:
                self.live.clear()
                await _quietly(pubsub.aclose())  # type: ignore[no-untyped-call]
                await _quietly(client.aclose())
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    def follow(self) -> None:
        """Catch up with the generations after an announcement (one reader at a time; announcements
        that come meanwhile make it read once more)."""
        self.again = True
        if self.follower is None or self.follower.done():
            self.follower = asyncio.get_running_loop().create_task(self._follow())

    async def _follow(self) -> None:
        from .state import process

        while self.again:
            self.again = False
            limiter = process.limiter
            if limiter is None:
                return
            try:
                if snapshot.observe_generation(*await limiter.generations()):
                    await snapshot.reload_catalog()
            except Exception as exc:  # the next request's admission sees the generations all the same
                logger.warning("could not follow an on-demand announcement: %r", exc)


def listen() -> None:
    """Subscribe this process to the announcements (a request for an on-demand model; idempotent)."""
    _events.start()


async def _quietly(closing: Any) -> None:
    with contextlib.suppress(Exception):  # a connection that is already gone
        await closing


_events = _Events()


def _wake(*deployment_ids: int) -> None:
    for deployment_id in deployment_ids:
        if (state := _models.get(deployment_id)) is not None:
            state.wake.set()


def allowance(req: Request, budget: float) -> float:
    """How long this request may wait: the budget, or less if the client said `Prefer: wait=N`."""
    found = _PREFER_WAIT.search(req.headers.get("prefer", ""))
    return min(budget, float(found.group(1))) if found else budget


def _named(info: ModelInfo, asked: str | None) -> str:
    """The model as a message names it: the alias the client asked for, and the model it starts."""
    if asked and asked != info.name:
        return f"'{asked}' (alias of '{info.name}')"
    return f"'{info.name}'"


def _unavailable(info: ModelInfo, message: str, retry_after: float, asked: str | None = None) -> GatewayError:
    retry = max(1, math.ceil(retry_after))
    return GatewayError(
        503,
        f"The model {_named(info, asked)} {message} Retry in about {retry} s.",
        code="model_starting",
        headers=[(b"retry-after", str(retry).encode())],
    )


async def wait_until_warm(
    req: Request, info: ModelInfo, *, stream: bool, asked: str | None = None, anthropic: bool = False
) -> float:
    """Start the model if needed and wait until a channel serves it; returns the seconds waited.
    Raises GatewayError 503 (with Retry-After) when it cannot wait or the budget runs out; for a
    stream whose SSE headers were already sent that error goes out as an error event (`anthropic`:
    a Messages stream's). `asked`: the name the client used (an alias of `info`), which the errors
    name too."""
    assert info.on_demand is not None
    deployment_id = info.on_demand.deployment_id
    started = time.perf_counter()
    state = _models.setdefault(deployment_id, _Model())
    if state.waiting >= int(settings.GATEWAY_ONDEMAND_QUEUE):
        metrics.ondemand_refused("queue_full")
        raise _unavailable(info, "is starting and its queue is full.", _retry_after(info, state), asked)
    wait = allowance(req, info.on_demand.budget)
    if state.outcome is None or state.outcome.done():
        state.outcome = asyncio.get_running_loop().create_future()
        state.poller = asyncio.create_task(_watch(deployment_id, state.outcome))
    outcome = state.outcome
    if wait <= 0:  # the start goes on; the client comes back
        metrics.ondemand_refused("no_wait")
        raise _unavailable(info, "is starting.", _retry_after(info, state), asked)
    state.waiting += 1
    try:
        if stream and not outcome.done():
            await _start_stream(req, anthropic=anthropic)
        result = await _wait(req, outcome, wait, stream=stream)
    finally:
        state.waiting -= 1
    if result is not None and result.get("database_unavailable"):
        raise DatabaseUnavailable()
    downloading = (result or state.last).get("downloading")
    if downloading and (result is None or result["state"] != "ready"):
        metrics.ondemand_refused("downloading")
        raise GatewayError(
            503,
            f"The model {_named(info, asked)} is being downloaded to the host it will run on ({downloading}); "
            f"it starts once that is done. Retry in about {math.ceil(_retry_after(info, state))} s.",
            code="model_downloading",
            headers=[(b"retry-after", str(max(1, math.ceil(_retry_after(info, state)))).encode())],
        )
    if result is None:
        metrics.ondemand_refused("budget")
        raise _unavailable(info, _still_starting(info, state.last, wait), _retry_after(info, state), asked)
    if result["state"] != "ready":
        metrics.ondemand_refused("failed")
        why = (result.get("message") or "see its deployment").rstrip(".")  # the sentence ends once
        raise GatewayError(
            503,
            f"The model {_named(info, asked)} could not be started: {why}.",
            code="model_start_failed",
            headers=[(b"retry-after", b"30")],
        )
    return _done(started)


def _still_starting(info: ModelInfo, last: Mapping[str, Any], wait: float) -> str:
    """What a request whose wait ran out is told: which limit it was (the deployment's cold-start
    budget, or the client's `Prefer: wait`) and where the start stands. A server that is loading
    goes on after the budget (the next request may find it warm) until the launch job's
    HOSTS_HEALTH_TIMEOUT, which stops it and fails the start."""
    assert info.on_demand is not None
    if wait < info.on_demand.budget:
        limit = f"did not start within {wait:g} s, the wait the request asked for (Prefer: wait)"
    else:
        limit = f"did not start within {wait:g} s, the cold-start budget set on its deployment"
    where = (last.get("message") or "").rstrip(".")
    if last.get("state") == "launching":
        timeout = float(settings.HOSTS_HEALTH_TIMEOUT)
        return (
            f"{limit}: its server was started ({where}) and has not answered its health check yet; it may "
            f"still be loading (the launch waits up to {timeout:g} s for it, HOSTS_HEALTH_TIMEOUT, then stops it)."
        )
    return f"{limit}; it is still starting: {where}." if where else f"{limit}; it is still starting."


def _done(started: float) -> float:
    waited = time.perf_counter() - started
    metrics.ondemand_waited(waited)
    return waited


def _retry_after(info: ModelInfo, state: _Model) -> float:
    if state.last.get("retry_after"):
        return float(state.last["retry_after"])
    return info.on_demand.estimate if info.on_demand is not None else 30.0


async def _watch(deployment_id: int, outcome: asyncio.Future[dict[str, Any]]) -> None:
    """Ask for the model (opening its cold start unless one is active), then watch the cold start
    until it ends and load the catalog that routes to it: one per model per process, however many
    requests wait. Stops early when nobody here waits any more (the next request looks again)."""
    state = _models[deployment_id]
    try:
        _events.start()
        if not _events.live.is_set():  # subscribed before asking, so no announcement is missed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_events.live.wait(), SUBSCRIBE_WAIT_SECONDS)
        state.wake.clear()
        observed = await run_db(ondemand.demand, deployment_id)
        logger.info("asked for deployment %s: %s", deployment_id, observed.get("state"))
        state.last = observed
        while observed.get("state") not in ("ready", "failed"):
            if state.waiting == 0:
                return
            every = SAFETY_POLL_SECONDS if _events.live.is_set() else POLL_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), every)
            state.wake.clear()
            try:
                observed = await run_db(ondemand.observe, observed["cold_start_id"]) or observed
            except GatewayError:  # the database is away: keep trying while requests wait
                continue
            state.last = observed
        if observed["state"] == "ready":
            await snapshot.reload_catalog()  # its channel is registered now
        outcome.set_result(observed)
    except DatabaseUnavailable:  # the start could not be asked for: the waiting requests get its 503
        logger.warning("could not ask for deployment %s: the database is unavailable", deployment_id)
        if not outcome.done():
            outcome.set_result({"state": "failed", "database_unavailable": True})
    except Exception:
        logger.exception("watching the cold start of deployment %s failed", deployment_id)
        if not outcome.done():
            # The exception is in the log above; the client gets no internals.
            outcome.set_result({"state": "failed", "message": "the gateway could not follow its start"})
    finally:
        if not outcome.done():
            outcome.cancel()


async def _wait(
    req: Request, outcome: asyncio.Future[dict[str, Any]], wait: float, *, stream: bool
) -> dict[str, Any] | None:
    """The cold start's outcome, or None when `wait` seconds passed first; a stream gets a
    keep-alive comment every KEEPALIVE_SECONDS meanwhile."""
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(outcome), min(left, KEEPALIVE_SECONDS))
        except TimeoutError:
            if stream:
                await req.send({"type": "http.response.body", "body": WAITING_COMMENT, "more_body": True})
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if outcome.cancelled() and task is not None and not task.cancelling():
                return None  # the poller stopped (it failed): the client retries
            raise


async def _start_stream(req: Request, *, anthropic: bool) -> None:
    """Send the SSE headers and a first comment now; what the handler sends later is fitted in:
    its own response start is dropped, and an error answer becomes one error event: `data:` and
    `[DONE]` for OpenAI's SDKs, `event: error` for Anthropic's (which skips an event without a name:
    its client would see the stream end with no answer and no reason)."""
    await req.send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
    await req.send({"type": "http.response.body", "body": WAITING_COMMENT, "more_body": True})
    error: list[bytes] | None = None

    async def after_prelude(message: Mapping[str, Any]) -> None:
        nonlocal error
        if message["type"] == "http.response.start":
            if int(message.get("status", 200)) >= 400:
                error = []
            return
        if error is not None and message["type"] == "http.response.body":
            error.append(message.get("body", b""))
            if not message.get("more_body", False):
                if anthropic:  # the body is already `{"type": "error", "error": {...}}`
                    event = b"event: error\ndata: " + b"".join(error) + b"\n\n"
                else:
                    event = b"data: " + b"".join(error) + b"\n\ndata: [DONE]\n\n"
                await send({"type": "http.response.body", "body": event})
            return
        await send(message)

    send = req.send_through(after_prelude)


# --- in flight --------------------------------------------------------------------------------------
def counted(model: ModelInfo, routes: Sequence[RouteInfo]) -> list[ModelInfo]:
    """The on-demand models a request for `model` is counted in flight on: the model itself when
    it is on demand; for an alias, each of its on-demand targets with a route among `routes` (the
    request's selection: the call tries those, failing over from one to the next, and no other).
    Empty for every other model (nothing more to write)."""
    if model.on_demand is not None:
        return [model]
    if not model.is_alias:
        return []
    on_demand = [t for t in model.targets if t.on_demand is not None]
    if not on_demand:
        return []
    sent_to = {r.model_name for r in routes}
    return [t for t in on_demand if t.name in sent_to]


def busy(models: Sequence[ModelInfo]) -> list[tuple[str, int]]:
    """Where the admission script counts a request as in flight, and for how long at most
    (`RedisLimiter.admit`'s `busy`): the deployment of each of `models` (`counted`).

    Counted by the script itself, in the step that checks the generations, not after it: a stop
    (`hosts.ondemand.services.take_out`) takes the deployment out of routing, bumps the routes
    generation and only then reads the count, so a request admitted on the older snapshot is
    either counted by then or refused as Stale and resolved again, as a cold model."""
    out = []
    for model in models:
        assert model.on_demand is not None
        # The lease outlives the longest the request can take: its cold-start wait, then its whole
        # call (an admin may allow calls longer than the hour: a stream past its lease left the
        # count, and the sweep could stop the model under it).
        longest = math.ceil(model.on_demand.budget + float(settings.GATEWAY_TOTAL_TIMEOUT)) + 60
        out.append((activity.busy_key(model.on_demand.deployment_id), max(activity.LEASE_SECONDS, longest)))
    return out


def ended(deployment_id: int, request_id: str, *, used: bool = True) -> None:
    """The request is no longer in flight on the deployment; `used`: it was sent there (an alias's
    request counted on a target that it did not go to is not a use of that model)."""
    _spawn("ZREM", activity.busy_key(deployment_id), request_id)
    if used:
        _spawn("SET", activity.last_key(deployment_id), repr(time.time()), "EX", 30 * 86400)


def not_sent(models: Sequence[ModelInfo], request_id: str) -> None:
    """An admitted request that ends before it is sent (its cold start refused it): no longer in
    flight, and not a use of the models either."""
    for model in models:
        if model.on_demand is not None:
            _spawn("ZREM", activity.busy_key(model.on_demand.deployment_id), request_id)


def _spawn(*args: object) -> None:
    from .state import process

    limiter = process.limiter
    if limiter is None:
        return
    try:
        task = asyncio.get_running_loop().create_task(limiter.redis.call(*args))
    except RuntimeError:
        return
    _pending.add(task)
    task.add_done_callback(_forget)


_pending: set[asyncio.Task[Any]] = set()


def _forget(task: asyncio.Task[Any]) -> None:
    _pending.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("on-demand activity not recorded in Redis: %r", task.exception())
