"""Channel and model workflows shared by the web UI, the REST API and launch jobs."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from .baseurl import BaseURLError, normalize_base_url


def clean_base_url(raw: str) -> tuple[str, list[str]]:
    """Canonical base URL plus human notes on what changed; ValidationError for unusable input."""
    try:
        return normalize_base_url(raw)
    except BaseURLError as exc:
        raise ValidationError({"base_url": [str(exc)]}) from None
