"""REST API for budgets: admins set any; a team lead their members' and their members' keys'
(within the team's); everyone reads the budgets that bound them. Another team's budget is 404."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from keys.models import Budget, BudgetQuerySet
from portal.permissions import IsAdmin

from ..services import remove_budget, save_budget, top_up
from .serializers import BudgetSerializer, TopUpSerializer

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedRequest


def _save(editor: Any, target: Any, data: dict[str, Any], *, replace: bool) -> Budget:
    try:
        return save_budget(
            editor=editor,
            target=target,
            window=data.get("window", Budget._meta.get_field("window").default),  # the model's default: month
            amount=data["amount"],
            alert_percent=data.get("alert_percent"),
            replace=replace,
        )
    except DjangoPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from None
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.message_dict) from None


class BudgetViewSet(viewsets.ModelViewSet[Budget]):
    request: AuthenticatedRequest
    serializer_class = BudgetSerializer
    filterset_fields = ["key", "user", "team", "window"]
    ordering_fields = ["created", "amount", "window"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> BudgetQuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Budget.objects.none()
        return Budget.objects.select_related("key__owner", "user", "team").visible_to(self.request.user)

    def perform_create(self, serializer: serializers.BaseSerializer[Budget]) -> None:
        data = serializer.validated_data
        target = data.get("key") or data.get("user") or data.get("team")
        serializer.instance = _save(self.request.user, target, data, replace=False)

    def perform_update(self, serializer: serializers.BaseSerializer[Budget]) -> None:
        budget = serializer.instance
        assert budget is not None
        data = {
            "window": budget.window,
            "amount": budget.amount,
            "alert_percent": budget.alert_percent,
            **{k: v for k, v in serializer.validated_data.items() if k in ("amount", "alert_percent")},
        }
        serializer.instance = _save(self.request.user, budget.target, data, replace=True)

    def perform_destroy(self, instance: Budget) -> None:
        try:
            remove_budget(instance, editor=self.request.user)
        except DjangoPermissionDenied as exc:
            raise PermissionDenied(str(exc)) from None

    @extend_schema(request=TopUpSerializer, responses={200: BudgetSerializer})
    @action(detail=True, methods=["post"], url_path="top-up", permission_classes=[IsAdmin])
    def top_up(self, request: Request, pk: str | None = None) -> Response:
        """An admin's temporary addition to the budget, until `until`."""
        body = TopUpSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            budget = top_up(
                self.get_object(),
                editor=self.request.user,
                amount=body.validated_data["amount"],
                until=body.validated_data["until"],
            )
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return Response(BudgetSerializer(budget, context=self.get_serializer_context()).data)
