"""DRF permissions: the one admin check lives in `portal.permissions`."""

from typing import TYPE_CHECKING

from portal.permissions import IsAdmin, IsAdminOrReadOnly

if TYPE_CHECKING:
    from django.contrib.auth.models import _User  # the stubs' AUTH_USER_MODEL; portal imports no app
    from rest_framework.request import Request

    class AuthenticatedRequest(Request):
        """A request that passed IsAuthenticated (the default permission): `user` is signed in."""

        user: _User


__all__ = ["IsAdmin", "IsAdminOrReadOnly"]
