"""FilterSets for deployments and launch jobs (the API's lists)."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from portal.filters import FilterSet

from ..choices import Backend, DeploymentStatus, JobState
from ..models import Deployment, LaunchJob


class DeploymentFilterSet(FilterSet):
    status = django_filters.MultipleChoiceFilter(label=_("Status"), choices=DeploymentStatus.choices)
    backend = django_filters.ChoiceFilter(label=_("Backend"), choices=Backend.choices)

    class Meta:
        model = Deployment
        fields = ["host", "status", "backend"]


class LaunchJobFilterSet(FilterSet):
    state = django_filters.MultipleChoiceFilter(label=_("State"), choices=JobState.choices)

    class Meta:
        model = LaunchJob
        fields = ["deployment", "state", "action"]
