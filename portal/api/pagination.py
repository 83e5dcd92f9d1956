from typing import Any

from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from portal.pagination import CappedCountPaginator


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500


class CappedCountPagination(Pagination):
    """For lists over tables of millions (usage records): `count` stops at 10,001 and
    `count_capped` says so, so a page costs a bounded count instead of a full scan."""

    django_paginator_class = CappedCountPaginator

    def get_paginated_response(self, data: Any) -> Response:
        response = super().get_paginated_response(data)
        assert self.page is not None  # set by paginate_queryset, which ran first
        response.data["count_capped"] = self.page.paginator.count > CappedCountPaginator.cap
        return response

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = super().get_paginated_response_schema(schema)
        out["properties"]["count_capped"] = {
            "type": "boolean",
            "description": "true when there are more than 10,000 rows and `count` stopped counting",
        }
        return out
