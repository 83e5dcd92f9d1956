"""Pagination for lists over tables that grow without bound (usage records, request logs)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.utils.functional import cached_property


class CappedCountPaginator(Paginator):
    """A paginator whose count stops at `cap`: a list over a table of millions then costs a bounded
    `COUNT(*)` of a LIMITed subquery instead of a full scan on every page view; past the cap the
    page says "more than N" and the filters narrow it."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        capped: Any = self.object_list[: self.cap + 1]  # a QuerySet here: COUNT(*) of a LIMITed subquery
        return min(capped.count(), self.cap + 1)

    @property
    def count_display(self) -> str:
        return f"{self.cap:,}+" if self.count > self.cap else f"{self.count:,}"
