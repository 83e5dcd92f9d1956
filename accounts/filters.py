"""FilterSets for users, API tokens and the audit log, shared by the REST API and the HTML lists."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from portal.choices import AuditAction
from portal.filters import BooleanFilter, FilterSet, UTCDateTimeFilter, search
from portal.models import ShownOnceQuerySet

from .choices import Role
from .models import ApiToken, AuditLog, Team, User, object_type_names


class UserFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    role = django_filters.ChoiceFilter(label=_("Role"), choices=Role.choices)
    is_active = BooleanFilter(label=_("Active"))
    team = django_filters.ModelChoiceFilter(label=_("Team"), queryset=Team.objects.all())

    class Meta:
        model = User
        fields = ["q", "role", "is_active", "team", "username"]

    def filter_q(self, queryset: QuerySet[User], name: str, value: str) -> QuerySet[User]:
        return search(queryset, ("username", "email", "first_name", "last_name"), value)


class TeamFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))

    class Meta:
        model = Team
        fields = ["q", "name"]

    def filter_q(self, queryset: QuerySet[Team], name: str, value: str) -> QuerySet[Team]:
        return search(queryset, ("name", "description"), value)


class ApiTokenFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    active = BooleanFilter(method="filter_active", label=_("Active"))

    class Meta:
        model = ApiToken
        fields = ["q", "active"]

    def filter_q(self, queryset: QuerySet[ApiToken], name: str, value: str) -> QuerySet[ApiToken]:
        return search(queryset, ("name", "prefix"), value)

    def filter_active(self, queryset: ShownOnceQuerySet[ApiToken], name: str, value: bool) -> QuerySet[ApiToken]:
        active = queryset.active()
        return active if value else queryset.exclude(pk__in=active.values("pk"))


class AuditLogFilterSet(FilterSet):
    q = django_filters.CharFilter(method="filter_q", label=_("Search"))
    actor = django_filters.ModelChoiceFilter(label=_("Who"), queryset=User.objects.all())
    actor_name = django_filters.CharFilter(label=_("Who"), lookup_expr="iexact")
    object_type = django_filters.CharFilter(label=_("Object"), lookup_expr="iexact")
    object_id = django_filters.CharFilter(
        label=_("Object id"),
    )
    action = django_filters.ChoiceFilter(label=_("Action"), choices=AuditAction.choices)
    created_after = UTCDateTimeFilter(field_name="created", lookup_expr="gte", label=_("From"))
    created_before = UTCDateTimeFilter(field_name="created", lookup_expr="lt", label=_("Until"))
    ranges = (("created_after", "created_before"),)

    class Meta:
        model = AuditLog
        fields = ["q", "actor", "actor_name", "object_type", "object_id", "action", "created_after", "created_before"]

    def filter_q(self, queryset: QuerySet[AuditLog], name: str, value: str) -> QuerySet[AuditLog]:
        # What a row shows: who, the action and the kind of object by their names in the reader's
        # language, the object's name and the message.
        return search(
            queryset,
            ("actor_name", "object_type", "object_repr"),
            value,
            messages=("message",),
            labels={"action": dict(AuditAction.choices), "object_type": object_type_names()},
        )
