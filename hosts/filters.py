"""FilterSets for hosts, shared by the REST API and the HTML list."""

from __future__ import annotations

import json

import django_filters
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from portal.filters import FilterSet, search

from .choices import HostStatus
from .models import GPU, Host


class HostFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    status = django_filters.MultipleChoiceFilter(label=_("Status"), choices=HostStatus.choices)
    label = django_filters.CharFilter(method="filter_label", label=_("Label"))

    class Meta:
        model = Host
        fields = ["q", "name", "address", "status", "label"]

    def filter_q(self, queryset: QuerySet[Host], name: str, value: str) -> QuerySet[Host]:
        return search(queryset, ("name", "address", "username", "notes"), value)

    def filter_label(self, queryset: QuerySet[Host], name: str, value: str) -> QuerySet[Host]:
        # labels is a JSON list of strings; JSON `contains` is PostgreSQL-only, so match the quoted
        # element in the JSON text, which works on SQLite too.
        return queryset.filter(labels__icontains=json.dumps(value)) if value else queryset


class GPUFilterSet(FilterSet):
    class Meta:
        model = GPU
        fields = ["host", "index", "name"]
