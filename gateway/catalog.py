"""Request stage 2: which model, and which of its channels to try.

Resolving checks the public model name against what the key may use (404 with "did you mean",
403 when it exists but is not allowed). Routing (`select_routes`) walks the model, or an alias's
targets in order, and for each runs filters, then score: each filter looks at one route and
returns why it drops it (None keeps it) — an external channel for a local-only key or alias, a
window too small for the request's estimated tokens —, and the routes left are ordered by score
(`ordered_routes`): status tier (healthy and unknown before degraded before the rest) and
priority, both precomputed as `ModelInfo.groups` when the catalog loads (`cache`), then the
model's balancing policy within a group (`balance`: weighted random, session affinity or least
busy). Every step appends one short line to the call's explanation (stored with its usage record,
sent back on `X-Portal-Debug: route`), the policy's reason included (e.g. "affinity hit"): each is
one of the templates in `keys.usage.explanation`, which the pages translate when they show it.
Last, the routes of channels whose breaker is open (`breaker`: one that just hung or refused the
connection, in this process) go to the end of the whole order, each with a line saying so.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from channels.models import alias_limits, route_limits
from keys.usage import explanation as lines

from . import balance
from .breaker import breakers
from .cache import Catalog, KeyInfo, ModelInfo, RouteInfo, normalize_model_name
from .errors import ContextOverflow
from .http import GatewayError

RouteFilter = Callable[[RouteInfo], str | None]  # why the route is dropped, or None to keep it
Skipped = list[tuple[RouteInfo, str]]
EXTERNAL = (lines.EXTERNAL_FOR_KEY, lines.EXTERNAL_FOR_MODEL)


def usable_models(key: KeyInfo, catalog: Catalog, now: float | None = None) -> list[ModelInfo]:
    """Models this key may use now: enabled, allowed for key, owner and team, served now by a channel
    the key may use (for a local-only key or model, a local one: `ModelInfo.serves`) or started by
    its request (served on demand, on a host of ours, so local; an alias: its first on-demand target
    when nothing it may use serves it now, `ModelInfo.starts_for`); under a budget, one with a price
    (or the fallback the admin allows: else admission refuses it, `model_not_priced`)."""
    at = time.time() if now is None else now
    local = key.local_only
    return [
        m
        for m in catalog.models.values()
        if key.may_use(m)
        and (m.serves(local) or m.starts_for(local) is not None)
        and (not key.budgets or payable(m, at, local=local))
    ]


def payable(model: ModelInfo, at: float, *, local: bool) -> bool:
    """A route a request may use (`local`: a local-only key's, local ones) of `model` (an alias: of an
    enabled target) has a price at `at`; when nothing it may use serves it now, the on-demand model its
    request starts, at its route's price from its last run (`admission.cold_reservation`)."""
    if (starts := model.starts_for(local)) is not None:
        return starts.on_demand is not None and starts.on_demand.rates(at)[0] is not None
    local = local or model.local_only
    if model.is_alias:
        return any(t.enabled and payable(t, at, local=local) for t in model.targets)
    return any(r.rates(at)[0] is not None for group in model.groups for r in group if r.local or not local)


def limits_for(model: ModelInfo, key: KeyInfo) -> tuple[int | None, int | None]:
    """(context window, max output) this key can rely on (`/v1/models`): the model's, or for a
    local-only key the ones its local routes serve. Not on the request path."""
    if not (key.local_only or model.local_only):
        return model.context_window, model.max_output_tokens
    if model.is_alias:
        return alias_limits(route_limits(t.limit_pairs(True)) for t in model.targets if t.enabled)
    return route_limits(model.limit_pairs(True))


def resolve_model(key: KeyInfo, catalog: Catalog, name: object) -> ModelInfo:
    """The public model `name` if this key may use it, else 404 (unknown, with "did you mean")
    or 403 (exists, not allowed); both list what the key may use."""
    if name is not None and not isinstance(name, str):
        raise GatewayError(400, "`model` must be a string.", code="invalid_value", param="model")
    if not isinstance(name, str) or not name.strip():
        raise GatewayError(400, "The request has no `model`.", code="model_required", param="model")
    model = catalog.models.get(name)
    if model is not None and model.enabled and key.may_use(model):
        return model
    allowed = sorted(m.name for m in usable_models(key, catalog))
    listing = ", ".join(allowed) if allowed else "none"
    if model is not None and model.enabled:
        raise GatewayError(
            403,
            f"This key may not use the model '{name}'. Models it may use: {listing}.",
            code="model_not_allowed",
            param="model",
        )
    meant = did_you_mean(name, allowed)
    hint = f" Did you mean '{meant}'?" if meant else ""
    raise GatewayError(
        404,
        f"The model '{name}' does not exist or is not available.{hint} Models this key may use: {listing}.",
        code="model_not_found",
        param="model",
    )


