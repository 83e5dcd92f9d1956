"""Channel and model workflows shared by the web UI, the REST API and launch jobs."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal.i18n import Message, as_message, listing, set_message

from .baseurl import BaseURLError, normalize_base_url
from .choices import Locality, ModelKind, PriceSource

SETTINGS_CHANGED = Message(gettext_noop("Connection settings changed; waiting for the next check."))

if TYPE_CHECKING:
    from .models import Model, ModelRoute

LOCAL_SUFFIXES = (".local", ".lan", ".internal", ".localhost", ".home.arpa")


def suggest_locality(base_url: str) -> str:
    """Local for an address on our own network (loopback, private or link-local IP, `localhost`,
    a single-label or `.local`/`.lan`/`.internal` name), else external: the default of a channel
    added by hand. A deployment's channel is always local (`register_served_model`)."""
    host = (urlsplit(base_url).hostname or "").lower().rstrip(".")
    if not host:
        return Locality.EXTERNAL
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        local = host == "localhost" or "." not in host or host.endswith(LOCAL_SUFFIXES)
    else:
        local = ip.is_private or ip.is_loopback or ip.is_link_local
    return Locality.LOCAL if local else Locality.EXTERNAL


def clean_base_url(raw: str) -> tuple[str, list[str]]:
    """Canonical base URL plus human notes on what changed; ValidationError for unusable input."""
    try:
        return normalize_base_url(raw)
    except BaseURLError as exc:
        raise ValidationError({"base_url": [str(exc)]}) from None


def reset_status_after_edit(channel, *, previous_base_url: str, previous_api_key: str) -> bool:
    """An admin edit of the base URL or API key voids the last verdict (including
    `credentials_rejected`): the channel goes back to `unknown` until the next check. Call before
    saving; returns whether the status was reset."""
    from django.utils import timezone

    from .choices import ChannelStatus

    if channel.base_url == previous_base_url and (channel.api_key or "") == (previous_api_key or ""):
        return False
    if channel.status != ChannelStatus.UNKNOWN:
        channel.status = ChannelStatus.UNKNOWN
        set_message(channel, "status_message", SETTINGS_CHANGED)
        channel.status_changed = timezone.now()
    return True


def register_served_model(
    *,
    channel,
    name: str,
    kind: str,
    base_url: str,
    api_key: str,
    model_name: str,
    upstream_model: str,
    context_window: int | None,
    status_message: Message | str,
    model_kind: str = ModelKind.CHAT,
):
    """Point a channel at a server someone else started (a GPU host's launch job) and route
    `model_name` to it alone, all or nothing. `channel` is the one registered before, or None for
    a new one named `name` (suffixed `-2`, `-3`… when taken). It waits for its first health probe.
    A model this creates gets `model_kind` (an embedding server's); an existing one keeps its own."""
    from django.db import transaction
    from django.utils import timezone

    from .choices import ChannelStatus
    from .models import Channel, Model, ModelRoute

    base_url, _warnings = normalize_base_url(base_url)
    now = timezone.now()
    with transaction.atomic():
        if channel is None:
            channel = Channel(name=_free_channel_name(name))
        channel.kind = kind
        channel.locality = Locality.LOCAL  # we started the server, on one of our hosts
        channel.base_url = base_url
        channel.api_key = api_key
        channel.enabled = True
        channel.status = ChannelStatus.UNKNOWN
        set_message(channel, "status_message", status_message)
        channel.status_changed = now
        channel.save()
        model, _created = Model.objects.get_or_create(name=model_name, defaults={"kind": model_kind})
        if model.is_alias:  # the deployment form refuses this name; an alias made since must not get a route
            raise ValueError(
                _("'%(model)s' is now an alias; serve the model under its own name.") % {"model": model_name}
            )
        # The server serves `model` alone now. A route to the model it served before goes, unless an
        # admin priced it: then it stays, switched off, so its price history outlives a relaunch
        # under another name (and comes back with its prices when the old name returns).
        before = ModelRoute.objects.filter(channel=channel).exclude(model=model)
        before.filter(prices__isnull=True).delete()
        for route in before.filter(enabled=True):
            route.enabled = False
            route.save(update_fields=["enabled", "updated"])  # save(): the gateway drops its cached routes
        ModelRoute.objects.update_or_create(
            model=model,
            channel=channel,
            defaults={
                "upstream_model": upstream_model,
                "context_window": context_window,
                "discovered_context_window": context_window,
                "discovered_at": now,
                "enabled": True,
            },
        )
    return channel


