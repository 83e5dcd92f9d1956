"""Workflows behind the "Connect your tools" page, the REST API and the installers.

The model list a key may use, with the limits a client can rely on; the version stamp that says
when downloaded files went stale; minting a key per client; single-use download tokens.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import secrets as pysecrets
import string
import unicodedata
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from channels.choices import Locality, ModelKind
from channels.models import AliasTarget, Model, ModelRoute, alias_limits
from channels.services import cold_windows
from hosts.models import Deployment
from keys.budgets import services as budgets
from keys.models import Key
from keys.services import issue_key, rotate_key
from mcpservers.access import allowed_servers
from portal import audit
from portal.choices import AuditAction
from portal.i18n import Message, listing
from portal.public import public_url
from portal.secrets import keyed_hash

from . import clients
from .clients.base import McpServerSpec, ModelSpec, Rendered, RenderInput
from .models import ConfigDownload, DownloadToken, KeyMode

if TYPE_CHECKING:
    from django.http import HttpRequest

    from accounts.models import User

TOKEN_PREFIX = "gdt-"  # noqa: S105 - a prefix, not a secret
TOKEN_TTL = datetime.timedelta(minutes=10)
# Input a request always keeps: Continue warns below 1000 tokens of room for the prompt.
MIN_INPUT_ROOM = 1024
# How long the key a new download replaces keeps working: long enough for the running session to
# finish on the machine the installer just updated, short enough that keys do not pile up.
REPLACE_GRACE = datetime.timedelta(minutes=10)


def gateway_url(request: HttpRequest | None = None) -> str:
    """The root developers' clients talk to: PORTAL_PUBLIC_URL, else the address this server
    listens on; never the request's Host header (a forged one would land in installers)."""
    return re.sub(r"/v1$", "", public_url(request).rstrip("/"))


def usable_models(user: User, key: Key | None = None) -> QuerySet[Model]:
    """Enabled models with at least one enabled route on an enabled channel (an alias: an enabled
    target with one), narrowed by the owner's allow-list and then the key's (an empty list means
    no narrowing). For a local-only key, a local-only model, or behind a local-only alias, only
    local channels count (the gateway's rule, `gateway.catalog.select_routes`). Under a budget,
    models the gateway refuses for want of a price are left out (`unpayable`)."""
    local = key is not None and key.local_only
    live_routes = ModelRoute.objects.enabled().filter(model=OuterRef("pk"))
    on_local = Q(target__routes__channel__locality=Locality.LOCAL)
    live_targets = AliasTarget.objects.filter(
        on_local if local else on_local | Q(alias__local_only=False, target__local_only=False),
        alias=OuterRef("pk"),
        target__enabled=True,
        target__routes__enabled=True,
        target__routes__channel__enabled=True,
    )
    if local:
        live_routes = live_routes.filter(channel__locality=Locality.LOCAL)
    else:
        live_routes = live_routes.filter(Q(channel__locality=Locality.LOCAL) | Q(model__local_only=False))
    owner = key.owner if key is not None else user
    # A model served on demand is offered while stopped: the first request starts it (hosts/ondemand/);
    # so is an alias with an enabled on-demand target (a request through it starts that one).
    served_on_demand = Deployment.objects.filter(on_demand=True)
    on_demand = served_on_demand.filter(served_model_name=OuterRef("name"))
    on_demand_targets = AliasTarget.objects.filter(
        alias=OuterRef("pk"), target__enabled=True, target__name__in=served_on_demand.values("served_model_name")
    )
    qs = Model.objects.usable_by(owner).filter(
        Exists(live_routes) | Exists(live_targets) | Exists(on_demand) | Exists(on_demand_targets)
    )
    if key is not None:
        key_allowed = list(key.allowed_models.values_list("pk", flat=True))
        if key_allowed:
            qs = qs.filter(pk__in=key_allowed)
    if budgets.budgeted(user, key):  # the gateway refuses a model without a price to a budgeted key
        qs = qs.exclude(pk__in=budgets.unpayable(Model.objects.all()).values("pk"))
    return qs.order_by("name")


