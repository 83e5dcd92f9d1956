"""`{% budgets_bounding key as budgets %}` and `{% team_budgets team viewer as budgets %}`: the budgets
shown on the key and team pages (through a tag, so the accounts app's team page needs no import
of this app)."""

from __future__ import annotations

from typing import Any

from django import template
from django.db.models import Q, QuerySet

from keys.budgets.services import BudgetStatus, statuses
from keys.models import Budget, Key

register = template.Library()


def _statuses(budgets: QuerySet[Budget]) -> list[BudgetStatus]:
    return statuses(budgets.select_related("key", "user", "team").order_by("team_id", "user_id", "key_id"))


@register.simple_tag
def budgets_bounding(key: Key) -> list[BudgetStatus]:
    """The key's own budgets, its owner's and its owner's team's: every one its requests count in."""
    return _statuses(Budget.objects.covering(key))


@register.simple_tag
def team_budgets(team: Any, viewer: Any) -> list[BudgetStatus]:
    """The team's budgets and those of its members and their keys that `viewer` may see (a lead:
    the members they manage, as the page lists them)."""
    return _statuses(
        Budget.objects.visible_to(viewer).filter(
            Q(team=team) | Q(user__team=team) | Q(key__owner__team=team, key__revoked_at__isnull=True)
        )
    )
