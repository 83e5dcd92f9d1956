"""FilterSets for channels and models, shared by the REST API and the HTML lists."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from portal.filters import FilterSet, search

from .choices import ChannelKind, ChannelStatus
from .models import Channel, Model


class ChannelFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    kind = django_filters.MultipleChoiceFilter(label=_("Kind"), choices=ChannelKind.choices)
    status = django_filters.MultipleChoiceFilter(label=_("Status"), choices=ChannelStatus.choices)
    model = django_filters.CharFilter(field_name="routes__model__name", distinct=True, label=_("Serves model"))

    class Meta:
        model = Channel
        fields = ["q", "name", "kind", "status", "enabled", "model"]

    def filter_q(self, queryset, name, value):
        return search(queryset, ("name", "base_url", "notes"), value)


class ModelFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    channel = django_filters.ModelChoiceFilter(
        field_name="routes__channel", queryset=Channel.objects.all(), distinct=True, label=_("Served by channel")
    )

    class Meta:
        model = Model
        fields = ["q", "name", "enabled", "channel"]

    def filter_q(self, queryset, name, value):
        return search(queryset, ("name", "display_name", "description"), value)
