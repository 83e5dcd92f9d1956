"""Upstream channels, public models and the per-channel routes between them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Self

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel
from portal.validators import sendable_in_header

from .choices import (
    AlertKind,
    BalancePolicy,
    ChannelKind,
    ChannelStatus,
    Locality,
    ModelKind,
    PriceSource,
    ProbeSource,
    UnpricedPolicy,
)

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

    from .health.history import HealthSummary

MODEL_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$",
    _("Use letters, digits and . _ : / @ + - (up to 128 characters, starting with a letter or digit)."),
)


def validate_api_key(value: str) -> None:
    """A channel's API key goes upstream in a header, so it must be one a header can carry."""
    if not sendable_in_header(value):
        raise ValidationError(
            _(
                "An API key can only contain ASCII letters, digits and punctuation (it is sent in an HTTP "
                "header); check for a character copied with it by mistake."
            ),
            code="invalid",
        )


class ChannelQuerySet(models.QuerySet):
    def enabled(self) -> Self:
        return self.filter(enabled=True)

    def local(self) -> Self:
        return self.filter(locality=Locality.LOCAL)


class ModelQuerySet(models.QuerySet):
    def enabled(self) -> Self:
        return self.filter(enabled=True)

    def aliases(self) -> Self:
        return self.filter(is_alias=True)

    def served(self) -> Self:
        """Models with routes of their own (everything but aliases)."""
        return self.filter(is_alias=False)

    def usable_by(self, user) -> Self:
        """Enabled models `user` may use: their allow-list, or every enabled model if it is empty,
        and within their team's allow-list the same way. Duck typed: `user` needs only
        `allowed_models` (and may have a `team` with its own `allowed_models`)."""
        qs = self.enabled()
        team = getattr(user, "team", None)
        for holder in (user, team) if team is not None else (user,):
            allowed = holder.allowed_models.all()
            if allowed.exists():
                qs = qs.filter(pk__in=allowed.values("pk"))
        return qs

    def visible_to(self, user) -> Self:
        """Admins see every model; anyone else the ones they may use (`user.is_admin`, `user.allowed_models`)."""
        return self.all() if user.is_admin else self.usable_by(user)


class ModelRouteQuerySet(models.QuerySet):
    def enabled(self) -> Self:
        """Routes the gateway may use: the route and its channel are both enabled."""
        return self.filter(enabled=True, channel__enabled=True)


class Channel(TimeStampedModel):
    """An upstream endpoint the gateway can route to.

    `status` moves unknown → healthy ↔ degraded ↔ down (health checks; gateway failures feed the
    same window). `credentials_rejected` is set on a 401/403 and stays until an admin edits the
    channel. A launch job creates the channel for a deployment it started.
    """

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=ChannelKind, default=ChannelKind.OPENAI)
    base_url = models.CharField(max_length=500, help_text=_("Stored canonical, ending in /v1."))
    api_key = EncryptedTextField(
        blank=True, validators=[validate_api_key], help_text=_("Sent upstream by the gateway; write-only.")
    )
    priority = models.IntegerField(
        default=0,
        validators=[MinValueValidator(-1000), MaxValueValidator(1000)],
        help_text=_("Higher is tried first."),
    )
    weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text=_("Share of traffic among channels of the same priority."),
    )
    enabled = models.BooleanField(default=True)
    speaks_messages = models.BooleanField(
        default=False, help_text=_("Serves the Anthropic Messages API natively (always true for kind anthropic).")
    )
    speaks_responses = models.BooleanField(
        default=False, help_text=_("Serves the OpenAI Responses API natively (requests are passed through).")
    )
    locality = models.CharField(
        max_length=8,
        choices=Locality,
        default=Locality.EXTERNAL,
        help_text=_(
            "Local: a server on our own machines (deployments register theirs as local). External: a cloud "
            "provider; requests of local-only keys and aliases are never sent there."
        ),
    )
    status = models.CharField(max_length=24, choices=ChannelStatus, default=ChannelStatus.UNKNOWN)
    status_message = models.CharField(max_length=300, blank=True)  # what an operator should do next
    status_message_code = i18n.code_field()
    status_message_params = i18n.params_field()
    status_message_text = i18n.TranslatedText("status_message")
    status_changed = models.DateTimeField(null=True, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True, max_length=5000)

    # --- health checks: what the probe does for this channel ---------------------------------
    probe_inference = models.BooleanField(
        default=True,
        help_text=_(
            "Send a tiny streaming chat completion on each check to measure time to first token "
            "(turn off for paid cloud channels; liveness and model discovery still run)."
        ),
    )
    probe_max_tokens = models.PositiveIntegerField(
        default=4,
        validators=[MinValueValidator(1), MaxValueValidator(4096)],
        help_text=_("max_tokens of the latency probe (reasoning models need more before the first answer token)."),
    )
    ttft_degraded_ms = models.PositiveIntegerField(
        default=5000,
        validators=[MinValueValidator(10), MaxValueValidator(600_000)],
        help_text=_("Time to first token (ms) above which the channel counts as degraded."),
    )
    # Hysteresis state, moved only with F() updates by channels.health.services.
    consecutive_failures = models.PositiveIntegerField(default=0)
    consecutive_successes = models.PositiveIntegerField(default=0)
    last_ttft_ms = models.FloatField(null=True, blank=True)
    last_active_probe = models.DateTimeField(null=True, blank=True)
    # The status the alert targets were last told about (de-dup and cool-down of notifications).
    alerted_status = models.CharField(max_length=24, blank=True)
    alerted_at = models.DateTimeField(null=True, blank=True)

    objects = ChannelQuerySet.as_manager()

    health: HealthSummary  # only after `channels.health.history.attach_health()`; never stored

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_local(self) -> bool:
        return self.locality == Locality.LOCAL


