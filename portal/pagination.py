"""Pagination for lists over tables that grow without bound (usage records, request logs)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property


class CappedCountPaginator(Paginator):
    """A paginator whose count stops at `cap`: a list over a table of millions then costs a bounded
    `COUNT(*)` of a LIMITed subquery instead of a full scan on every page view; past the cap the
    page says "more than N" and the filters narrow it."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        rows: Any = self.object_list
        if isinstance(rows, QuerySet):
            # Any cap + 1 matching rows will do: unordered, the database counts them from the
            # cheapest index instead of sorting every match first.
            rows = rows.order_by()
        return min(rows[: self.cap + 1].count(), self.cap + 1)

    @property
    def count_display(self) -> str:
        return f"{self.cap:,}+" if self.count > self.cap else f"{self.count:,}"
