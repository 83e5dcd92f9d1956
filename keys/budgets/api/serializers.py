"""Serializers of the budgets API."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from channels.prices import amount_text, currency
from keys.models import Budget

from ..services import status_of


class BudgetSerializer(serializers.ModelSerializer[Budget]):
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
            "currency",
            "spent",
            "remaining",
            "resets_at",
            "created",
            "updated",
        ]
        read_only_fields = ["topup", "topup_until", "created", "updated"]
        validators: list[object] = []  # one target, one budget per window: the service says which, as a field error

    def get_currency(self, budget: Budget) -> str:
        return currency()

    def get_spent(self, budget: Budget) -> str:
        return amount_text(status_of(budget).spent)

    def get_remaining(self, budget: Budget) -> str:
        return amount_text(status_of(budget).remaining)

    def get_resets_at(self, budget: Budget) -> Any:
        return status_of(budget).resets_at

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None:
            targets = [attrs.get(f) for f in ("key", "user", "team") if attrs.get(f) is not None]
            if len(targets) != 1:
                raise serializers.ValidationError("Set exactly one of key, user or team.")
        return attrs


class TopUpSerializer(serializers.Serializer[Any]):
    amount = serializers.DecimalField(max_digits=14, decimal_places=4, min_value=0)
    until = serializers.DateTimeField()