class Model(TimeStampedModel):
    """The public model name developers use (e.g. `qwen3-32b`), served by one or more channels.

    An alias (`is_alias`, a virtual model such as `coder`) has no routes of its own: its targets
    are other public models, tried in order (`AliasTarget`), e.g. a local model first and a cloud
    one for what does not fit the local window. `local_only` keeps its requests on local channels.
    """

    name = models.CharField(max_length=128, unique=True, validators=[MODEL_NAME_VALIDATOR])
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True, max_length=2000)
    enabled = models.BooleanField(default=True)
    balance = models.CharField(
        max_length=16,
        choices=BalancePolicy,
        default=BalancePolicy.WEIGHTED,
        help_text=_(
            "How requests are spread over channels of the same priority: weighted random; session "
            "affinity (each agent session stays on one replica, so its prompt cache is reused); least busy "
            "(fewest requests in flight, then the fastest first token)."
        ),
    )
    kind = models.CharField(
        max_length=16,
        choices=ModelKind,
        default=ModelKind.CHAT,
        help_text=_(
            "An embedding model is offered to coding clients for embeddings only (Continue's codebase "
            "index), never in their chat model lists."
        ),
    )
    is_alias = models.BooleanField(default=False, editable=False)
    local_only = models.BooleanField(
        default=False, help_text=_("Requests for this name are only sent to local channels, even on failover.")
    )
    channels = models.ManyToManyField(Channel, through="ModelRoute", related_name="models")

    objects = ModelQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def effective_limits(
        self, *, local_only: bool = False, cold: Mapping[str, int] | None = None
    ) -> tuple[int | None, int | None]:
        """(context window, max output tokens) a client can rely on: the smallest over the
        enabled routes (only local ones for a local-only model or request), preferring each
        route's discovered context window. An alias can serve the largest of its enabled targets'
        (`alias_limits`). A model none of those routes serves now whose next request starts a
        server (a stopped on-demand model) has that server's window, from `cold`
        (`channels.services.cold_windows()`; the pages and the API pass it, as the gateway's
        `ModelInfo.limit_pairs` does)."""
        if self.is_alias:
            local_only = local_only or self.local_only
            targets = [t.target for t in self.targets.select_related("target") if t.target.enabled]
            return alias_limits([t.effective_limits(local_only=local_only, cold=cold) for t in targets])
        return self.limits_over(self.routes.select_related("channel"), local_only=local_only, cold=cold)

    def limits_over(
        self, routes: Iterable[ModelRoute], *, local_only: bool = False, cold: Mapping[str, int] | None = None
    ) -> tuple[int | None, int | None]:
        """`effective_limits` of a served model from its `routes` as the caller has them (prefetched
        with their channels, for a list at a fixed number of queries): those a request may use (the
        route and its channel enabled; a local channel's for a local-only model or request) count;
        with none, the window of the server a request starts (`cold`, by name), if it is one."""
        local = local_only or self.local_only
        pairs = [
            (r.effective_context_window, r.max_output_tokens)
            for r in routes
            if r.enabled and r.channel.enabled and (r.channel.is_local or not local)
        ]
        if not pairs:
            return (cold or {}).get(self.name), None
        return route_limits(pairs)

    @property
    def target_names(self) -> list[str]:
        return [t.target.name for t in self.targets.all()]


