"""Serializers of the budgets API."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from channels.prices import amount_text, currency
from keys.models import Budget
from portal.api.serializers import ModelSerializer

from ..services import BudgetStatus, statuses

FIXED_FIELDS = ("key", "user", "team", "window")  # what a budget applies to: set on create only


class BudgetListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """A page of budgets with their spend read in one query."""

    def to_representation(self, data: Any) -> list[Any]:
        budgets = list(data.all() if hasattr(data, "all") else data)
        self.child.known = {s.budget.pk: s for s in statuses(budgets)}  # type: ignore[union-attr]
        return super().to_representation(budgets)


class BudgetSerializer(ModelSerializer[Budget]):
    """A spending cap on one key, user or team over one window, with what it has spent so far."""

    currency = serializers.SerializerMethodField()
    spent = serializers.SerializerMethodField(help_text="Spent in the current window (exact decimal string).")
    remaining = serializers.SerializerMethodField(help_text="Left in the current window, top-up included.")
    resets_at = serializers.SerializerMethodField(help_text="When the window ends (null: a one-off budget).")

    class Meta:
        model = Budget
        fields = [
            "id",
            "key",
            "user",
            "team",
            "window",
            "amount",
            "alert_percent",
            "topup",
            "topup_until",
            "set_by_admin",
            "currency",
            "spent",
            "remaining",
            "resets_at",
            "created",
            "updated",
        ]
        read_only_fields = ["topup", "topup_until", "set_by_admin", "created", "updated"]
        validators: list[object] = []  # one target, one budget per window: the service says which, as a field error
        list_serializer_class = BudgetListSerializer

    known: dict[int, BudgetStatus]  # the statuses read for this page (or object)

    def status(self, budget: Budget) -> BudgetStatus:
        """The budget's spend and cap, read once for all its fields (and once for a page's budgets)."""
        known = getattr(self, "known", {})
        if budget.pk not in known:
            known = self.known = {s.budget.pk: s for s in statuses([budget])}
        return known[budget.pk]

    def get_currency(self, budget: Budget) -> str:
        return currency()

    def get_spent(self, budget: Budget) -> str:
        return amount_text(self.status(budget).spent)

    def get_remaining(self, budget: Budget) -> str:
        return amount_text(self.status(budget).remaining)

    def get_resets_at(self, budget: Budget) -> Any:
        return self.status(budget).resets_at

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None:
            targets = [attrs.get(f) for f in ("key", "user", "team") if attrs.get(f) is not None]
            if len(targets) != 1:
                raise serializers.ValidationError(_("Set exactly one of key, user or team."))
        else:
            # An edit changes the amount and the alert; sent unchanged, the rest is no error.
            changed = [f for f in FIXED_FIELDS if f in attrs and attrs[f] != getattr(self.instance, f)]
            if changed:
                raise serializers.ValidationError(
                    {f: [_("This cannot be changed on a budget; create a new budget instead.")] for f in changed}
                )
        return attrs


class TopUpSerializer(serializers.Serializer[Any]):
    amount = serializers.DecimalField(max_digits=14, decimal_places=4, min_value=0)
    until = serializers.DateTimeField()
