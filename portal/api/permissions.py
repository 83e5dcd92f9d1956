"""DRF permissions: the one admin check lives in `portal.permissions`."""

from portal.permissions import IsAdmin, IsAdminOrReadOnly

__all__ = ["IsAdmin", "IsAdminOrReadOnly"]
