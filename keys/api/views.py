"""REST API for developer keys: developers manage their own, admins everyone's."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from keys.filters import KeyFilterSet
from keys.models import Key, KeyQuerySet
from keys.services import revoke_key, rotate_key
from portal.api.serializers import LIMIT_FIELDS, drf_error

from .serializers import KeyCreatedSerializer, KeySerializer, RotateSerializer

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedRequest


class KeyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Key],
):
    """Keys are revoked, never deleted: usage records point at them. Another developer's key is 404."""

    request: AuthenticatedRequest
    serializer_class = KeySerializer
    filterset_class = KeyFilterSet
    search_fields = ["name", "prefix", "last_four", "owner__username", "client"]
    ordering_fields = ["name", "created", "last_used_at", "expires_at", "revoked_at", "owner__username", *LIMIT_FIELDS]

    def get_queryset(self) -> KeyQuerySet:
        if getattr(self, "swagger_fake_view", False):
            return Key.objects.none()
        return Key.objects.select_related("owner").prefetch_related("allowed_models").visible_to(self.request.user)

    def _data(self, key: Key, plaintext: str | None = None) -> dict[str, Any]:
        data = dict(KeySerializer(key, context=self.get_serializer_context()).data)
        if plaintext is not None:
            data["key"] = plaintext
        return data

    @extend_schema(responses={201: KeyCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = serializer.save()
        return Response(self._data(key, key.plaintext), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: KeySerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str | None = None) -> Response:
        """Stop the key now. Idempotent."""
        key = revoke_key(self.get_object())
        return Response(self._data(key))

    @extend_schema(request=RotateSerializer, responses={201: KeyCreatedSerializer})
    @action(detail=True, methods=["post"])
    def rotate(self, request: Request, pk: str | None = None) -> Response:
        """Issue a replacement with the same settings; the old key stops now or after `grace_seconds`.
        A revoked key, or one rotated already (rotate its replacement), is a 400."""
        key = self.get_object()
        params = RotateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        grace = datetime.timedelta(seconds=params.validated_data["grace_seconds"])
        try:
            new, plaintext = rotate_key(key, grace=grace or None)
        except DjangoValidationError as exc:
            raise drf_error(exc) from None
        return Response(self._data(new, plaintext), status=status.HTTP_201_CREATED)