def disable_served_channel(channel_id: int, *, status_message: Message | str) -> None:
    """The server behind a registered channel was stopped: stop routing to it, say why. Its health
    is unknown from now on (its last probe's "healthy" would describe a server that is gone); a
    stop is no health event, so no status change is recorded and no alert goes out."""
    from django.utils import timezone

    from .choices import ChannelStatus
    from .models import Channel

    channel = Channel.objects.filter(pk=channel_id).first()
    if channel is not None:
        channel.enabled = False
        changed = ["enabled"]
        if channel.status != ChannelStatus.UNKNOWN:
            channel.status, channel.status_changed = ChannelStatus.UNKNOWN, timezone.now()
            changed += ["status", "status_changed"]
        fields = set_message(channel, "status_message", status_message)
        # save(), not update(): the gateway drops its cached routes on the post_save signal.
        channel.save(update_fields=[*changed, *fields, "updated"])


def take_served_channel_down(channel_id: int, *, status_message: Message | str) -> None:
    """The server behind a registered channel crashed: out of routing at once (down and disabled)
    until its deployment registers it again (`register_served_model` re-enables it)."""
    from django.utils import timezone

    from .choices import ChannelStatus
    from .models import Channel, StatusChange

    channel = Channel.objects.filter(pk=channel_id).first()
    if channel is None:
        return
    previous = channel.status
    channel.enabled = False
    channel.status = ChannelStatus.DOWN
    fields = set_message(channel, "status_message", status_message)
    channel.status_changed = timezone.now()
    # save(), not update(): the gateway drops its cached routes on the post_save signal.
    channel.save(update_fields=["enabled", "status", *fields, "status_changed", "updated"])
    if previous != ChannelStatus.DOWN:
        StatusChange.objects.create(
            channel=channel,
            from_status=previous,
            to_status=ChannelStatus.DOWN,
            **as_message(status_message).columns("message", 300),
        )


