"""Budgets: spend per window from the daily rollups, who may set which budget, top-ups, alerts.

The gateway enforces budgets in its admission script (`gateway.limits`, Redis counters per budget
and window); the pages and the API show the spend the usage records hold (the same costs, written
a flush interval later), read from the daily rollups: a window is whole UTC days, as the Redis
counters' are, and a day's bucket holds every record of that day as it is written, so no raw record
is read (and a one-off budget keeps its spend after raw records are pruned).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Sum
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.services import may_manage
from channels.choices import UnpricedPolicy
from channels.models import AliasTarget, Model, ModelRoute, RoutePrice
from channels.prices import NANOS, format_money, to_amount, to_nanos

from ..choices import BudgetWindow
from ..models import Budget, Key, UsageDaily

if TYPE_CHECKING:
    from accounts.models import User

logger = logging.getLogger(__name__)


def window_bounds(window: str, at: dt.datetime | None = None) -> tuple[dt.datetime | None, dt.datetime | None]:
    """[start, end) of the window holding `at`, UTC (a one-off: (None, None), all time)."""
    t = (at or timezone.now()).astimezone(dt.UTC)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == BudgetWindow.DAY:
        return day, day + dt.timedelta(days=1)
    if window == BudgetWindow.WEEK:
        start = day - dt.timedelta(days=t.weekday())
        return start, start + dt.timedelta(days=7)
    if window == BudgetWindow.MONTH:
        first = day.replace(day=1)
        return first, (first + dt.timedelta(days=32)).replace(day=1)
    return None, None


def key_lineage(key: Key) -> list[int]:
    """The key and the keys it replaced by rotation (their spend counts in its budget's window)."""
    ids, seen = [], set()
    current: Key | None = key
    while current is not None and current.pk not in seen:
        seen.add(current.pk)
        ids.append(current.pk)
        current = current.rotated_from
    return ids


def _spend_filter(budget: Budget, at: dt.datetime | None = None) -> Q:
    """The daily buckets of the budget's target in its window holding `at`."""
    if budget.key_id:
        assert budget.key is not None
        match = Q(key_id__in=key_lineage(budget.key))
    elif budget.user_id:
        match = Q(user_id=budget.user_id)
    else:
        match = Q(team_id=budget.team_id)
    start, end = window_bounds(budget.window, at)
    if start is not None and end is not None:
        match &= Q(day__gte=start.date(), day__lt=end.date())
    return match


def spent_in_windows(budgets: list[Budget], at: dt.datetime | None = None) -> list[int]:
    """Nano-units each budget's target spent in its window holding `at` (now), in one query."""
    if not budgets:
        return []
    matches = [_spend_filter(b, at) for b in budgets]
    either = matches[0]
    for match in matches[1:]:
        either |= match
    sums = UsageDaily.objects.filter(either).aggregate(
        **{f"b{i}": Sum("cost_nanos", filter=match) for i, match in enumerate(matches)}
    )
    return [int(sums[f"b{i}"] or 0) for i in range(len(budgets))]


def spent(budget: Budget, at: dt.datetime | None = None) -> int:
    """Nano-units spent in the budget's window holding `at` (now)."""
    return spent_in_windows([budget], at)[0]


@dataclass
class BudgetStatus:
    budget: Budget
    spent: int  # nano-units
    cap: int
    at: dt.datetime | None = None  # the window's instant (None: now)

    @property
    def remaining(self) -> int:
        return max(self.cap - self.spent, 0)

    @property
    def percent(self) -> int:
        return min(100, int(self.spent * 100 // self.cap)) if self.cap else 100

    @property
    def resets_at(self) -> dt.datetime | None:
        return window_bounds(self.budget.window, self.at)[1]

    @property
    def places(self) -> int:
        """Decimals for the spend, the cap and what remains, the same for all three: cents, unless
        an amount that is not zero would read as 0.00 (a few cheap requests)."""
        reads_zero = NANOS // 200  # half a cent and less rounds to 0.00
        return 4 if any(0 < n <= reads_zero for n in (self.spent, self.cap, self.remaining)) else 2

    @property
    def spent_text(self) -> str:
        return format_money(self.spent, self.places)

    @property
    def cap_text(self) -> str:
        return format_money(self.cap, self.places)

    @property
    def remaining_text(self) -> str:
        return format_money(self.remaining, self.places)


def statuses(budgets: Iterable[Budget], at: dt.datetime | None = None) -> list[BudgetStatus]:
    """Each budget with its spend in the window holding `at` (now) and its cap, in one query."""
    budgets = list(budgets)
    spends = spent_in_windows(budgets, at)
    return [BudgetStatus(b, s, to_nanos(b.cap(at)), at) for b, s in zip(budgets, spends, strict=True)]


def status_of(budget: Budget) -> BudgetStatus:
    return statuses([budget])[0]


def budgets_for(user: User) -> list[BudgetStatus]:
    """Every budget that bounds `user`'s requests: their keys', their own, their team's."""
    match = Q(key__owner=user, key__revoked_at__isnull=True) | Q(user=user)
    if user.team_id is not None:
        match |= Q(team_id=user.team_id)
    return statuses(
        Budget.objects.filter(match).select_related("key", "user", "team").order_by("team_id", "user_id", "key_id")
    )


def refusal(editor: User, target: Any, budget: Budget | None = None) -> str:
    """Why `editor` may not set, change or remove a budget on `target` (`budget`: the one it has for
    the window, if any), or "" when they may. Admins set any budget; a team lead their members' and
    their members' keys' (never the team's own), except one an admin set, and never their own or
    their own keys' (a cap on themselves is an admin's to set). A developer sets none: a budget is a
    cap others put on them (they read theirs)."""
    if editor.is_admin:
        return ""
    owner = target.owner if isinstance(target, Key) else target if hasattr(target, "role") else None
    if editor.led_team_id is None or owner is None or not may_manage(editor, owner):
        return _("You may not set this budget.")
    if owner.pk == editor.pk:
        return _("Only an admin can set or remove a budget on you or your keys.")
    if budget is not None and budget.set_by_admin:
        return _("An admin set this budget; only an admin can change or remove it.")
    return ""


def may_set(editor: User, target: Any, budget: Budget | None = None) -> bool:
    return not refusal(editor, target, budget)


def save_budget(
    *,
    editor: User,
    target: Any,
    window: str,
    amount: Decimal | str,
    alert_percent: int | None = None,
    replace: bool = True,
) -> Budget:
    """Create or change `target`'s budget for `window` (a key, a user or a team); with `replace`
    False, a budget it has for the window already is a field error (one budget per target and
    window: a new one never silently takes the old one's place). A team lead's budgets for a member
    stay within the team's budget for the same window, like limits; one an admin sets (or changes)
    is theirs from then on (`Budget.set_by_admin`)."""
    field = "key" if isinstance(target, Key) else "user" if hasattr(target, "role") else "team"
    taken = ValidationError(
        {"window": _("%(target)s already has a budget for this window; change that one instead.") % {"target": target}}
    )
    with transaction.atomic():
        # Locked, so a lead's change cannot slip in between an admin's and the check.
        existing = Budget.objects.select_for_update().filter(**{field: target, "window": window}).first()
        reason = refusal(editor, target, existing)
        if reason:
            raise PermissionDenied(reason)
        if existing is not None and not replace:
            raise taken
        amount = Decimal(str(amount))
        if amount < 0:
            raise ValidationError({"amount": _("A budget cannot be negative.")})
        if window not in BudgetWindow.values:
            raise ValidationError({"window": _("Choose day, week, month or once.")})
        if not editor.is_admin and editor.led_team_id is not None:
            team_budget = Budget.objects.filter(team_id=editor.led_team_id, window=window).first()
            if team_budget is not None and amount > team_budget.amount:
                raise ValidationError(
                    {
                        "amount": _("At most %(cap)s: the team's budget for this window.")
                        % {"cap": format_money(to_nanos(team_budget.amount), 2)}
                    }
                )
        values = {"amount": amount, "alert_percent": alert_percent, "set_by_admin": editor.is_admin}
        if replace:
            budget, _created = Budget.objects.update_or_create(**{field: target, "window": window}, defaults=values)
            return budget
        try:
            with transaction.atomic():
                return Budget.objects.create(**{field: target, "window": window}, **values)
        except IntegrityError:
            raise taken from None  # created by a request racing this one since the check above


def refused_models(target: Any) -> list[str]:
    """The models `target` (a key, a user or a team) may use that the gateway refuses to a
    budgeted key (`unpayable`). A budget on the target stops them working."""
    if isinstance(target, Key):
        usable = Model.objects.usable_by(target.owner)
        if target.allowed_models.exists():
            usable = usable.filter(pk__in=target.allowed_models.values("pk"))
    elif hasattr(target, "role"):
        usable = Model.objects.usable_by(target)
    else:
        usable = Model.objects.enabled()
        if target.allowed_models.exists():
            usable = usable.filter(pk__in=target.allowed_models.values("pk"))
    return list(unpayable(usable).order_by("name").values_list("name", flat=True))


def unpayable(models: QuerySet[Model]) -> QuerySet[Model]:
    """Of `models`, those the gateway refuses to a key under any budget (`model_not_priced`): a
    served model with enabled routes, none of which has a price in effect or a fallback (the
    route's `unpriced`, else PORTAL_UNPRICED_ROUTES), and an alias whose enabled targets are all
    such models. The gateway's own list (`gateway.catalog.usable_models`) leaves out the same."""
    routes = ModelRoute.objects.enabled()
    payable = Q(pk__in=RoutePrice.objects.in_effect().values("route_id")) | Q(unpriced=UnpricedPolicy.FALLBACK)
    if settings.PORTAL_UNPRICED_ROUTES == UnpricedPolicy.FALLBACK:
        payable |= Q(unpriced=UnpricedPolicy.DEFAULT)
    served = routes.values("model_id")
    paid = routes.filter(payable).values("model_id")
    targets = AliasTarget.objects.filter(alias=OuterRef("pk"), target__enabled=True, target_id__in=served)
    return models.filter(
        Q(is_alias=False, pk__in=served) & ~Q(pk__in=paid)
        | Q(is_alias=True) & Exists(targets) & ~Exists(targets.filter(target_id__in=paid))
    )


def budgeted(user: Any, key: Key | None = None) -> bool:
    """Whether a budget covers `key` (its own, its owner's or the owner's team's), or without a
    key, every key of `user` (theirs or their team's)."""
    if key is not None:
        return Budget.objects.covering(key).exists()
    match = Q(user_id=user.pk)
    if user.team_id is not None:
        match |= Q(team_id=user.team_id)
    return Budget.objects.filter(match).exists()


def remove_budget(budget: Budget, *, editor: User) -> None:
    """Delete `budget`, if `editor` may (the rules of `refusal`)."""
    reason = refusal(editor, budget.target, budget)
    if reason:
        raise PermissionDenied(reason)
    budget.delete()


def top_up(budget: Budget, *, editor: User, amount: Decimal | str, until: dt.datetime) -> Budget:
    """An admin's temporary addition to a budget, until `until`. The budget is the admin's from
    then on (`set_by_admin`): a lead who set it could otherwise remove the cap the admin raised."""
    if not editor.is_admin:
        raise PermissionDenied(_("Only an admin may top up a budget."))
    if until <= timezone.now():
        raise ValidationError({"until": _("The top-up must end in the future.")})
    budget.topup, budget.topup_until = Decimal(str(amount)), until
    budget.set_by_admin = True
    budget.full_clean()
    budget.save()
    return budget


def alert_people(budget: Budget) -> list[Any]:
    """Whom a budget's alert is e-mailed to besides the alert targets: the key's owner, the user, or
    the team's leads (those with an address, active)."""
    from accounts.choices import Role
    from accounts.models import User

    if budget.key is not None:
        people = [budget.key.owner]
    elif budget.user is not None:
        people = [budget.user]
    else:
        people = list(User.objects.filter(team=budget.team, role=Role.TEAM_LEAD))
    return sorted((p for p in people if p.email and p.is_active), key=lambda p: p.email)


def alert_text(budget: Budget, status: BudgetStatus) -> str:
    """The alert in the active language. The spend shown is at least the alert's share: the alert
    fires when a request's reservation crosses it, before that request's usage is written."""
    crossed = status.cap * (budget.alert_percent or 0) // 100
    shown = dataclasses.replace(status, spent=max(status.spent, crossed))
    return _("Budget alert: %(target)s has used %(percent)s%% of its %(window)s budget (%(spent)s of %(cap)s).") % {
        "target": str(budget.target),
        "percent": budget.alert_percent,
        "window": budget.get_window_display(),
        "spent": shown.spent_text,
        "cap": shown.cap_text,
    }


def send_alerts(budget_ids: list[int]) -> None:
    """Tell the alert targets (in the portal's language) and the budget's people (`alert_people`,
    by e-mail, each in their own language) that it passed its alert share. Called once per budget,
    threshold and window: the admission script's flag (Redis SET NX) decides, so two replicas never
    both send it."""
    from django.core.mail import send_mail

    from channels.health.alerts import broadcast

    for budget in Budget.objects.filter(pk__in=budget_ids).select_related("key__owner", "user", "team"):
        status = status_of(budget)
        with translation.override(settings.LANGUAGE_CODE):
            broadcast({"text": alert_text(budget, status), "event": "budget_alert", "budget": budget.id})
        by_language: dict[str, list[str]] = {}
        for person in alert_people(budget):
            by_language.setdefault(person.language or settings.LANGUAGE_CODE, []).append(person.email)
        for language, recipients in by_language.items():
            with translation.override(language):
                text = alert_text(budget, status)
            try:
                send_mail(text[:150], text, None, recipients, fail_silently=False)
            except Exception as exc:  # SMTP raises many types; the log keeps the class only
                logger.warning("budget %s alert e-mail failed: %s", budget.id, exc.__class__.__name__)


__all__ = [
    "BudgetStatus",
    "budgets_for",
    "may_set",
    "refusal",
    "remove_budget",
    "save_budget",
    "send_alerts",
    "spent",
    "spent_in_windows",
    "status_of",
    "statuses",
    "to_amount",
    "top_up",
]
