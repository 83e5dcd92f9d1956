"""Filter helpers every app's FilterSets share."""

from __future__ import annotations

from django.db.models import Q, QuerySet


def search(queryset: QuerySet, fields: tuple[str, ...], value: str) -> QuerySet:
    """Case-insensitive OR over `fields` for the `q` box of a list (NetBox's quick search)."""
    value = (value or "").strip()
    if not value:
        return queryset
    query = Q()
    for field in fields:
        query |= Q(**{f"{field}__icontains": value})
    return queryset.filter(query)
