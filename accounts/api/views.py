"""REST API for users (admins), teams, the caller's profile, personal API tokens and the audit log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch, QuerySet
from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.generics import GenericAPIView
from rest_framework.permissions import SAFE_METHODS, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.serializers import LIMIT_FIELDS
from portal.permissions import IsAdmin, IsAdminOrReadOnly

from .. import services
from ..filters import ApiTokenFilterSet, AuditLogFilterSet, TeamFilterSet, UserFilterSet
from ..models import ApiToken, AuditLog, Team, User
from ..services import issue_token, revoke_token
from .serializers import (
    ApiTokenCreatedSerializer,
    ApiTokenSerializer,
    AuditLogSerializer,
    MemberSerializer,
    MeSerializer,
    PasswordSerializer,
    ReactivateSerializer,
    ResetPasswordSerializer,
    TeamSerializer,
    UnlockSerializer,
    UserCreatedSerializer,
    UserSerializer,
)

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedRequest


class UserViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[User],
):
    """Users (admins only). Users are deactivated, never deleted: their usage history stays."""

    request: AuthenticatedRequest

    queryset = User.objects.prefetch_related("allowed_models").order_by("username")
    serializer_class = UserSerializer
    permission_classes = [IsAdmin]
    filterset_class = UserFilterSet
    search_fields = ["username", "email", "first_name", "last_name"]
    ordering_fields = ["username", "email", "role", "is_active", "date_joined", "last_login", *LIMIT_FIELDS]

    @extend_schema(responses={201: UserCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = UserSerializer(data=request.data, context=self.get_serializer_context())
        serializer.is_valid(raise_exception=True)
        user = serializer.save()
        data = dict(UserSerializer(user, context=self.get_serializer_context()).data)
        data["password"] = serializer.generated_password  # null when the admin chose it
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: UserSerializer})
    @action(detail=True, methods=["post"])
    def deactivate(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Deactivate: the user can no longer log in and their keys and tokens stop working."""
        user = self.get_object()
        try:
            services.set_active(user, False, actor=request.user)
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"detail": " ".join(exc.messages)}) from None
        return Response(UserSerializer(user, context=self.get_serializer_context()).data)

    @extend_schema(request=ReactivateSerializer, responses={200: UserSerializer})
    @action(detail=True, methods=["post"])
    def reactivate(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Reactivate. API tokens stay revoked; old keys are revoked unless `restore_keys` is true."""
        user = self.get_object()
        body = ReactivateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.set_active(user, True, restore_keys=body.validated_data["restore_keys"], actor=request.user)
        return Response(UserSerializer(user, context=self.get_serializer_context()).data)

    @extend_schema(request=None, responses={200: UnlockSerializer})
    @action(detail=True, methods=["post"])
    def unlock(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Clear the failed logins that locked this username out."""
        user = self.get_object()
        return Response({"cleared": services.unlock_login(user, actor=request.user)})

    @extend_schema(request=ResetPasswordSerializer, responses={200: PasswordSerializer})
    @action(detail=True, methods=["post"], url_path="reset-password")
    def reset_password(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Set a new random password and return it once; the user's sessions end and API tokens are
        revoked unless `revoke_access` is false."""
        user = self.get_object()
        body = ResetPasswordSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        password = services.reset_password(user, actor=request.user, revoke_access=body.validated_data["revoke_access"])
        return Response({"password": password})


class TeamViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet[Team],
):
    """Teams: admins manage every team; a member reads their own team (another team is 404); its
    lead also manages the members' limits (`members`). Not deleted: usage records point at them."""

    request: AuthenticatedRequest

    serializer_class = TeamSerializer
    permission_classes = [IsAdminOrReadOnly]
    filterset_class = TeamFilterSet
    search_fields = ["name", "description"]
    ordering_fields = ["name", "created", *LIMIT_FIELDS]

    def get_queryset(self) -> QuerySet[Team]:
        if getattr(self, "swagger_fake_view", False):
            return Team.objects.none()
        members = Prefetch("members", queryset=User.objects.order_by("username"))
        return Team.objects.visible_to(self.request.user).prefetch_related("allowed_models", members)

    def _managed_team(self) -> Team:
        team = self.get_object()
        user = self.request.user
        if not (user.is_admin or user.led_team_id == team.pk):
            raise PermissionDenied(_("Only admins and the team's leads can manage its members."))
        return team

    @extend_schema(responses={200: MemberSerializer(many=True)})
    @action(
        detail=True,
        methods=["get"],
        serializer_class=MemberSerializer,
        permission_classes=[IsAuthenticated],
        filter_backends=[],
        pagination_class=None,
    )
    def members(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """The team's members with their limits (admins and the team's leads)."""
        team = self._managed_team()
        members = services.managed_members(team, request.user).order_by("username")
        return Response(MemberSerializer(members, many=True).data)

    @extend_schema(request=MemberSerializer, responses={200: MemberSerializer})
    @action(
        detail=True,
        methods=["get", "patch"],
        url_path=r"members/(?P<member_id>\d+)",
        serializer_class=MemberSerializer,
        permission_classes=[IsAuthenticated],  # who may is the team's business: `_managed_team`
        filter_backends=[],
        pagination_class=None,
    )
    def member(self, request: AuthenticatedRequest, pk: str | None = None, member_id: str | None = None) -> Response:
        """One member's limits; a lead may set them within the team's and below an admin's."""
        team = self._managed_team()
        person = get_object_or_404(services.managed_members(team, request.user), pk=member_id)
        if request.method in SAFE_METHODS:
            return Response(MemberSerializer(person).data)
        body = MemberSerializer(person, data=request.data, partial=True, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        body.save()
        return Response(MemberSerializer(person).data)


class MeView(GenericAPIView[Any]):
    """The caller's own profile, limits and the models they may use."""

    serializer_class = MeSerializer
    permission_classes = [IsAuthenticated]
    pagination_class = None
    filter_backends: list[Any] = []

    def get(self, request: AuthenticatedRequest) -> Response:
        return Response(MeSerializer(request.user, context=self.get_serializer_context()).data)


class ApiTokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[ApiToken],
):
    """The caller's personal API tokens. Revoked, not deleted, so `last_used_at` stays visible."""

    request: AuthenticatedRequest

    serializer_class = ApiTokenSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = ApiTokenFilterSet
    search_fields = ["name", "prefix"]
    ordering_fields = ["name", "created", "last_used_at", "expires_at"]

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user).order_by("-created")

    @extend_schema(responses={201: ApiTokenCreatedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token, plaintext = issue_token(
            user=self.request.user,
            name=serializer.validated_data["name"],
            expires_at=serializer.validated_data.get("expires_at"),
        )
        data = dict(ApiTokenSerializer(token, context=self.get_serializer_context()).data)
        data["token"] = plaintext
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ApiTokenSerializer})
    @action(detail=True, methods=["post"])
    def revoke(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        token = self.get_object()
        revoke_token(token)
        return Response(ApiTokenSerializer(token, context=self.get_serializer_context()).data)


class AuditLogViewSet(viewsets.ReadOnlyModelViewSet[AuditLog]):
    """Who changed what, when (admins only). Secrets appear only as "changed" or "set"."""

    queryset = AuditLog.objects.all()
    serializer_class = AuditLogSerializer
    permission_classes = [IsAdmin]
    filterset_class = AuditLogFilterSet
    search_fields = ["actor_name", "object_type", "object_repr", "message"]
    ordering_fields = ["created", "actor_name", "object_type", "action"]