def route_limits(routes: Iterable[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """A model's (window, max output) from its routes' (effective window, max output): the
    smallest known of each, since any route may serve a request."""
    return _limits(routes, min)


def alias_limits(targets: Iterable[tuple[int | None, int | None]]) -> tuple[int | None, int | None]:
    """An alias's (window, max output) from its targets' in order: the largest known of each,
    since the gateway falls through to the target that can hold the request."""
    return _limits(targets, max)


def _limits(pairs: Iterable[tuple[int | None, int | None]], pick) -> tuple[int | None, int | None]:
    pairs = list(pairs)
    ctx = [c for c, _ in pairs if c]
    out = [o for _, o in pairs if o]
    return (pick(ctx) if ctx else None, pick(out) if out else None)


class AliasTarget(TimeStampedModel):
    """One target of an alias, tried in `position` order (0 first). Targets are plain models,
    never other aliases, so routing an alias is one level deep."""

    alias = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="targets")
    target = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="aliased_by")
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["alias", "position"]
        constraints = [
            models.UniqueConstraint(fields=["alias", "target"], name="aliastarget_unique_alias_target"),
            models.UniqueConstraint(fields=["alias", "position"], name="aliastarget_unique_alias_position"),
            models.CheckConstraint(condition=~models.Q(alias=models.F("target")), name="aliastarget_not_itself"),
        ]

    def __str__(self) -> str:
        return f"{self.alias} #{self.position} → {self.target}"


class ModelRoute(TimeStampedModel):
    """One channel serving one public model, with the upstream's own id and limits."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="routes")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="routes")
    upstream_model = models.CharField(
        max_length=256, blank=True, help_text=_("The id the upstream knows; blank means the public name.")
    )
    context_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(256), MaxValueValidator(10_000_000)],
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(10_000_000)],
    )
    discovered_context_window = models.PositiveIntegerField(null=True, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    unlisted_upstream_id = models.CharField(
        max_length=256,
        blank=True,
        help_text=_("The upstream id the model server's list left out at the last check (requests for it fail there)."),
    )
    enabled = models.BooleanField(default=True)
    unpriced = models.CharField(
        max_length=8,
        choices=UnpricedPolicy,
        default=UnpricedPolicy.DEFAULT,
        blank=True,
        help_text=_("While this route has no price, what a key with a budget meets on it."),
    )

    objects = ModelRouteQuerySet.as_manager()

    class Meta:
        ordering = ["model__name", "-channel__priority"]
        constraints = [models.UniqueConstraint(fields=["model", "channel"], name="modelroute_unique_model_channel")]

    def __str__(self) -> str:
        return f"{self.model} → {self.channel}"

    @property
    def upstream_id(self) -> str:
        return self.upstream_model or self.model.name

    @property
    def effective_context_window(self) -> int | None:
        return self.discovered_context_window or self.context_window

    @property
    def upstream_unlisted(self) -> bool:
        """The model server does not serve this route's id (as the last check found it): a typo
        or a server started with another name. Editing the id clears it."""
        return bool(self.unlisted_upstream_id) and self.unlisted_upstream_id == self.upstream_id

    @property
    def context_mismatch(self) -> bool:
        return bool(
            self.discovered_context_window
            and self.context_window
            and self.discovered_context_window != self.context_window
        )


def price_field(help_text: _StrPromise, *, blank: bool = False) -> models.DecimalField:
    return models.DecimalField(
        max_digits=12,
        decimal_places=3,
        null=blank,
        blank=blank,
        validators=[MinValueValidator(0)],
        help_text=help_text,
    )


class RoutePriceQuerySet(models.QuerySet):
    def in_effect(self, at=None) -> Self:
        """Each route's price rows that have started by `at` (now), newest first: the first row per
        route is the one in effect."""
        return self.filter(effective_from__lte=at or timezone.now()).order_by("route_id", "-effective_from", "-id")


class RoutePrice(TimeStampedModel):
    """What one route costs per million tokens, in the portal's currency (PORTAL_CURRENCY), from
    `effective_from` on.

    A price change is a new row, never an edit of the old one: a usage record's cost is computed
    when it is written, from the row in effect then, so past usage keeps the price it was made at
    and this table is the history. A route without any row in effect has no price ("no price" on
    the usage pages; a budgeted key is refused or charged the fallback, PORTAL_UNPRICED_ROUTES).
    """

    route = models.ForeignKey(ModelRoute, on_delete=models.CASCADE, related_name="prices")
    effective_from = models.DateTimeField(default=timezone.now, db_index=True)
    input = price_field(_("Input, per million tokens"))
    cached_input = price_field(
        _("Cached input (read from the prompt cache), per million tokens; blank: the input price"), blank=True
    )
    cache_write = price_field(_("Cache write, per million tokens; blank: the input price"), blank=True)
    output = price_field(_("Output, per million tokens"))
    source = models.CharField(max_length=16, choices=PriceSource, default=PriceSource.MANUAL)
    note = models.CharField(max_length=300, blank=True)  # how a derived price was computed

    objects = RoutePriceQuerySet.as_manager()

    class Meta:
        ordering = ["route_id", "-effective_from", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["route", "effective_from"], name="routeprice_unique_route_start")
        ]

    def __str__(self) -> str:
        return f"{self.route}: {self.input}/{self.output} from {self.effective_from:%Y-%m-%d %H:%M}"


# --- health checks ---------------------------------------------------------------------------


class ProbeResult(models.Model):
    """One piece of health evidence for a channel: an active probe, or a tally of real gateway traffic.

    Active probes have `samples=1`; a passive row sums what the gateway saw since the last round
    (`samples` requests, `failures` of them failed). Raw rows are pruned after
    PORTAL_PROBE_RETENTION_DAYS; `ProbeHourly` keeps the summary longer.
    """

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="probes")
    created = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=8, choices=ProbeSource, default=ProbeSource.ACTIVE)
    ok = models.BooleanField()
    samples = models.PositiveIntegerField(default=1)
    failures = models.PositiveIntegerField(default=0)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=32, blank=True)  # error class: connect, timeout, auth, http_5xx…
    error_message = models.CharField(max_length=300, blank=True)  # English; `error_message_text` reads it
    error_message_code = i18n.code_field()
    error_message_params = i18n.params_field()
    error_message_text = i18n.TranslatedText("error_message")
    model = models.CharField(max_length=256, blank=True)  # the upstream model the latency probe used
    connect_ms = models.FloatField(null=True, blank=True)
    ttfb_ms = models.FloatField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    total_ms = models.FloatField(null=True, blank=True)
    tokens = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_s = models.FloatField(null=True, blank=True)
    status_after = models.CharField(max_length=24, choices=ChannelStatus, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["channel", "-created"], name="probe_channel_created")]

    def __str__(self) -> str:
        return f"{self.channel_id} {self.created:%Y-%m-%d %H:%M:%S} {'ok' if self.ok else self.error}"


class ProbeHourly(models.Model):
    """Hourly summary of a channel's evidence (p50/p95 TTFT, error ratio), kept longer than raw probes."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="probe_hours")
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    ttft_p50_ms = models.FloatField(null=True, blank=True)
    ttft_p95_ms = models.FloatField(null=True, blank=True)
    total_p50_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-hour"]
        constraints = [models.UniqueConstraint(fields=["channel", "hour"], name="probehourly_unique_channel_hour")]

    def __str__(self) -> str:
        return f"{self.channel_id} {self.hour:%Y-%m-%d %H:00}"

    @property
    def error_ratio(self) -> float | None:
        return self.failures / self.samples if self.samples else None


