"""FilterSets for MCP servers, tools, grants and calls, shared by the REST API and the HTML lists."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from portal.filters import FilterSet, search

from .choices import CallStatus, ServerStatus
from .models import McpCall, McpGrant, McpServer, McpTool


class McpServerFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    status = django_filters.MultipleChoiceFilter(label=_("Status"), choices=ServerStatus.choices)

    class Meta:
        model = McpServer
        fields = ["q", "slug", "status", "enabled", "transport"]

    def filter_q(self, queryset, name, value):
        return search(queryset, ("name", "slug", "url", "description"), value)


class McpToolFilterSet(FilterSet):
    class Meta:
        model = McpTool
        fields = ["server", "name", "enabled"]


class McpGrantFilterSet(FilterSet):
    class Meta:
        model = McpGrant
        fields = ["server", "tool", "key", "user", "team"]


class McpCallFilterSet(FilterSet):
    status = django_filters.MultipleChoiceFilter(label=_("Status"), choices=CallStatus.choices)
    server = django_filters.CharFilter(field_name="server_slug", label=_("Server"))
    tool = django_filters.CharFilter(label=_("Tool"))

    class Meta:
        model = McpCall
        fields = ["server", "tool", "status", "key", "user"]