def output_room(context_window: int | None, max_output: int | None) -> int | None:
    """Max output tokens that leave room for the prompt: at least max(1024, a quarter) of the window."""
    if context_window is None:
        return max_output
    out = max_output or min(settings.GATEWAY_DEFAULT_MAX_TOKENS, context_window // 2)
    reserve = max(MIN_INPUT_ROOM, context_window // 4)
    if context_window - reserve < 1:
        return max(1, context_window // 4)
    return max(1, min(out, context_window - reserve))


def model_specs(user: User, key: Key | None = None) -> tuple[ModelSpec, ...]:
    """The chat models `user` (with `key`: the key) may use, as `specs_by_kind` gives them: what
    every client's chat model list, default model and window settings are made of."""
    return specs_by_kind(user, key)[0]


def specs_by_kind(user: User, key: Key | None = None) -> tuple[tuple[ModelSpec, ...], tuple[ModelSpec, ...]]:
    """(chat models, embedding models): each usable model with the smallest context window its
    enabled routes really serve (discovered, else configured) and an output limit that leaves room
    for input. An alias is listed like any model, with the largest window one of its targets
    serves (the gateway falls through to it), as `channels.models.Model.effective_limits` says. A
    stopped on-demand model has the window its server starts with (`channels.services.cold_windows`)."""
    routes = ModelRoute.objects.enabled().select_related("channel")
    cold = cold_windows()
    targets = AliasTarget.objects.select_related("target").order_by("position")
    key_local = key is not None and key.local_only
    chat: list[ModelSpec] = []
    embedding: list[ModelSpec] = []
    prefetched = usable_models(user, key).prefetch_related(
        Prefetch("routes", queryset=routes, to_attr="live"),
        Prefetch("targets", queryset=targets, to_attr="live_targets"),
        # The targets are models too: the same `live` list, which the stubs' plugin takes for a redefinition.
        Prefetch("live_targets__target__routes", queryset=routes, to_attr="live"),  # type: ignore[no-redef]
    )
    # `live` and `live_targets` are lists the prefetch sets on each object: no field the stubs know.
    for model in cast("list[Any]", list(prefetched)):
        local = key_local or model.local_only
        if model.is_alias:
            served = [t.target for t in model.live_targets if t.target.enabled]
            ctx, out = alias_limits(m.limits_over(m.live, local_only=local, cold=cold) for m in served)
            live = [r for m in served for r in m.live if r.channel.is_local or not (local or m.local_only)]
        else:
            ctx, out = model.limits_over(model.live, local_only=key_local, cold=cold)
            live = [r for r in model.live if r.channel.is_local or not local]
        if model.kind == ModelKind.EMBEDDING:
            embedding.append(ModelSpec(model.name, ctx, None, model.display_name))
            continue
        chat.append(
            ModelSpec(
                model.name,
                ctx,
                output_room(ctx, out),
                model.display_name,
                translated_responses=bool(live) and not any(r.channel.speaks_responses for r in live),
            )
        )
    return tuple(chat), tuple(embedding)


def mcp_specs(key: Key | None) -> tuple[McpServerSpec, ...]:
    """The team MCP servers `key` may call a tool on (none without a key: the allowlist is per key)."""
    if key is None:
        return ()
    return tuple(McpServerSpec(s.slug, s.name, s.description) for s in allowed_servers(key))


def version_of(
    gateway: str,
    specs: tuple[ModelSpec, ...],
    mcp: tuple[McpServerSpec, ...] = (),
    embedding: tuple[ModelSpec, ...] = (),
) -> str:
    """A short hash over everything written into the files except the key: changes when an admin
    changes models, limits, the key's MCP servers or the gateway URL."""
    payload: list[Any] = [gateway, [asdict(s) for s in specs]]
    if mcp:  # without servers the hash stays what it was before MCP existed
        payload.append([asdict(s) for s in mcp])
    if embedding:  # likewise without embedding models
        payload.append({"embedding": [asdict(s) for s in embedding]})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def check_default_model(user: User, name: str, key: Key | None = None) -> None:
    """Raise ValidationError on `model` unless `name` (a config's default model; blank: none) is one
    `user` may use (with `key`: one the key may use), naming those they may."""
    if not name:
        return
    names = [spec.name for spec in model_specs(user, key)]
    if name in names:
        return
    if not names:
        raise ValidationError(
            {"model": _("“%(model)s” is not a model you may use; you may use none yet.") % {"model": name}}
        )
    raise ValidationError(
        {
            "model": _("“%(model)s” is not a model you may use. You may use: %(models)s.")
            % {"model": name, "models": listing(names)}
        }
    )


def render_input(
    user: User, *, gateway: str, key: Key | None = None, plaintext: str | None = None, default_model: str = ""
) -> RenderInput:
    (specs, embedding), mcp = specs_by_kind(user, key), mcp_specs(key)
    return RenderInput(
        gateway_url=gateway,
        api_key=plaintext,
        models=specs,
        embedding_models=embedding,
        mcp_servers=mcp,
        version=version_of(gateway, specs, mcp, embedding),
        default_model=default_model,
        generated_at=timezone.now().strftime("%Y-%m-%dT%H:%M:%S.000Z"),
    )


def render(slug: str, inp: RenderInput) -> Rendered:
    module = clients.get(slug)
    if module is None:
        raise KeyError(slug)
    rendered: Rendered = module.render(inp)
    return rendered


def key_label(client: str, machine: str = "") -> str:
    """`cline@laptop`: the name a key minted for one client on one machine gets. Letters and digits of
    any script stay (`cline@办公室`); runs of spaces and punctuation become one `-`."""
    machine = unicodedata.normalize("NFC", machine.strip())
    whole = re.sub(r"[^\w.-]+", "-", machine).strip("-")
    label = whole[:40].strip("-")
    # The name is how a later download finds the key it replaces: when more than separators had to
    # go (`🏠` and `💻` both leave nothing, long names lose their ends), a short hash of the name keeps
    # two machines' keys apart.
    dropped = any(not (c.isalnum() or c.isspace() or c in string.punctuation) for c in machine)
    if machine and (dropped or not label or len(whole) > 40):
        label = "-".join([label or "portal", hashlib.sha256(machine.encode()).hexdigest()[:6]])
    return f"{client}@{label or 'portal'}"


def replaceable_key(user: User, client: str, machine: str = "") -> Key | None:
    """The active key a new mint for this client and machine would replace."""
    return Key.objects.active().filter(owner=user, client=client, name=key_label(client, machine)).first()


@transaction.atomic
def mint_key(user: User, client: str, machine: str = "", *, replace: bool = True) -> tuple[Key, str]:
    """A key for one client on one machine (`cline@laptop`), revocable on its own. Scoped like the
    developer's default key: `issue_key` applies their `key_defaults` limits, and an empty model list
    means every model the owner may use.

    Downloading again for the same client and machine replaces the key minted last time: the new
    key takes over its name and settings (limits an admin set stay), and the old one stops after
    REPLACE_GRACE, so "download again" never piles up active keys."""
    base = key_label(client, machine)
    found = replaceable_key(user, client, machine) if replace else None
    if found is not None:
        # Locked and re-read: of two downloads racing for the same key, one replaces it and the
        # other sees the renamed key and mints under a free name.
        old = Key.objects.select_for_update().filter(pk=found.pk, name=base, revoked_at__isnull=True).first()
        if old is not None:
            new, plaintext = rotate_key(old, grace=REPLACE_GRACE)
            replaced = Message(gettext_noop("replaced by a new %(name)s downloaded from the Connect page"), name=base)
            audit.record(AuditAction.ACTION, old, message=replaced)
            return new, plaintext
    taken = set(Key.objects.not_revoked().filter(owner=user).values_list("name", flat=True))
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return issue_key(owner=user, name=name, client=client)


def record_download(user: User, client: str, version: str, key: Key | None, via: str) -> None:
    ConfigDownload.objects.create(user=user, client=client, version=version, key=key, via=via)


def stale_downloads(user: User, gateway: str) -> list[dict[str, Any]]:
    """The clients whose most recent download by `user` no longer matches what we would write now."""
    latest: dict[str, ConfigDownload] = {}
    for d in ConfigDownload.objects.filter(user=user).select_related("key").order_by("-created", "-id")[:200]:
        latest.setdefault(d.client, d)
    stale = []
    for client, d in sorted(latest.items()):
        key = d.key if d.key is not None and d.key.owner_id == user.pk and d.key.is_active else None
        specs, embedding = specs_by_kind(user, key)
        current = version_of(gateway, specs, mcp_specs(key), embedding)
        if current != d.version:
            label = getattr(clients.get(client), "LABEL", client)
            stale.append(
                {"client": client, "label": label, "downloaded": d.version, "current": current, "when": d.created}
            )
    return stale


def issue_download_token(
    user: User,
    client: str,
    *,
    key_mode: str,
    key: Key | None = None,
    key_name: str = "",
    default_model: str = "",
    replace_key: bool = True,
) -> tuple[DownloadToken, str]:
    """A token for one installer run. Never reusable; expires after TOKEN_TTL."""
    if clients.get(client) is None:
        raise ValueError(f"Unknown client {client!r}.")
    if key is not None and key.owner_id != user.pk:
        raise ValueError("Unknown key.")
    plaintext = TOKEN_PREFIX + pysecrets.token_urlsafe(24)
    token = DownloadToken.objects.create(
        user=user,
        client=client,
        key_mode=key_mode,
        key_name=key_name[:100],
        key=key if key_mode == KeyMode.PLACEHOLDER else None,
        default_model=default_model[:128],
        replace_key=replace_key,
        token_hash=keyed_hash(plaintext),
        expires_at=timezone.now() + TOKEN_TTL,
    )
    return token, plaintext


@transaction.atomic
def redeem_download_token(plaintext: str, *, gateway: str) -> dict[str, Any] | None:
    """Trade a token for the bundle the installer writes; None when unknown, used or expired."""
    value = (plaintext or "").strip()
    if not value.startswith(TOKEN_PREFIX) or len(value) > 100:
        return None
    now = timezone.now()
    # Only the token's own columns in the WHERE: a join would make Django write `id IN (subquery)`,
    # which PostgreSQL does not re-check after waiting for a racing redemption, so both would win.
    claimed = DownloadToken.objects.filter(
        token_hash=keyed_hash(value), used_at__isnull=True, expires_at__gt=now
    ).update(used_at=now)
    if claimed != 1:
        return None
    token = DownloadToken.objects.select_related("user", "key").get(token_hash=keyed_hash(value))
    user, key, plain = token.user, token.key, None
    if not user.is_active:
        return None
    if token.key_mode == KeyMode.MINT:
        key, plain = mint_key(user, token.client, token.key_name, replace=token.replace_key)
        DownloadToken.objects.filter(pk=token.pk).update(key=key)
    elif key is not None and not key.is_active:
        key = None
    inp = render_input(user, gateway=gateway, key=key, plaintext=plain, default_model=token.default_model)
    # The installer's curl sends no Accept-Language: its notes and file comments are in the language
    # of the person who asked for it, when they chose one, else the request's.
    with translation.override(getattr(user, "language", "") or translation.get_language()):
        rendered = render(token.client, inp)
    record_download(user, token.client, inp.version, key, via="installer")
    downloaded = Message(gettext_noop("installer bundle for %(client)s downloaded"), client=token.client)
    audit.record(AuditAction.ACTION, token, message=downloaded)
    return bundle(token.client, inp, rendered, key)


def utc_minute(when: datetime.datetime) -> str:
    """A time as the portal's pages show it, for the installer to print (`2026-12-05 01:34 UTC`)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def bundle(client: str, inp: RenderInput, rendered: Rendered, key: Key | None) -> dict[str, Any]:
    """What the installer receives: files with where they go and how to merge them."""
    return {
        "client": client,
        "version": inp.version,
        "gateway": inp.gateway_url,
        "key": {
            "id": key.pk,
            "name": key.name,
            "masked": key.masked,
            # Mint mode over an earlier download: the key this one replaced, and when it stops.
            "replaced": (
                {"masked": key.rotated_from.masked, "stops": utc_minute(key.rotated_from.expires_at)}
                if key.rotated_from is not None and key.rotated_from.expires_at is not None
                else None
            ),
        }
        if key is not None
        else None,
        "files": [
            {
                "name": f.name,
                "path": f.path,
                "macos_path": f.macos_path or f.path,
                "windows_path": f.windows,
                "format": f.format,
                "merge": f.merge,
                "secret": f.secret,
                "remove": list(f.remove),
                "replace": list(f.replace),
                "lists": list(f.lists),
                "owned": list(f.owned),
                "content": f.content,
            }
            for f in rendered.files
            if f.merge != "none"
        ],
        # Never a command that carries the key: the installer prints these, and a shell keeps them.
        "commands": [{"label": c.label, "text": c.text} for c in rendered.commands if not c.secret],
        # Import links (CC Switch's carry the key): opened or printed where no file or database takes it.
        "links": [{"label": link.label, "url": link.url} for link in rendered.links],
        "db_providers": rendered.db_providers,
        "notes": rendered.notes,
        "warnings": rendered.warnings,
    }
