"""Developer keys and the usage they record."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Self, TypeVar

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from accounts.models import lead_managed
from portal.models import Limits, ShownOnceQuerySet, ShownOnceSecret, TimeStampedModel, exactly_one_set

from .choices import ApiSurface, BudgetWindow, KeyState, Pricing, UsageStatus
from .usage import explanation

if TYPE_CHECKING:
    from accounts.models import User

KEY_PREFIX = "gp-"
PLAYGROUND_CLIENT = "playground"  # `Key.client` of each user's playground key (keys/playground/services.py)
PLAYGROUND_NAME = "Playground"  # the name the portal gives it, stored in English, shown translated

_M = TypeVar("_M", bound=models.Model)


class OwnedQuerySet(models.QuerySet[_M]):
    """Rows that belong to one user through `owner_field`, and to a team through `team_field`."""

    owner_field = "user"
    team_field = "team"
    managed_only = False  # a lead's team rows are only those of the members they manage

    def visible_to(self, user: User, *, whole_team: bool = False) -> Self:
        """Admins see every row; a team lead their own and their team's; anyone else only their
        own (another user's rows are 404)."""
        if user.is_admin:
            return self.all()
        return self.filter(self.seen_by(user, whole_team=whole_team))

    def seen_by(self, user: User, *, whole_team: bool = False) -> models.Q:
        """`visible_to` as a condition, for a user who is not an admin. `whole_team`: a team's
        totals, which count every member's rows (`managed_only` lists only some of them)."""
        mine = models.Q(**{self.owner_field: user})
        if user.led_team_id is not None:
            team = models.Q(**{self.team_field: user.led_team_id})
            if self.managed_only and not whole_team:
                team &= lead_managed(f"{self.owner_field}__")
            mine |= team
        return mine


class UsageQuerySet(OwnedQuerySet[_M]):
    """Usage rows, as recorded at request time. A lead's team totals count every member
    (`whole_team`); its per-request and per-key rows are the members' they manage (and their own),
    as with keys: an admin's or another lead's requests are theirs alone."""

    managed_only = True


# django-stubs generates as_manager() from the first base only, so it cannot match the second's.
class KeyQuerySet(ShownOnceQuerySet["Key"], OwnedQuerySet["Key"]):  # type: ignore[override]
    """`not_revoked()`, `unexpired()` (the key lists' "active" state; ignores the owner), `active()`."""

    owner_field = "owner"
    team_field = "owner__team"
    managed_only = True  # an admin's or another lead's keys are theirs alone

    def active(self) -> Self:
        """Keys the gateway accepts now: the QuerySet form of `Key.is_active`."""
        return self.unexpired().filter(owner__is_active=True)


class Key(ShownOnceSecret, Limits):
    """A developer's gateway key. Only its keyed hash is stored; the plaintext is shown once.

    Disabled, not deleted (`revoked_at`), because usage records point at it. Rotation issues a new
    key with the same settings and gives this one an `expires_at` grace period.
    """

    PREFIX = KEY_PREFIX
    HASH_FIELD = "key_hash"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="keys")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    allowed_models = models.ManyToManyField(
        "channels.Model",
        blank=True,
        related_name="keys",
        help_text=_("Empty: every model the owner may use."),
    )
    ip_allowlist = models.JSONField(default=list, blank=True, help_text=_("CIDR blocks; empty: any address."))
    rotated_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="rotated_to"
    )
    client = models.CharField(max_length=32, blank=True, help_text=_("Client config this key was minted for."))
    local_only = models.BooleanField(
        default=False,
        help_text=_("Requests with this key only go to local channels, never to a cloud provider (even on failover)."),
    )
    admin_ceilings = models.JSONField(
        default=dict,
        blank=True,
        help_text=_(
            "Limits an admin set on this key ({field: value}): the owner may lower them, never raise or clear."
        ),
    )
    lead_ceilings = models.JSONField(
        default=dict,
        blank=True,
        help_text="Limits the owner's team lead set on this key ({field: value}): the owner may lower them, "
        "never raise or clear; the lead or an admin may.",
    )

    objects = KeyQuerySet.as_manager()

    plaintext: str  # only on a key just issued by the API (`KeySerializer.create`); never stored

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="key_unique_active_name_per_owner",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"

    @property
    def is_playground(self) -> bool:
        """The key the playground calls through, made on first use, not on the Connect page."""
        return self.client == PLAYGROUND_CLIENT

    @property
    def shown_name(self) -> str:
        """The name a reader sees: the portal's own name of a playground key is shown in the
        reader's language (it is stored in English, for every reader); a name its owner chose is
        shown as typed."""
        if self.is_playground and self.name in (PLAYGROUND_NAME, f"{PLAYGROUND_NAME} ({PLAYGROUND_CLIENT})"):
            return gettext("Playground") + self.name[len(PLAYGROUND_NAME) :]
        return self.name

    @property
    def is_active(self) -> bool:
        """Not revoked, not expired, owner active (`Key.objects.active()` is the same rule)."""
        return self.state == KeyState.ACTIVE

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return KeyState.REVOKED
        if self.is_expired:
            return KeyState.EXPIRED
        if not self.owner.is_active:
            return KeyState.OWNER_INACTIVE
        return KeyState.ACTIVE

    def replacement_ids(self) -> list[int]:
        """The keys that replaced this one by rotation, each the next one's predecessor (a key is
        rotated once: `keys.services.check_rotatable`)."""
        ids: list[int] = []
        current = Key.objects.filter(rotated_from=self).values_list("pk", flat=True).first()
        while current is not None and current not in ids and current != self.pk:
            ids.append(current)
            current = Key.objects.filter(rotated_from_id=current).values_list("pk", flat=True).first()
        return ids


