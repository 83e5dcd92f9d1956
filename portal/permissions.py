"""The one admin check, for pages (mixin, decorator), the API (DRF permissions) and templates.

Only `user.is_admin` and `user.is_team_lead` are read (the accounts app defines them), so the ground
floor needs no app. A team lead sees and manages their team's members and keys; what exactly is
scoped by the querysets (`visible_to`) and the accounts services (`may_manage`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy as _
from rest_framework.permissions import SAFE_METHODS, BasePermission

if TYPE_CHECKING:
    from django.contrib.auth.models import _User  # the stubs' AUTH_USER_MODEL; portal imports no app
    from django_stubs_ext import StrOrPromise
    from rest_framework.request import Request

    class AuthenticatedHttpRequest(HttpRequest):
        """A request behind LoginRequiredMixin or AdminRequiredMixin: `user` is signed in."""

        user: _User

    class AuthenticatedRequest(Request):
        """An API request that passed IsAuthenticated (the default permission): `user` is signed in."""

        user: _User


DENIED = _("Only admins can see this page.")
DENIED_LEAD = _("Only admins and team leads can see this page.")


def is_admin(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_admin)


def is_admin_or_team_lead(user: Any) -> bool:
    return is_admin(user) or bool(user is not None and user.is_authenticated and user.is_team_lead)


class AdminRequiredMixin(LoginRequiredMixin):
    """Anonymous → login page; logged-in developer → 403 with `permission_denied_message`."""

    permission_denied_message: StrOrPromise = DENIED

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated and not is_admin(request.user):
            raise PermissionDenied(self.get_permission_denied_message())
        return super().dispatch(request, *args, **kwargs)


class AdminOrTeamLeadRequiredMixin(LoginRequiredMixin):
    """Like AdminRequiredMixin, for pages a team lead sees scoped to their team."""

    permission_denied_message: StrOrPromise = DENIED_LEAD

    def dispatch(self, request, *args, **kwargs):
        if request.user.is_authenticated and not is_admin_or_team_lead(request.user):
            raise PermissionDenied(self.get_permission_denied_message())
        return super().dispatch(request, *args, **kwargs)


def admin_required(view: Callable | None = None, *, message: StrOrPromise = DENIED) -> Callable:
    """The same rule for function views: `@admin_required` or `@admin_required(message=...)`."""

    def decorate(func: Callable) -> Callable:
        @login_required
        @functools.wraps(func)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not is_admin(request.user):
                raise PermissionDenied(message)
            return func(request, *args, **kwargs)

        return wrapper

    return decorate(view) if view is not None else decorate


class IsAdmin(BasePermission):
    message = _("Only admins can do this.")

    def has_permission(self, request, view):
        return is_admin(request.user)


class IsAdminOrTeamLead(BasePermission):
    message = _("Only admins and team leads can do this.")

    def has_permission(self, request, view):
        return is_admin_or_team_lead(request.user)


class IsAdminOrReadOnly(BasePermission):
    """Developers may read (e.g. the model list); only admins may change."""

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_admin(request.user)