def did_you_mean(name: str, allowed: list[str]) -> str | None:
    """The model of `allowed` (what the key may use: never another, which would tell of it) that
    `name` most likely meant, by difflib's closest spelling once case and separators are left out
    (`Qwen3_32B` is `qwen3-32b`, `qwen-32b` close to it), or None."""
    by_norm = {normalize_model_name(m): m for m in allowed}
    close = difflib.get_close_matches(normalize_model_name(name), by_norm, n=1)
    return by_norm[close[0]] if close else None


@dataclass(slots=True)
class Selection:
    """The routes a call may use, in order, and why (`explanation`, one short step per line)."""

    routes: list[RouteInfo]
    explanation: list[str]
    kept_local: bool = False  # external routes were dropped: a failure must say they were not tried


def external_for_key(route: RouteInfo) -> str | None:
    return None if route.local else lines.EXTERNAL_FOR_KEY


def external_for_model(route: RouteInfo) -> str | None:
    return None if route.local else lines.EXTERNAL_FOR_MODEL


def pinned_to(channel_id: int) -> RouteFilter:
    """An admin's playground test of one channel (`X-Portal-Channel`): every other route is dropped."""

    def other(route: RouteInfo) -> str | None:
        return None if route.channel_id == channel_id else lines.NOT_UNDER_TEST

    return other


def route_output(route: RouteInfo, output: int) -> int:
    """The output a request asking for `output` tokens gets on `route`: no more than the route's
    max output where one is configured (the knob that lets Claude Code's 32,000 `max_tokens` fit a
    small local window). What the route is sent (`call.within_route_output`) and reserved."""
    cap = route.max_output_tokens
    return min(output, cap) if cap else output


def route_need(route: RouteInfo, prompt: int, output: int) -> int:
    """Tokens a request needs on `route`: the prompt plus the output it gets there (`route_output`)."""
    return prompt + route_output(route, output)


def window_filter(prompt: int, output: int) -> RouteFilter:
    """Drops a route whose served window (discovered, else configured) cannot hold the request
    (`route_need`); a route whose window is unknown is kept."""

    def too_small(route: RouteInfo) -> str | None:
        window = route.context_window
        if window is not None:
            need = route_need(route, prompt, output)
            if window < need:
                return lines.WINDOW % {"window": f"{window:,}", "need": f"{need:,}"}
        return None

    return too_small


def select_routes(
    model: ModelInfo,
    key: KeyInfo,
    *,
    prompt: int,
    output: int,
    choice: balance.Choice | None = None,
    pinned: int | None = None,
    embedding: bool = False,
) -> Selection:
    """The routes to try for a request of about `prompt` tokens asking for up to `output` more:
    the model's, or an alias's targets' one after the other, filtered (locality, window) and scored.
    None left is an error saying why: 400 naming the largest window, 403 when only external
    channels serve a local-only request, 503 when nothing serves the model now. `choice` (the
    call's balancing) goes to the first target with routes. `pinned`: only that channel's routes
    (an admin testing one channel from the playground). `embedding`: the prompt is an embeddings
    input (the refusal speaks of it, not of a conversation)."""
    explanation: list[str] = []
    targets = model.targets if model.is_alias else [model]
    if model.is_alias:
        explanation.append(lines.ALIAS % {"alias": model.name, "targets": ", ".join(t.name for t in targets)})
    locality: RouteFilter | None = None
    if key.local_only:
        locality = external_for_key
    elif model.local_only:
        locality = external_for_model
    filters: list[RouteFilter] = [locality] if locality is not None else []
    if pinned is not None:
        explanation.append(lines.PINNED % {"channel": pinned})
        filters.insert(0, pinned_to(pinned))
    if prompt > 0 or output > 0:
        filters.append(window_filter(prompt, output))
    routes: list[RouteInfo] = []
    skipped: Skipped = []
    cooled: list[RouteInfo] = []
    for target in targets:
        fs = filters
        if target is not model:
            if not target.enabled:
                explanation.append(lines.SKIPPED % {"channel": target.name, "why": lines.DISABLED})
                continue
            if target.local_only and locality is None:
                fs = [external_for_model, *filters]  # a local-only target stays local behind an alias too
        routes += ordered_routes(target, fs, skipped, explanation, None if routes else choice, cooled)
    if cooled:  # last resorts: tried after every other route, never dropped
        routes += cooled
        explanation += [cooling_line(r) for r in cooled]
    if not skipped and routes:
        return Selection(routes, explanation)  # the common case: nothing dropped
    line = lines.SKIPPED_TARGET if model.is_alias else lines.SKIPPED
    for route, why in skipped:
        explanation.append(line % {"channel": route.channel_name, "model": route.model_name, "why": why})
    if routes:
        return Selection(routes, explanation, any(why in EXTERNAL for _, why in skipped))
    raise _nothing_fits(model, skipped, prompt, output, explanation, key_local=key.local_only, embedding=embedding)