class UsageRecord(models.Model):
    """One gateway request. Written in batches off the request path."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    request_id = models.CharField(max_length=64, blank=True)  # the gateway's `x-request-id`
    upstream_request_id = models.CharField(max_length=100, blank=True)  # the upstream's, when it sent one
    # The gateway's idempotency key for this record: a batch replayed from its journal after an
    # outage (or retried after a lost commit) inserts each record at most once.
    event_id = models.UUIDField(null=True, blank=True, editable=False)
    # No index of their own for the four references: each leads one of the (reference, created)
    # indexes below, which serve the same lookups (a key's deletion setting its records' key to
    # null included); four more B-trees written with every record bought nothing.
    key = models.ForeignKey(Key, null=True, on_delete=models.SET_NULL, related_name="usage", db_index=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="usage", db_index=False
    )
    # The owner's team at the time of the request: moving a user later does not rewrite history.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage", db_index=False
    )
    model = models.CharField(max_length=128)
    channel = models.ForeignKey(
        "channels.Channel", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage", db_index=False
    )
    surface = models.CharField(max_length=16, choices=ApiSurface, default=ApiSurface.CHAT)
    stream = models.BooleanField(default=False)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    estimated = models.BooleanField(default=False, help_text=_("Counted locally: the upstream reported no usage."))
    status = models.CharField(max_length=24, choices=UsageStatus, default=UsageStatus.OK)
    http_status = models.PositiveSmallIntegerField(default=200)
    error = models.CharField(max_length=300, blank=True)
    latency_ms = models.FloatField(null=True, blank=True)
    ttft_ms = models.FloatField(null=True, blank=True)
    # The request waited this long for its on-demand model to start (null: it did not wait).
    cold_start_ms = models.FloatField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(
        default=0, help_text=_("Prompt tokens the upstream read from its prompt cache (part of prompt_tokens).")
    )
    cache_creation_tokens = models.PositiveIntegerField(
        default=0,
        help_text=_("Prompt tokens the upstream wrote to its prompt cache (Anthropic; part of prompt_tokens)."),
    )
    # What it cost in nano-units of PORTAL_CURRENCY (`channels.prices`), from the route's price in
    # effect when it was written; null: the route had no price (`pricing` says which).
    cost_nanos = models.BigIntegerField(null=True, blank=True)
    pricing = models.CharField(max_length=8, choices=Pricing, default=Pricing.NONE)
    # Why the gateway sent it where it did, one short English step each ("alias coder -> qwen3-coder",
    # "skipped local-a: window 24,576 < 30,120 needed", "failover after 502 from cloud-a"), each one
    # of `keys.usage.explanation`'s templates; `route_explanation_text` reads them in the reader's language.
    route_explanation = models.JSONField(default=list, blank=True)

    objects = UsageQuerySet.as_manager()

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["user", "created"], name="usage_user_created"),
            models.Index(fields=["key", "created"], name="usage_key_created"),
            models.Index(fields=["team", "created"], name="usage_team_created"),
            models.Index(fields=["channel", "created"], name="usage_channel_created"),
            # The request list filtered by model reads its newest rows in index order, and the
            # capped count walks at most 10,001 index entries, whatever the table's size.
            models.Index(fields=["model", "created"], name="usage_model_created"),
        ]
        constraints = [models.UniqueConstraint(fields=["event_id"], name="usage_event_id_unique")]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.model} {self.total_tokens} tok"

    @property
    def route_explanation_text(self) -> list[str]:
        """The routing explanation in the active language."""
        return explanation.translated_lines(self.route_explanation or [])


class UsageBucket(models.Model):
    """What a daily and an hourly rollup both count per (period, user, key, model, channel, team);
    the gateway's writer adds to both with the same F() upserts (`gateway.usage._add_to_bucket`)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    key = models.ForeignKey(Key, null=True, on_delete=models.SET_NULL, related_name="+")
    model = models.CharField(max_length=128)
    channel = models.ForeignKey("channels.Channel", null=True, on_delete=models.SET_NULL, related_name="+")
    team = models.ForeignKey("accounts.Team", null=True, on_delete=models.SET_NULL, related_name="+")
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    total_tokens = models.BigIntegerField(default=0)
    estimated_requests = models.PositiveIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    cache_creation_tokens = models.BigIntegerField(default=0)
    cost_nanos = models.BigIntegerField(default=0)  # of the priced requests
    unpriced_requests = models.PositiveIntegerField(default=0)  # served by a route without a price

    objects = UsageQuerySet.as_manager()

    class Meta:
        abstract = True


