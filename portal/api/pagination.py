from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import PageNumberPagination
from rest_framework.response import Response

from portal.pagination import CappedCountPaginator


class Pagination(PageNumberPagination):
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int | None:
        """DRF's, with a `page_size` that is not a positive number (`abc`, `0`, `-5`) a 400 on
        `page_size` naming the range: DRF fell back to 50 silently. A larger one is capped."""
        raw = request.query_params.get(self.page_size_query_param)
        if not raw:  # absent, or empty as a form sends it
            return self.page_size
        try:
            size = int(raw)
        except ValueError:
            size = 0
        if size < 1:
            message = _("Choose a page size from 1 to %(max)s.") % {"max": self.max_page_size}
            raise ValidationError({self.page_size_query_param: [message]})
        return min(size, self.max_page_size)

    def get_schema_operation_parameters(self, view) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
                parameter["description"] = (
                    f"Number of results to return per page, from 1 to {self.max_page_size};"
                    f" a larger number is capped at {self.max_page_size}."
                )
        return parameters

    def paginate_queryset(self, queryset, request, view=None):
        """DRF's, with a page that does not exist (`abc`, `-1`, past the last) a 400 on `page` naming
        the pages there are: it was a 404 `Invalid page.`, which a list's schema does not list."""
        try:
            return super().paginate_queryset(queryset, request, view)
        except NotFound:
            last = self.django_paginator_class(queryset, self.get_page_size(request)).num_pages
            message = _("Choose a page from 1 to %(last)s.") % {"last": last}
            raise ValidationError({self.page_query_param: [message]}) from None


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
