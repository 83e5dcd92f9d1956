import django_filters

from .models import ModelDownload


class DownloadFilterSet(django_filters.FilterSet):
    class Meta:
        model = ModelDownload
        fields = ["host", "state", "source", "repo_id"]