# The counters every rollup adds up, in the order reports and the CSV show them: the one list
# the writer, the reports, their sorting, the CSV and the API take them from.
USAGE_COUNTERS: tuple[str, ...] = tuple(
    f.name for f in UsageBucket._meta.fields if isinstance(f, models.IntegerField) and not f.primary_key
)


class UsageDaily(UsageBucket):
    """Per-day aggregate, kept when raw records are pruned. Updated with F() increments."""

    day = models.DateField(db_index=True)

    class Meta:
        ordering = ["-day", "model"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "user", "key", "model", "channel", "team"],
                name="usagedaily_unique_bucket",
                # A bucket without a team (or key, channel) is one bucket: with NULLs distinct, two
                # gateways creating it at once made two, and every later F() update counted twice.
                nulls_distinct=False,
            )
        ]
        # The GPU-hours showback reads a run's whole days per channel from here.
        indexes = [models.Index(fields=["channel", "day"], name="usagedaily_channel_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.model} {self.total_tokens}"


# Upper bounds (ms) of the time-to-first-token histogram kept per hourly bucket; a last bucket
# holds everything slower. Percentiles over any window are estimated from these counts (as
# Prometheus histograms are), so the dashboards never read raw records.
TTFT_BOUNDS_MS = (50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10000, 20000)
TTFT_FIELDS = (*(f"ttft_le_{b}" for b in TTFT_BOUNDS_MS), "ttft_slower")


def ttft_field(ttft_ms: float) -> str:
    """The histogram column counting one request with this time to first token."""
    for bound, name in zip(TTFT_BOUNDS_MS, TTFT_FIELDS, strict=False):
        if ttft_ms <= bound:
            return name
    return TTFT_FIELDS[-1]


class UsageHourly(UsageBucket):
    """Per-hour aggregate with the dimensions of `UsageDaily` and a TTFT histogram: the source of
    the dashboards and the GPU-hours showback, so neither reads raw records (which are pruned
    after `PORTAL_USAGE_RETENTION_DAYS`). Written with the daily buckets, by the same F() upserts."""

    hour = models.DateTimeField(db_index=True)  # the hour's first instant, UTC
    ttft_le_50 = models.PositiveIntegerField(default=0)
    ttft_le_100 = models.PositiveIntegerField(default=0)
    ttft_le_200 = models.PositiveIntegerField(default=0)
    ttft_le_300 = models.PositiveIntegerField(default=0)
    ttft_le_500 = models.PositiveIntegerField(default=0)
    ttft_le_750 = models.PositiveIntegerField(default=0)
    ttft_le_1000 = models.PositiveIntegerField(default=0)
    ttft_le_1500 = models.PositiveIntegerField(default=0)
    ttft_le_2000 = models.PositiveIntegerField(default=0)
    ttft_le_3000 = models.PositiveIntegerField(default=0)
    ttft_le_5000 = models.PositiveIntegerField(default=0)
    ttft_le_10000 = models.PositiveIntegerField(default=0)
    ttft_le_20000 = models.PositiveIntegerField(default=0)
    ttft_slower = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-hour", "model"]
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "user", "key", "model", "channel", "team"],
                name="usagehourly_unique_bucket",
                nulls_distinct=False,
            )
        ]
        indexes = [models.Index(fields=["channel", "hour"], name="usagehourly_channel_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00 {self.model} {self.total_tokens}"


class BudgetQuerySet(models.QuerySet["Budget"]):
    def covering(self, key: Key) -> Self:
        """The budgets `key` spends under: its own, its owner's and the owner's team's. A key's
        budgets move to its replacement when it is rotated (`keys.services.rotate_key`); while the
        old key runs out its grace period it spends under them still."""
        match = models.Q(key_id__in=[key.pk, *key.replacement_ids()]) | models.Q(user_id=key.owner_id)
        if key.owner.team_id is not None:
            match |= models.Q(team_id=key.owner.team_id)
        return self.filter(match)

    def visible_to(self, user: User) -> Self:
        """Admins see every budget; a team lead their team's, the members' they manage and their
        keys' (not an admin's or another lead's, whose keys are not theirs to see either); anyone
        else their own and their own keys' (and their team's, read only)."""
        if user.is_admin:
            return self.all()
        mine = models.Q(user=user) | models.Q(key__owner=user)
        if user.team_id is not None:
            mine |= models.Q(team_id=user.team_id)
        if user.led_team_id is not None:
            mine |= models.Q(lead_managed("user__"), user__team_id=user.led_team_id)
            mine |= models.Q(lead_managed("key__owner__"), key__owner__team_id=user.led_team_id)
        return self.filter(mine)


class Budget(TimeStampedModel):
    """A spending cap on a key, a user (all their keys) or a team (all its members), over one window.

    Several budgets may apply to one request (a key's daily and monthly, its owner's, the team's):
    the gateway reserves the most the request can cost against every one of them in the same atomic
    Redis admission as the token limits, and settles to the real cost; the most restrictive refuses.
    Spend is counted per budget (`b:<id>:<window>` in Redis), so rotating a key (its budgets move to
    the new key) keeps the window's spend. `topup` raises the cap until `topup_until` (an admin's
    temporary top-up). At `alert_percent` of the cap the alert targets and the owner are told once
    per window. A budget an admin set (`set_by_admin`) binds team leads as it binds the member: only
    an admin changes or removes it.
    """

    key = models.ForeignKey(Key, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    window = models.CharField(max_length=8, choices=BudgetWindow, default=BudgetWindow.MONTH)
    amount = models.DecimalField(
        max_digits=14,
        decimal_places=4,
        validators=[MinValueValidator(0)],
        help_text=_("The most that may be spent in one window, in the portal's currency."),
    )
    alert_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_("Tell the alert targets and the owner when this share of the budget is spent (blank: no alert)."),
    )
    topup = models.DecimalField(
        max_digits=14,
        decimal_places=4,
        default=0,
        validators=[MinValueValidator(0)],
        help_text=_("A temporary addition to the amount, until the top-up ends."),
    )
    topup_until = models.DateTimeField(null=True, blank=True)
    set_by_admin = models.BooleanField(
        default=False, help_text=_("An admin set this budget: a team lead can neither change nor remove it.")
    )

    objects = BudgetQuerySet.as_manager()

    class Meta:
        ordering = ["team_id", "user_id", "key_id", "window"]
        constraints = [
            models.CheckConstraint(condition=exactly_one_set("key", "user", "team"), name="budget_one_target"),
            models.UniqueConstraint(fields=["key", "window"], name="budget_unique_key_window"),
            models.UniqueConstraint(fields=["user", "window"], name="budget_unique_user_window"),
            models.UniqueConstraint(fields=["team", "window"], name="budget_unique_team_window"),
        ]

    def __str__(self) -> str:
        text = {
            "key": gettext("Budget of %(amount)s %(window)s on the key %(target)s"),
            "user": gettext("Budget of %(amount)s %(window)s on the user %(target)s"),
            "team": gettext("Budget of %(amount)s %(window)s on the team %(target)s"),
        }[self.label]
        return text % {"amount": self.amount, "window": self.get_window_display(), "target": self.target}

    @property
    def label(self) -> str:
        """ "key", "user" or "team" (the scope names of the gateway's limits)."""
        return "key" if self.key_id else "user" if self.user_id else "team"

    @property
    def target(self) -> object:
        return self.key or self.user or self.team

    def topup_active(self, at: datetime | None = None) -> bool:
        return bool(self.topup) and self.topup_until is not None and self.topup_until > (at or timezone.now())

    def cap(self, at: datetime | None = None) -> Decimal:
        """The amount in effect now: the budget plus a running top-up."""
        return self.amount + (self.topup if self.topup_active(at) else Decimal(0))


MAX_RETENTION_DAYS = 365


def holder_text(key: Key | None, user: object, team: object) -> str:
    """Whom a policy or a grant is for (one of a key, a user, a team), in the active language."""
    from django.utils.translation import gettext

    if key is not None:
        return gettext("key %(name)s of %(owner)s") % {"name": key.shown_name, "owner": key.owner}
    if user is not None:
        return gettext("user %(name)s") % {"name": user}
    return gettext("team %(name)s") % {"name": team}


class PayloadLogging(TimeStampedModel):
    """An admin's switch for storing the bodies of one key's, one user's or one team's gateway requests.

    Resolved most specific first (`payload_logging_of`): the key's own, else its owner's, else the
    owner's team's. A row with `enabled=False` keeps one key (or one user) out of a wider logging.
    Off when no row applies: nothing is stored by default.
    """

    key = models.OneToOneField(Key, null=True, blank=True, on_delete=models.CASCADE, related_name="payload_logging")
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="payload_logging"
    )
    team = models.OneToOneField(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="payload_logging"
    )
    enabled = models.BooleanField(default=True)
    retention_days = models.PositiveSmallIntegerField(
        default=7,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_RETENTION_DAYS)],
        help_text=_("Stored bodies are deleted by the daily prune this many days after the request."),
    )

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.CheckConstraint(condition=exactly_one_set("key", "user", "team"), name="payloadlogging_one_target")
        ]

    def __str__(self) -> str:
        if self.key_id:
            target = f"key {self.key}"
        elif self.user_id:
            target = f"user {self.user}"
        else:
            target = f"team {self.team}"
        state = f"{self.retention_days} days" if self.enabled else "off"
        return f"payload logging for {target}: {state}"

    def describe(self) -> str:
        """What the policy is, in the active language, for the pages (`__str__` stays English: logs)."""
        from django.utils.translation import gettext, ngettext

        target = holder_text(self.key, self.user, self.team)
        if not self.enabled:
            return gettext("%(target)s: not logged") % {"target": target}
        kept = ngettext("%(days)d day", "%(days)d days", self.retention_days) % {"days": self.retention_days}
        return gettext("%(target)s: logged, kept %(kept)s") % {"target": target, "kept": kept}


