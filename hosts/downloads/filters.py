from portal.filters import FilterSet

from .models import ModelDownload


class DownloadFilterSet(FilterSet):
    class Meta:
        model = ModelDownload
        fields = ["host", "state", "source", "repo_id"]
