"""DRF exception handler: database integrity errors from user input become 400s, not 500s."""

from django.db import IntegrityError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler


def exception_handler(exc, context):
    response = drf_handler(exc, context)
    if response is None and isinstance(exc, IntegrityError):
        return Response(
            {"non_field_errors": ["This conflicts with an existing object (duplicate name?)."]},
            status=status.HTTP_400_BAD_REQUEST,
        )
    return response