# What `payload_logging_of` reads, for select_related on a Key queryset.
PAYLOAD_LOGGING_RELATED = (
    "owner",
    "owner__team",
    "payload_logging",
    "owner__payload_logging",
    "owner__team__payload_logging",
)


def payload_logging_of(key: Key) -> PayloadLogging | None:
    """The policy that applies to `key`'s requests, most specific first, or None (off).

    Reads `key.payload_logging`, `key.owner.payload_logging` and `key.owner.team.payload_logging`:
    select_related them (`PAYLOAD_LOGGING_RELATED`, as the gateway's key load does) and this costs
    no query.
    """
    team = key.owner.team if key.owner.team_id else None
    for holder in (key, key.owner, team):
        if holder is None:
            continue
        try:
            return holder.payload_logging
        except PayloadLogging.DoesNotExist:
            continue
    return None


class RequestPayload(models.Model):
    """The redacted, zlib-compressed bodies of one logged gateway request (see `PayloadLogging`).

    `request_body` is the client's JSON with secrets redacted; `response_body` the answer (a stream:
    the relayed text assembled), each cut at GATEWAY_PAYLOAD_MAX_BYTES (`truncated`). Deleted by the
    daily prune once `expires_at` passes.
    """

    created = models.DateTimeField(default=timezone.now, db_index=True)
    expires_at = models.DateTimeField(db_index=True)
    request_id = models.CharField(max_length=64, db_index=True)
    key = models.ForeignKey(Key, null=True, on_delete=models.SET_NULL, related_name="payloads")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="payloads")
    model = models.CharField(max_length=128)
    surface = models.CharField(max_length=16, choices=ApiSurface, default=ApiSurface.CHAT)
    stream = models.BooleanField(default=False)
    status = models.CharField(max_length=24, choices=UsageStatus, default=UsageStatus.OK)
    http_status = models.PositiveSmallIntegerField(default=200)
    request_body = models.BinaryField()
    response_body = models.BinaryField()
    request_bytes = models.PositiveIntegerField(default=0, help_text=_("Size as received, before redaction."))
    response_bytes = models.PositiveIntegerField(default=0, help_text=_("Size as relayed, before redaction."))
    truncated = models.BooleanField(default=False)
    redactions = models.PositiveIntegerField(default=0, help_text=_("Secrets replaced before storage."))

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.model} {self.request_id}"
