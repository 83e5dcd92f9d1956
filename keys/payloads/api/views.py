"""REST API for request logs (admins only): `/api/payload-logging/` turns logging on for a key or
a user with a retention; `/api/request-logs/` lists what was stored, and reading one (its bodies)
is audit-logged."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework import mixins, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from keys.models import PayloadLogging, RequestPayload
from keys.payloads.filters import PayloadLoggingFilterSet, RequestPayloadFilterSet
from keys.payloads.services import read
from portal.permissions import IsAdmin

from .serializers import PayloadLoggingSerializer, RequestPayloadDetailSerializer, RequestPayloadSerializer


class PayloadLoggingViewSet(viewsets.ModelViewSet[PayloadLogging]):
    """Request logging per key or per user: on with a retention in days, or explicitly off for a
    key whose owner's requests are logged. No row: off."""

    queryset = PayloadLogging.objects.select_related("key", "user")
    serializer_class = PayloadLoggingSerializer
    permission_classes = [IsAdmin]
    filterset_class = PayloadLoggingFilterSet
    ordering_fields = ["created", "retention_days"]


class RequestPayloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[RequestPayload]):
    """Stored request logs: listed without bodies; retrieving one returns its redacted bodies and
    writes an audit entry."""

    serializer_class = RequestPayloadSerializer
    permission_classes = [IsAdmin]
    filterset_class = RequestPayloadFilterSet
    search_fields = ["request_id", "model", "key__name", "user__username"]
    ordering_fields = ["created", "expires_at"]

    def get_queryset(self) -> QuerySet[RequestPayload]:
        queryset = RequestPayload.objects.select_related("key", "user")
        if self.action == "list":
            queryset = queryset.defer("request_body", "response_body")
        return queryset

    def get_serializer_class(self) -> Any:
        return RequestPayloadDetailSerializer if self.action == "retrieve" else RequestPayloadSerializer

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = self.get_object()
        serializer = RequestPayloadDetailSerializer(
            payload, context={**self.get_serializer_context(), "bodies": read(payload, reader=request.user, via="API")}
        )
        return Response(serializer.data)
