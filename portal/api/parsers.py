"""The API's JSON parser: DRF's, with a size cap and a nesting limit (both a 400/413, never a 500)."""

from __future__ import annotations

import json

from django.conf import settings
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from portal.bodies import MAX_DEPTH, too_deep


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = gettext_lazy("The request body is too large.")
    default_code = "body_too_large"

    @classmethod
    def over(cls, limit: int) -> BodyTooLarge:
        """The refusal of a body over `limit` bytes, in the reader's language."""
        return cls(_("The request body is larger than %(limit)s bytes.") % {"limit": limit})


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if limit is not None and len(raw) > limit:
            raise BodyTooLarge.over(limit)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            data = json.loads(raw.decode(encoding), parse_constant=_refuse_constant)
        except RecursionError:
            raise _too_deep() from None
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError included (Python's own words)
            raise ParseError(_("JSON parse error - %(detail)s") % {"detail": exc}) from None
        if too_deep(data):
            raise _too_deep()
        return data


def _too_deep() -> ParseError:
    return ParseError(_("JSON parse error - nested deeper than %(depth)s levels.") % {"depth": MAX_DEPTH})


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")
