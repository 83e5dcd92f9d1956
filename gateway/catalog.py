"""Request stage 2: which model, and which of its channels to try.

Resolving checks the public model name against what the key may use (404 with "did you mean",
403 when it exists but is not allowed). Routing is filters, then score: each filter looks at one
route and returns why it drops it (None keeps it), and the routes left are ordered by score:
status tier (healthy and unknown before degraded before the rest) and priority, both precomputed
as `ModelInfo.groups` when the catalog loads (`cache`), then the model's balancing policy within a
group (`balance`: weighted random, session affinity or least busy).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from . import balance
from .cache import Catalog, KeyInfo, ModelInfo, RouteInfo, normalize_model_name
from .http import GatewayError

RouteFilter = Callable[[RouteInfo], str | None]  # why the route is dropped, or None to keep it
Skipped = list[tuple[RouteInfo, str]]


def usable_models(key: KeyInfo, catalog: Catalog) -> list[ModelInfo]:
    """Models this key may use now: enabled, allowed for key, owner and team, with at least one route."""
    return [m for m in catalog.models.values() if m.groups and key.may_use(m)]


def resolve_model(key: KeyInfo, catalog: Catalog, name: object) -> ModelInfo:
    """The public model `name` if this key may use it, else 404 (unknown, with "did you mean")
    or 403 (exists, not allowed); both list what the key may use."""
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
    hint = ""
    for candidate in catalog.by_norm.get(normalize_model_name(name), ()):
        if candidate in allowed:
            hint = f" Did you mean '{candidate}'?"
            break
    raise GatewayError(
        404,
        f"The model '{name}' does not exist or is not available.{hint} Models this key may use: {listing}.",
        code="model_not_found",
        param="model",
    )


def ordered_routes(
    model: ModelInfo,
    filters: Sequence[RouteFilter] = (),
    skipped: Skipped | None = None,
    choice: balance.Choice | None = None,
) -> list[RouteInfo]:
    """The model's routes in the order to try them. `filters` drop routes first; each dropped
    route is appended to `skipped` with its reason when a list is given. `choice` (the call's)
    learns which route the balancing policy put first and why."""
    out: list[RouteInfo] = []
    for group in model.groups:
        if filters:
            group = _kept(group, filters, skipped)
        if group:
            out.extend(balance.order(group, model.balance, None if out else choice))
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