def _nothing_fits(
    model: ModelInfo,
    skipped: Skipped,
    prompt: int,
    output: int,
    explanation: list[str],
    *,
    key_local: bool,
    embedding: bool = False,
) -> GatewayError:
    external = [r for r, why in skipped if why in EXTERNAL]
    too_small = [r for r, why in skipped if why not in EXTERNAL and why != lines.NOT_UNDER_TEST]  # lines.WINDOW
    err: GatewayError
    if skipped and all(why == lines.NOT_UNDER_TEST for _, why in skipped):
        err = GatewayError(
            400,
            f"The channel under test does not serve the model '{model.name}' (or its route is disabled).",
            code="channel_not_serving",
            param="model",
        )
    elif too_small:
        biggest = max(too_small, key=lambda r: r.context_window or 0)
        largest, need = biggest.context_window or 0, route_need(biggest, prompt, output)
        where = " on local channels" if external else ""
        if embedding:
            err = ContextOverflow(
                f"The input is about {prompt:,} tokens (estimated), more than the model '{model.name}' reads"
                f"{where}: its largest context window is {largest:,} tokens. Shorten or split the input.",
                prompt_tokens=prompt,
                window=largest,
                param="input",
            )
        else:
            if output:
                counted = f"prompt ≈{prompt:,} (estimated) + max_tokens {min(output, need - prompt):,}"
                advice = "Shorten the conversation or lower max_tokens."
            else:
                counted = f"the prompt alone, ≈{prompt:,} estimated; no max_tokens was sent"
                advice = "Shorten the conversation."
            err = ContextOverflow(
                f"This request needs about {need:,} tokens ({counted}), more than the model "
                f"'{model.name}' can serve{where}: its largest context window is {largest:,} tokens. {advice}",
                prompt_tokens=prompt,
                window=largest,
                max_tokens=min(output, need - prompt) if output else None,
            )
    elif external:
        whose = "this key is" if key_local else f"'{model.name}' is"
        err = GatewayError(
            403,
            f"Only external channels serve '{model.name}' and {whose} restricted to local channels, so the "
            "request was not sent anywhere.",
            code="local_only",
            param="model",
        )
    else:
        err = GatewayError(503, f"No channel serves the model '{model.name}' right now.", code="no_channel")
    explanation.append(lines.REFUSED % {"code": err.code})
    err.explanation = explanation
    return err


def cooling_line(route: RouteInfo) -> str:
    b = breakers.open.get(route.channel_id)
    return lines.COOLING % {"channel": route.channel_name, "error": b.failure if b is not None else "?"}


def ordered_routes(
    model: ModelInfo,
    filters: Sequence[RouteFilter] = (),
    skipped: Skipped | None = None,
    notes: list[str] | None = None,
    choice: balance.Choice | None = None,
    cooled: list[RouteInfo] | None = None,
) -> list[RouteInfo]:
    """The model's routes in the order to try them. `filters` drop routes first; each dropped
    route is appended to `skipped` with its reason when a list is given. The balancing policy
    appends why it put a route first to `notes`; `choice` (the call's) learns which route the
    policy put first and why. The routes of cooling channels (`breaker`) are left out and
    appended to `cooled` when a list is given (the caller tries them last)."""
    out: list[RouteInfo] = []
    for group in model.groups:
        if filters:
            group = _kept(group, filters, skipped)
        if cooled is not None and breakers.open:
            group = breakers.partition(group, cooled)
        if group:
            out.extend(balance.order(group, model.balance, None if out else choice, notes))
    return out


def _kept(group: list[RouteInfo], filters: Sequence[RouteFilter], skipped: Skipped | None) -> list[RouteInfo]:
    kept: list[RouteInfo] = []
    for r in group:
        reason = next((why for f in filters if (why := f(r)) is not None), None)
        if reason is None:
            kept.append(r)
        elif skipped is not None:
            skipped.append((r, reason))
    return kept
