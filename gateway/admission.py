"""Request stage 3: admission. Authenticate (`auth`), resolve the model (`catalog`) and reserve
against the key's, the owner's and the owner's team's limits (`limits`); the result is an open `call.Call`.

With Redis the admission script also reports the cache generations: when they show that this
process's snapshot is stale, nothing was reserved, and the request is authenticated and resolved
again on fresh data, and checked again (`ADMIT_ATTEMPTS` in all, then a 503: never admitted
unchecked). A refusal is a 429 with `Retry-After` and is recorded as usage.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time
from typing import Any

from django.conf import settings

from channels.choices import ModelKind
from channels.prices import format_money
from keys.choices import ApiSurface, UsageStatus
from keys.usage import explanation as lines

from . import balance, metrics, ondemand
from .auth import authenticate
from .cache import BudgetInfo, KeyInfo, ModelInfo, RouteInfo, namespace, snapshot
from .call import Call, current, route_header, wants_route_header
from .catalog import Selection, resolve_model, route_output, select_routes
from .http import GatewayError, Request
from .limits import TOKEN_LIMITS, Admission, RedisLimiter, Refusal, Scope, Stale, rate_headers
from .state import process
from .usage import UsageEvent

UNKNOWN_KEY = frozenset({"invalid_api_key", "invalid_playground_credential"})
# Admission attempts: a Stale answer reloads what changed and tries again, this many times in all.
ADMIT_ATTEMPTS = 3


async def open_call(
    req: Request,
    *,
    surface: str,
    model: object,
    stream: bool,
    prompt_tokens: int,
    max_tokens: int | None,
    body: dict[str, Any] | None = None,
    choices: int = 1,
) -> Call:
    """Authenticate, resolve the model and reserve against the limits. Raises GatewayError.
    The output reserved is `max_tokens` (or the default the routes allow) for each of `choices`
    generations (`chat.generations`): every one may produce it. With the request's `body`, a
    model balanced by session affinity looks up where the session went, in the same Redis write
    as the admission script (`balance`)."""
    started = time.perf_counter()
    if not process.started:
        await process.start()
    limiter = process.limiter
    assert limiter is not None
    request_id = req.request_id
    ns = namespace()
    choice = balance.Choice()
    embedding = surface == ApiSurface.EMBEDDINGS  # a refusal speaks of the input, not a conversation
    for attempt in range(ADMIT_ATTEMPTS):
        # The generations this attempt's key and catalog are checked against: read before they
        # are (a copy loaded before a change this process heard of is never vouched for).
        expected = snapshot.generation
        try:
            key = await authenticate(req)
        except GatewayError as refused:
            # A key this process knows, refused on its snapshot (expired, disabled, address not
            # allowed): an admin may have just lifted that (`_refused_on_stale`). An unknown key
            # costs no Redis round trip: nobody can have presented it before it existed.
            if attempt == 0 and refused.code not in UNKNOWN_KEY and await _refused_on_stale(limiter):
                continue
            raise
        if req.playground:  # the record says where it came from; the API is the same
            surface = ApiSurface.PLAYGROUND
        resolved: ModelInfo | None = None  # the model, once found: a refusal after that is recorded
        try:
            pinned = pinned_channel(req, key)
            catalog = snapshot.catalog  # current (what get_catalog answers without waiting), else loaded
            if catalog is None:  # on a retry the older copy is known stale: wait for the load
                catalog = await snapshot.get_catalog(fresh=attempt > 0)
            info = resolved = resolve_model(key, catalog, model)
            req.model_name = info.name
            if info.kind == ModelKind.EMBEDDING and not embedding:
                raise GatewayError(
                    400,
                    f"'{info.name}' is an embedding model: it answers /v1/embeddings only. "
                    "Choose a chat model for this request.",
                    code="model_not_supported",
                    param="model",
                )
            # On demand and stopped (or an alias whose targets are), or served now only by channels
            # this request may not use (`ModelInfo.starts_for`): started below, once the limits
            # admitted the request.
            starts = info.starts_for(key.local_only)
            cold = starts is not None
            if not info.has_routes and not cold:
                raise GatewayError(503, f"No channel serves the model '{info.name}' right now.", code="no_channel")
            prompt = max(int(prompt_tokens), 0)
            # Before reserving: a request no route can hold is refused without touching the limits.
            # Without a max_tokens only the prompt must fit: the output reserved is what the
            # routes can give (never a refusal for a default the client did not send).
            asked = max(int(max_tokens), 0) if max_tokens is not None else 0
            if cold:
                selection = Selection([], ["on-demand model is stopped: this request starts it"])
            else:
                selection = select_routes(
                    info, key, prompt=prompt, output=asked, choice=choice, pinned=pinned, embedding=embedding
                )
            scopes = scopes_of(key, ns)
            if max_tokens is not None:
                # The most any of its routes is asked to generate (`route_output`: a route's max
                # output caps what the client asked for), as `call.send_upstream` sends it.
                reserve_max = max((route_output(r, asked) for r in selection.routes), default=asked)
            else:
                reserve_max = within_limits(default_output(info, selection.routes, prompt), scopes, prompt, choices)
            output = asked
            reserve = prompt + reserve_max * choices
            cost = 0
            # The most the request can cost on any route it may take (never 0 for "no price"); a
            # stopped on-demand model's at the price its route had when it last ran.
            if key.budgets:
                most = reserve_max * choices
                if starts is not None:
                    cost = cold_reservation(info, starts, prompt, most, limiter.now())
                else:
                    cost = budget_reservation(info, selection, prompt, most, limiter.now())
        except GatewayError as refused:
            # Refused on this process's snapshot, which the admission script has not vouched for
            # yet: when Redis says a change was saved since it was loaded (a model, route, price or
            # key), the request is resolved again on fresh data instead of refused for up to
            # GATEWAY_CACHE_TTL (a price set a moment ago answered 403 model_not_priced).
            if (
                attempt == 0
                and (refused.status < 500 or refused.code == "no_channel")
                and await _refused_on_stale(limiter)
            ):
                continue
            if resolved is not None and refused.status < 500:
                if wants_route_header(req, key):
                    refused.headers.append(route_header(refused.explanation))
                _record_refusal(
                    request_id,
                    key,
                    resolved,
                    surface,
                    stream,
                    refused,
                    started,
                    status=UsageStatus.CLIENT_ERROR,
                    explanation=refused.explanation,
                )
            raise
        # Admitted only if our cached keys/routes are still current (else Stale, nothing reserved),
        # the retry too: a deployment taken out of routing (`hosts.ondemand.services.take_out`)
        # while it loaded must not be sent the request after it read what is in flight.
        # The on-demand deployments it may be sent to (its model's, an alias's targets', or the
        # one it starts): counted in flight by the admission script itself (`ondemand.busy`).
        counted = [starts] if starts is not None else ondemand.counted(info, selection.routes)
        # An output the client did not ask for shrinks to what the token limits have left (at
        # least a token a choice) instead of refusing the request for it.
        floor = prompt + choices if max_tokens is None else None
        admit = limiter.admit(
            request_id,
            scopes,
            reserve,
            expected=expected,
            budgets=key.budgets,
            cost=cost,
            namespace=ns,
            floor=floor,
            busy=ondemand.busy(counted) if counted else (),
        )
        try:
            if choice.session is None and body is not None and balance.affine(info) and not cold:
                choice.session = balance.session_of(body, key.id)
                recall = balance.recall(limiter.redis, info.id, choice.session)
                result, choice.remembered = await asyncio.gather(admit, recall)
                # Now that Redis said where the session went, order the routes by it.
                selection = select_routes(
                    info, key, prompt=prompt, output=output, choice=choice, pinned=pinned, embedding=embedding
                )
                if key.budgets:
                    selection.routes[:] = priced_routes(selection, limiter.now()) or selection.routes
            else:
                result = await admit
        except GatewayError as unavailable:  # Redis unreachable: refused, and on the record as such
            metrics.refused("unavailable", "")
            _record_refusal(
                request_id, key, info, surface, stream, unavailable, started, status=UsageStatus.UNAVAILABLE
            )
            raise
        if isinstance(result, Stale):
            snapshot.observe_generation(*result.generations)
            continue
        if result.generations is not None:
            snapshot.observe_generation(*result.generations)
        break
    else:  # Stale every time: the configuration keeps changing under the request (nothing reserved)
        metrics.refused("stale", "")
        busy = GatewayError(
            503,
            "The gateway's configuration changed while this request was being admitted, "
            f"{ADMIT_ATTEMPTS} times in a row. Retry in a moment.",
            code="configuration_changing",
            headers=[(b"retry-after", b"1")],
        )
        _record_refusal(request_id, key, info, surface, stream, busy, started, status=UsageStatus.UNAVAILABLE)
        raise busy
    if isinstance(result, Refusal):
        metrics.refused(result.limit, result.scope)
        err = _budget_error(result, cost) if result.budget is not None else _refusal_error(result, scopes)
        if result.limit.startswith("tokens_per"):
            reserves = (
                f"This request reserves {reserve} tokens (prompt ≈{int(prompt_tokens)} + max_tokens {reserve_max}"
                f"{'' if max_tokens is not None else ', the default when none is sent'}"
                f"{f' × {choices} choices' if choices > 1 else ''})"
            )
            if reserve > result.value:  # more than the whole limit: no wait would let it in
                err = _never_fits(result, reserves, prompt, choices)
            elif max_tokens is None:  # the default output already shrank to what is left: none is
                err.message += (
                    f" What is left cannot hold this request's prompt (≈{prompt} tokens) and a token of answer."
                )
            else:
                err.message += f" {reserves}; a smaller max_tokens may fit."
        _record_refusal(request_id, key, info, surface, stream, err, started)
        raise err
    assert isinstance(result, Admission)
    if result.reserved < reserve:  # the default output, shrunk to what the limits had left
        reserve_max = max(1, (result.reserved - prompt) // choices)
    if result.alerts:
        alert_budgets(key, result.alerts)
    waited: float | None = None
    if starts is not None:
        info, selection, waited = await _warm_up(
            req,
            key,
            info,
            model,
            result,
            surface,
            stream,
            started,
            choice=choice,
            starts=starts,
            prompt=prompt,
            output=output,
        )
        if key.budgets:  # what it reserved was at a price: keep to the routes that have one
            selection.routes[:] = priced_routes(selection, limiter.now()) or selection.routes
    call = Call(
        req,
        surface,
        key,
        info,
        result,
        stream=stream,
        prompt_estimate=int(prompt_tokens),
        request_id=request_id,
        started=started,
        selection=selection,
    )
    call.max_tokens = reserve_max
    call.choices = choices
    call.choice = choice
    call.on_demand = counted
    if waited is not None:
        call.cold_start_ms = waited * 1000
        call.explanation.append(lines.WAITED % {"seconds": f"{waited:.1f}"})
    if counted:  # counted in flight by the admission script (`ondemand.busy`)
        ondemand.listen()  # from now on a stop is heard, not found out by the next request
    current.set(call)
    return call


async def _refused_on_stale(limiter: RedisLimiter) -> bool:
    """Whether a refusal was made on a snapshot older than a change Redis announced (it is dropped
    then). Asked only before refusing: an admitted request learns it from the admission script.
    Redis away: the refusal stands, made on the snapshot there is."""
    return bool(await snapshot.learn_generations(limiter.generations))


# key id -> (the KeyInfo they were made of, namespace, its scopes); a reloaded key is a new KeyInfo
_scopes: dict[int, tuple[KeyInfo, str, list[Scope]]] = {}
MAX_CACHED_SCOPES = 4096


def scopes_of(key: KeyInfo, ns: str) -> list[Scope]:
    """The limits admission enforces for `key`: its own, its owner's and (a ceiling over all its
    members together) its owner's team's. Made once per loaded key: a changed or reloaded key is
    a new `KeyInfo`, so a change is seen as soon as the snapshot has it. Read-only."""
    cached = _scopes.get(key.id)
    if cached is not None and cached[0] is key and cached[1] == ns:
        return cached[2]
    scopes = [
        Scope(f"{ns}:k:{key.id}", "key", key.limits),
        Scope(f"{ns}:u:{key.owner_id}", "user", key.owner_limits),
    ]
    if key.team_id is not None:
        scopes.append(Scope(f"{ns}:t:{key.team_id}", "team", key.team_limits))
    if len(_scopes) >= MAX_CACHED_SCOPES:
        _scopes.clear()
    _scopes[key.id] = (key, ns, scopes)
    return scopes


async def _warm_up(
    req: Request,
    key: KeyInfo,
    info: ModelInfo,
    model: object,
    admission: Admission,
    surface: str,
    stream: bool,
    started: float,
    *,
    prompt: int,
    output: int,
    choice: balance.Choice,
    starts: ModelInfo,
) -> tuple[ModelInfo, Selection, float]:
    """The request was admitted for a stopped on-demand model (`starts`: `info` itself, or the
    alias's target it starts): start it, wait, route on the fresh catalog. Anything that ends the
    wait settles the reservation unused and is on the record."""
    try:
        anthropic = surface == ApiSurface.MESSAGES
        waited = await ondemand.wait_until_warm(req, starts, stream=stream, asked=info.name, anthropic=anthropic)
        info = resolve_model(key, await snapshot.get_catalog(), model)
        if not info.has_routes:
            raise GatewayError(503, f"No channel serves the model '{info.name}' right now.", code="no_channel")
        embedding = surface == ApiSurface.EMBEDDINGS
        return info, select_routes(info, key, prompt=prompt, output=output, choice=choice, embedding=embedding), waited
    except BaseException as err:
        if process.limiter is not None:
            process.limiter.settle(admission, 0)
        ondemand.not_sent([starts], req.request_id)
        if isinstance(err, GatewayError):  # an answer: on the record (a cancellation is not)
            status = UsageStatus.UNAVAILABLE if err.status >= 500 else UsageStatus.CLIENT_ERROR
            _record_refusal(req.request_id, key, info, surface, stream, err, started, status=status)
        raise


PIN_HEADER = "x-portal-channel"


def pinned_channel(req: Request, key: KeyInfo) -> int | None:
    """The channel an admin tests alone from the playground (`X-Portal-Channel: <id>`); ignored on
    any other request (a key cannot steer routing)."""
    value = req.headers.get(PIN_HEADER, "")
    if req.playground and key.owner_is_admin and value.isascii() and value.isdigit():
        return int(value)
    return None


def priced_routes(selection: Selection, now: float) -> list[RouteInfo]:
    """The selection's routes that have a price (or the fallback the admin allows)."""
    return [route for route in selection.routes if route.rates(now)[0] is not None]


def budget_reservation(model: ModelInfo, selection: Selection, prompt: int, output: int, now: float) -> int:
    """The most the request can cost (nano-units) on any route it may be sent to. Routes without a
    price are dropped from the selection when the admin chose to refuse them (the route's
    `unpriced`, else PORTAL_UNPRICED_ROUTES) and charged the fallback otherwise; with none left the
    request is refused, never counted as free."""
    kept = priced_routes(selection, now)
    for route in selection.routes:
        if route not in kept:
            selection.explanation.append(lines.SKIPPED % {"channel": route.channel_name, "why": lines.NO_PRICE})
    most = max((r.rates(now)[0].most(prompt, output) for r in kept), default=0)  # type: ignore[union-attr]
    if not kept:
        raise not_priced(model)
    selection.routes[:] = kept
    return most


def cold_reservation(model: ModelInfo, starts: ModelInfo, prompt: int, output: int, now: float) -> int:
    """The most a request for `model` that starts the stopped on-demand model `starts` (itself, or
    an alias's target: `ModelInfo.starts_for`) can cost: at its route's price from its last run,
    else as an unpriced route (refused, or the fallback the admin allows)."""
    assert starts.on_demand is not None
    rates, _how = starts.on_demand.rates(now)
    if rates is None:
        raise not_priced(model)
    return rates.most(prompt, output)


def not_priced(model: ModelInfo) -> GatewayError:
    return GatewayError(
        403,
        f"The model '{model.name}' has no price on any channel that serves it, and this key has a budget: "
        "an admin must set its price (or allow a fallback price) before budgeted keys may use it.",
        code="model_not_priced",
    )


def alert_budgets(key: KeyInfo, budgets: list[BudgetInfo]) -> None:
    """Tell the alert targets and the owner, once per window, that a budget passed its alert share
    (sent from the usage writer's thread: nothing on the request path)."""
    process.usage.alert_budgets(key.owner_id, [b.id for b in budgets])


def _budget_error(refusal: Refusal, cost: int) -> GatewayError:
    """A 429 saying which budget, whose, and when it resets (Retry-After), or that it never does."""
    budget = refusal.budget
    assert budget is not None
    whose = {"key": "this key", "user": "your account", "team": "your team"}.get(budget.label, budget.label)
    window = {"day": "daily", "week": "weekly", "month": "monthly", "once": "one-off"}.get(budget.window, budget.window)
    text = (
        f"Budget reached: the {window} budget of {whose} is {format_money(refusal.value, 2)}; "
        f"this request may cost up to {format_money(cost)}."
    )
    headers: list[tuple[bytes, bytes]] = []
    if refusal.retry_after >= 0:
        retry = max(1, math.ceil(refusal.retry_after))
        resets = dt.datetime.fromtimestamp(time.time() + retry, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        text += f" It resets at {resets} (in {retry} s); a smaller max_tokens may fit meanwhile."
        headers.append((b"retry-after", str(retry).encode()))
    else:
        text += " It does not reset: ask an admin for a top-up."
    return GatewayError(429, text, code="budget_exceeded", headers=headers)


def default_output(model: ModelInfo, routes: list[RouteInfo], prompt: int) -> int:
    """The output reserved for a request that sent no max_tokens: what its routes can give (a
    route's max output, else its window minus the prompt), at most GATEWAY_DEFAULT_MAX_TOKENS."""
    default = int(settings.GATEWAY_DEFAULT_MAX_TOKENS)
    if model.max_output_tokens:
        default = min(default, model.max_output_tokens)
    gives = []
    for route in routes:
        give = route.max_output_tokens or (route.context_window - prompt if route.context_window else None)
        gives.append(default if give is None else min(default, give))
    return max(1, max(gives, default=default))


def within_limits(output: int, scopes: list[Scope], prompt: int, choices: int) -> int:
    """A default output (the client sent no max_tokens) that the smallest token limit can hold
    after the prompt: such a request is never refused, nor retried by an SDK, for what it did not ask."""
    for scope in scopes:
        for index in TOKEN_LIMITS:
            cap = scope.args[index]
            if cap >= 0 and prompt + output * choices > cap:
                output = max(1, (cap - prompt) // choices)
    return output


def _never_fits(refusal: Refusal, reserves: str, prompt: int, choices: int) -> GatewayError:
    """A 429 that says no retry can succeed: no Retry-After, and `x-should-retry: false`, which the
    OpenAI and Anthropic SDKs obey (they retry a 429 otherwise, twice by default)."""
    whose = {"key": "this key", "user": "your account", "team": "your team"}.get(refusal.scope, refusal.scope)
    most = (refusal.value - prompt) // choices
    advice = f"Send max_tokens of at most {most}." if most > 0 else "Shorten the prompt."
    return GatewayError(
        429,
        f"{reserves}, more than the {refusal.limit.replace('_', ' ')} limit of {whose} ({refusal.value}) "
        f"allows at all: retrying will not help. {advice}",
        code="request_too_large",
        headers=[(b"x-should-retry", b"false")],
    )


def _refusal_error(refusal: Refusal, scopes: list[Scope]) -> GatewayError:
    """A 429 with Retry-After and the key's x-ratelimit-* headers, saying which limit and whose."""
    retry = max(1, math.ceil(refusal.retry_after))
    what = refusal.limit.replace("_", " ")
    whose = {"key": "this key", "user": "your account", "team": "your team"}.get(refusal.scope, refusal.scope)
    per_minute = refusal.limit in ("requests_per_minute", "tokens_per_minute")
    headers = [(b"retry-after", str(retry).encode()), *rate_headers(scopes, None)]
    if refusal.scope == "key" and per_minute:
        which = b"requests" if refusal.limit == "requests_per_minute" else b"tokens"
        headers += [
            (b"x-ratelimit-remaining-" + which, b"0"),
            (b"x-ratelimit-reset-" + which, str(retry).encode() + b"s"),
        ]
    return GatewayError(
        429,
        f"Rate limit reached: {what} for {whose} is {refusal.value}. Retry in {retry} s.",
        code="rate_limit_exceeded" if "minute" in refusal.limit or "parallel" in refusal.limit else "quota_exceeded",
        headers=headers,
    )


def _record_refusal(
    request_id: str,
    key: KeyInfo,
    model: ModelInfo,
    surface: str,
    stream: bool,
    err: GatewayError,
    started: float,
    *,
    status: str = UsageStatus.RATE_LIMITED,
    explanation: list[str] | None = None,
) -> None:
    process.usage.record(
        UsageEvent(
            created=dt.datetime.now(dt.UTC),
            request_id=request_id,
            key_id=key.id,
            user_id=key.owner_id,
            team_id=key.team_id,
            model=model.name,
            channel_id=None,
            surface=surface,
            stream=stream,
            prompt_tokens=0,
            completion_tokens=0,
            estimated=False,
            status=status,
            http_status=err.status,
            error=err.message[:300],
            latency_ms=(time.perf_counter() - started) * 1000,
            route_explanation=explanation or [],
        )
    )