class StatusChange(models.Model):
    """A channel moved from one status to another (the dashboard's "recent status changes")."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="status_changes")
    created = models.DateTimeField(default=timezone.now, db_index=True)
    from_status = models.CharField(max_length=24, choices=ChannelStatus)
    to_status = models.CharField(max_length=24, choices=ChannelStatus)
    message = models.CharField(max_length=300, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.channel}: {self.from_status} → {self.to_status}"


class AlertTarget(TimeStampedModel):
    """Where status-change notifications go: a webhook (JSON with a Slack-compatible `text`) or an e-mail."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=8, choices=AlertKind, default=AlertKind.WEBHOOK)
    url = models.URLField(max_length=500, blank=True, help_text=_("Webhook URL (Slack incoming webhooks work)."))
    email = models.EmailField(blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(kind="webhook") & ~models.Q(url=""))
                | (models.Q(kind="email") & ~models.Q(email="")),
                name="alerttarget_has_destination",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def destination(self) -> str:
        return self.url if self.kind == AlertKind.WEBHOOK else self.email


class AlertDelivery(models.Model):
    """One notification sent (or attempted) to one target about one status change."""

    status_change = models.ForeignKey(StatusChange, on_delete=models.CASCADE, related_name="deliveries")
    target = models.ForeignKey(AlertTarget, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    target_name = models.CharField(max_length=100)
    created = models.DateTimeField(default=timezone.now, db_index=True)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=300, blank=True)  # in English (logs, the API); `error_text` to read
    error_code = i18n.code_field()
    error_params = i18n.params_field()
    error_text = i18n.TranslatedText("error")
    suppressed = models.PositiveIntegerField(default=0)  # status changes folded into this one by the cool-down

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.target_name}: {self.status_change} ({'sent' if self.ok else 'failed'})"
