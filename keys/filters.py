"""FilterSets for developer keys, shared by the REST API and the HTML lists."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from accounts.models import User
from channels.models import Model
from portal.filters import FilterSet, search

from .models import Key, KeyQuerySet

KEY_STATES = [("active", _("Active")), ("expired", _("Expired")), ("revoked", _("Revoked"))]


def owners(request: Any) -> QuerySet[User]:
    """The owner choices a caller may filter by: everyone for admins, a team lead's team, else
    oneself (the choices are listed on the page: they must not name other people)."""
    user = getattr(request, "user", None)
    if user is None:
        return User.objects.all()  # no request: the schema
    if not user.is_authenticated:
        return User.objects.none()
    if user.is_admin:
        return User.objects.all()
    mine = Q(pk=user.pk)
    if user.led_team_id is not None:
        mine |= Q(team_id=user.led_team_id)
    return User.objects.filter(mine).order_by("username")


class KeyFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    owner = django_filters.ModelChoiceFilter(label=_("Owner"), queryset=owners)
    state = django_filters.ChoiceFilter(choices=KEY_STATES, method="filter_state", label=_("State"))
    model = django_filters.ModelChoiceFilter(
        field_name="allowed_models", queryset=Model.objects.all(), to_field_name="name", label=_("Allows model")
    )
    client = django_filters.CharFilter(
        label=_("Client"),
    )

    class Meta:
        model = Key
        fields = ["q", "owner", "state", "model", "client", "name"]

    def filter_q(self, queryset: QuerySet[Key], name: str, value: str) -> QuerySet[Key]:
        return search(queryset, ("name", "prefix", "last_four", "owner__username", "client"), value)

    def filter_state(self, queryset: KeyQuerySet, name: str, value: str) -> KeyQuerySet:
        if value == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if value == "expired":
            return queryset.not_revoked().filter(expires_at__lte=timezone.now())
        if value == "active":
            return queryset.unexpired()
        return queryset