def _free_channel_name(base: str) -> str:
    """`base`, or `base-2`, `base-3`… when an unrelated channel already has the name."""
    from .models import Channel

    name, n = base, 1
    while Channel.objects.filter(name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def suggest_public_name(upstream_id: str) -> str:
    """A public name for a served model: its last path segment, lowercased, without `.gguf`
    (`Qwen/Qwen3-32B` → `qwen3-32b`, `/models/tiny-Q4_K_M.gguf` → `tiny-q4_k_m`)."""
    base = upstream_id.rstrip("/").rsplit("/", 1)[-1].removesuffix(".gguf").lower()
    cleaned = "".join(c if c.isalnum() or c in "._:@+-" else "-" for c in base).lstrip("._:@+-")
    return cleaned[:128] or "model"


@transaction.atomic
def add_served_model(*, channel, name: str, upstream_model: str, context_window: int | None):
    """ "Add models from this channel": the public model (created unless it exists) and its route
    to `channel`. Raises ValidationError by field."""
    from .models import Model, ModelRoute

    model = Model.objects.filter(name=name).first()
    if model is None:
        model = Model(name=name)
        model.full_clean()
        model.save()
    elif model.is_alias:  # (an alias has targets, never routes: the gateway would not use this one)
        raise ValidationError({"name": [_("%(name)s is an alias; give the model a name of its own.") % {"name": name}]})
    elif ModelRoute.objects.filter(model=model, channel=channel).exists():
        raise ValidationError(
            {"name": [_("%(name)s already has a route to %(channel)s.") % {"name": name, "channel": channel.name}]}
        )
    route = ModelRoute(
        model=model,
        channel=channel,
        upstream_model="" if upstream_model == name else upstream_model,
        context_window=context_window,
    )
    route.full_clean(exclude=["model", "channel"])
    route.save()
    return route


ROUTE_FIELDS = ("upstream_model", "context_window", "max_output_tokens", "enabled")


def priced_route_names(routes) -> list[str]:
    """The names of those of `routes` (a ModelRoute queryset) that have prices: a delete that takes
    them along takes their price history too, so the UI's confirmation and the API's 409 name them."""
    return sorted({str(r) for r in routes.filter(prices__isnull=False).select_related("model", "channel")})


def replace_routes(model, routes: list[dict], *, remove_priced: bool = False) -> None:
    """Make `routes` (each a dict with its `channel` and any of ROUTE_FIELDS) the whole set of
    `model`'s routes, keyed by channel: a channel that stays keeps its row, and so its prices, their
    history and its discovered window; a new channel gets a row; the others' rows are deleted. A
    route with prices takes its price history with it, so removing one is refused (a field error
    on `remove_priced_routes`, naming the channels) unless `remove_priced` says the caller asked."""
    from .models import ModelRoute, RoutePrice

    existing = {r.channel_id: r for r in ModelRoute.objects.filter(model=model).select_related("channel")}
    wanted = {data["channel"].pk for data in routes}
    gone = [route for channel_id, route in existing.items() if channel_id not in wanted]
    priced = set(RoutePrice.objects.filter(route__in=gone).values_list("route_id", flat=True))
    if priced and not remove_priced:
        names = sorted(route.channel.name for route in gone if route.pk in priced)
        raise ValidationError(
            {
                "remove_priced_routes": [
                    _(
                        "The routes to %(channels)s have prices: removing them deletes their prices and price "
                        "history. Confirm that they go, or keep them."
                    )
                    % {"channels": listing(names)}
                ]
            }
        )
    for route in gone:
        route.delete()
    for data in routes:
        route = existing.get(data["channel"].pk) or ModelRoute(model=model, channel=data["channel"])
        changed = route.pk is None
        for name in ROUTE_FIELDS:
            if name in data and getattr(route, name) != data[name]:
                setattr(route, name, data[name])
                changed = True
        if changed:
            route.save()


MAX_ALIAS_TARGETS = 10


@transaction.atomic
def save_alias(
    *,
    alias=None,
    name: str,
    targets: list,
    display_name: str = "",
    description: str = "",
    enabled: bool = True,
    local_only: bool = False,
):
    """Create (`alias=None`) or update an alias: a public name whose requests go to `targets`
    (models or their names, in the order to try), the first whose window holds the request.
    Raises ValidationError by field (`name`, `targets`, ...)."""
    from .models import AliasTarget, Model

    if alias is None:
        alias = Model(is_alias=True)
    elif not alias.is_alias:
        raise ValidationError({"name": [_("%(alias)s is a model with routes, not an alias.") % {"alias": alias.name}]})
    alias.name, alias.display_name, alias.description = name, display_name, description
    alias.enabled, alias.local_only = enabled, local_only
    errors: dict[str, list[str]] = {}
    try:
        alias.full_clean(validate_unique=True)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    resolved = _alias_targets(alias, targets, errors)
    if errors:
        raise ValidationError(errors)
    alias.save()
    current = [t.target_id for t in AliasTarget.objects.filter(alias=alias).order_by("position")]
    if current != [t.pk for t in resolved]:
        # One row at a time (at most MAX_ALIAS_TARGETS): each is audited and reloads the gateway.
        AliasTarget.objects.filter(alias=alias).delete()
        for position, target in enumerate(resolved):
            AliasTarget.objects.create(alias=alias, target=target, position=position)
    return alias


def _alias_targets(alias, targets: list, errors: dict[str, list[str]]) -> list:
    from .models import Model

    names = [t.name if isinstance(t, Model) else str(t).strip() for t in targets]
    names = [n for n in names if n]
    problems: list[str] = []
    if not names:
        problems.append(_("Choose at least one target model."))
    if len(names) > MAX_ALIAS_TARGETS:
        problems.append(_("An alias has at most %(count)d targets.") % {"count": MAX_ALIAS_TARGETS})
    if len(set(names)) != len(names):
        problems.append(_("Each target may be listed once."))
    found = {m.name: m for m in Model.objects.filter(name__in=names)}
    resolved = []
    for n in names:
        model = found.get(n)
        if model is None:
            problems.append(_("There is no model named %(name)s.") % {"name": n})
        elif (alias.pk and model.pk == alias.pk) or n == alias.name:
            problems.append(_("An alias cannot point at itself."))
        elif model.is_alias:
            problems.append(_("%(name)s is an alias itself; point at the models it names instead.") % {"name": n})
        else:
            resolved.append(model)
    if problems:
        errors["targets"] = problems
    return resolved


# --- deleting a model ---------------------------------------------------------------------------
ModelHolders = Callable[["Model"], list[str]]
_model_holder_sources: list[ModelHolders] = []


def register_model_holders(source: ModelHolders) -> None:
    """An app above this one names its allow-lists (keys; users and teams) whose only entry is a
    given model, e.g. "key laptop of alice". Called from AppConfig.ready()."""
    if source not in _model_holder_sources:
        _model_holder_sources.append(source)


def _listed(names: list[str], most: int = 10) -> str:
    return listing(names, most)


def check_model_deletable(model: Model) -> None:
    """Raise ValidationError naming what deleting `model` (or an alias) would open or break: an
    allow-list whose only entry it is would be left empty, and empty means every model; an alias
    whose only target it is would be left with none."""
    from .models import Model

    problems = []
    holders = [name for source in _model_holder_sources for name in source(model)]
    if holders:
        problems.append(
            _(
                "Still used by %(listed)s, limited to this model alone: deleting it would let them use every "
                "model. Change their allowed models first."
            )
            % {"listed": _listed(holders)}
        )
    aliases = Model.objects.aliases().filter(targets__target=model).prefetch_related("targets").order_by("name")
    lonely = [a.name for a in aliases if len(a.targets.all()) == 1]
    if lonely:
        problems.append(
            _(
                "Still used by the aliases %(listed)s, whose only target it is: give them another target or "
                "delete them first."
            )
            % {"listed": _listed(lonely)}
        )
    if problems:
        raise ValidationError(problems)


@transaction.atomic
def delete_model(model: Model) -> None:
    """Delete a model or an alias unless `check_model_deletable` refuses (ValidationError)."""
    check_model_deletable(model)
    model.delete()


# --- prices ------------------------------------------------------------------------------------

CATALOGUE = Path(__file__).resolve().parent / "data" / "price_catalogue.json"


def set_route_price(
    route,
    *,
    input,
    output,
    cached_input=None,
    cache_write=None,
    effective_from=None,
    source: str = PriceSource.MANUAL,
    note: str = "",
):
    """Add a price row for `route` (from `effective_from`, now by default). Rows are never edited:
    the old price stays in effect for the usage made before the new one starts."""
    from .models import RoutePrice

    when = effective_from or timezone.now()
    price = RoutePrice(
        route=route,
        effective_from=when,
        input=Decimal(str(input)),
        output=Decimal(str(output)),
        cached_input=None if cached_input in (None, "") else Decimal(str(cached_input)),
        cache_write=None if cache_write in (None, "") else Decimal(str(cache_write)),
        source=source,
        note=note[:300],
    )
    price.full_clean(exclude=["route"])
    if RoutePrice.objects.filter(route=route, effective_from=when).exists():
        raise ValidationError({"effective_from": _("This route already has a price starting at that moment.")})
    price.save()
    return price


def catalogue_entries(currency: str) -> list[dict]:
    """The starter catalogue's entries in `currency` (channels/data/price_catalogue.json)."""
    data = json.loads(CATALOGUE.read_text())
    return [e for e in data["prices"] if e.get("currency", "USD") == currency]


def _catalogue_match(upstream_id: str, entries: list[dict]) -> dict | None:
    """The entry whose `match` is the longest prefix of the id (`gpt-4o-mini-2024…` is gpt-4o-mini)."""
    name = upstream_id.lower().rsplit("/", 1)[-1]
    best, best_len = None, -1
    for entry in entries:
        for m in entry["match"]:
            m = m.lower()
            if (name == m or name.startswith(m + "-") or name.startswith(m + ":")) and len(m) > best_len:
                best, best_len = entry, len(m)
    return best


def load_price_catalogue(*, overwrite: bool = False) -> list:
    """Price every external route the catalogue knows and that has no price yet (or every one it
    knows, with `overwrite`: a new row from now on, the old kept). Returns the rows added."""
    from django.conf import settings

    from .models import ModelRoute, RoutePrice

    entries = catalogue_entries(settings.PORTAL_CURRENCY)
    priced = set(RoutePrice.objects.values_list("route_id", flat=True))
    added = []
    routes = ModelRoute.objects.select_related("model", "channel").filter(channel__locality=Locality.EXTERNAL)
    for route in routes:
        if route.id in priced and not overwrite:
            continue
        entry = _catalogue_match(route.upstream_id, entries)
        if entry is None:
            continue
        added.append(
            set_route_price(
                route,
                input=entry["input"],
                output=entry["output"],
                cached_input=entry.get("cached_input"),
                cache_write=entry.get("cache_write"),
                source=PriceSource.CATALOGUE,
                note=f"catalogue: {entry['match'][0]}",
            )
        )
    return added


# --- what the apps above know of a served model (the models pages) ------------------------------
ModelStates = Callable[[list[str]], dict[str, dict[str, bool]]]
_model_state_sources: list[ModelStates] = []


def register_model_states(source: ModelStates) -> None:
    """An app above this one says more about models by name (hosts: `on_demand`, and `cold` while
    its deployment is stopped and the next request starts it). Called from AppConfig.ready()."""
    if source not in _model_state_sources:
        _model_state_sources.append(source)


def model_states(names: list[str]) -> dict[str, dict[str, bool]]:
    states: dict[str, dict[str, bool]] = {}
    for source in _model_state_sources:
        for name, state in source(names).items():
            states.setdefault(name, {}).update(state)
    return states


# --- the window of a model nothing serves now but whose next request starts a server ----------
ColdWindows = Callable[[], dict[str, int | None]]
_cold_window_sources: list[ColdWindows] = []


def register_cold_windows(source: ColdWindows) -> None:
    """An app above this one starts servers on demand (hosts: a stopped on-demand deployment) and
    knows, per model name, the window its server starts with. Called from AppConfig.ready()."""
    if source not in _cold_window_sources:
        _cold_window_sources.append(source)


def cold_windows() -> dict[str, int]:
    """Per model name, the window a request for it would be served with once its server starts
    (`Model.effective_limits`'s `cold`); names with no known window are left out."""
    windows: dict[str, int] = {}
    for source in _cold_window_sources:
        windows.update({name: window for name, window in source().items() if window})
    return windows


def set_unpriced_policy(route: ModelRoute, policy: str) -> None:
    """What a key with a budget meets on `route` while it has no price (`UnpricedPolicy`)."""
    route.unpriced = policy
    # save(), not update(): the gateway reloads its routes on the post_save signal, and it is audited.
    route.save(update_fields=["unpriced", "updated"])
