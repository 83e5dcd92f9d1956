"""DRF exception handler: database errors caused by user input become 4xx, and Redis faults or a
full disk a 503 with `Retry-After` (`{"detail", "code"}`, documented on every operation by
`portal.api.schema`), never 500s."""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError, IntegrityError
from django.db.models import ProtectedError, RestrictedError
from django.http import Http404
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from portal import faults, i18n

from .parsers import BodyTooLarge

logger = logging.getLogger(__name__)


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):  # (DRF reads a JSON body through Django's, which refuses it first)
        exc = BodyTooLarge.over(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if isinstance(exc, Http404):
        # Django's "No Key matches the given query." is English in every language and names the
        # model; DRF's own 404 is translated, and says the same as for an unknown path.
        exc = exceptions.NotFound()
    response = drf_handler(exc, context)
    if response is not None:
        return response
    # ProtectedError subclasses IntegrityError: test it first, it deserves its own answer.
    if isinstance(exc, ProtectedError | RestrictedError):
        blocking = getattr(exc, "protected_objects", None) or getattr(exc, "restricted_objects", ())
        names = sorted({str(o) for o in blocking})
        listed = i18n.listing(names, 10)
        return Response(
            {"detail": _("Still used by %(listed)s; remove those first.") % {"listed": listed}},
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, DataError):
        # A value the database cannot store or compare (PostgreSQL: a NUL character in text, a
        # number out of range) that no serializer caught: the input is wrong, not the server.
        return Response(
            {"non_field_errors": [_("A value cannot be stored as given (NUL character or number out of range?).")]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if faults.is_redis_fault(exc) or faults.is_disk_full(exc):
        code, message = faults.describe(exc)
        view = context.get("view")
        logger.error("API %s: %s (%r)", view.__class__.__name__ if view else "?", code, exc)
        return Response(
            {"detail": message, "code": code},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(faults.RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, IntegrityError):
        return Response(
            {"non_field_errors": [_("This conflicts with an existing object (duplicate name?).")]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return None
