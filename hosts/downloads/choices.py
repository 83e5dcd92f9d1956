from django.db import models
from django.utils.translation import gettext_lazy as _


class DownloadSource(models.TextChoices):
    """Where the weights come from; each has its host tool and its file listing."""

    HUGGINGFACE = "huggingface", _("Hugging Face (or a mirror)")
    MODELSCOPE = "modelscope", _("ModelScope")


class DownloadState(models.TextChoices):
    """queued → checking → [installing →] downloading → verifying → done, or → failed | cancelled.

    The download task (`hosts.downloads.tasks.advance_download`) moves every arrow, one step per run,
    re-scheduling itself while the remote process works; an admin only asks for a job or cancels it.
    A remote process that died (network cut beyond the client's retries, host reboot) is started
    again from `downloading`; the client resumes its `.incomplete` files.
    """

    QUEUED = "queued", _("Queued")
    CHECKING = "checking", _("Checking files and disk space")
    INSTALLING = "installing", _("Installing the download tool")
    DOWNLOADING = "downloading", _("Downloading")
    VERIFYING = "verifying", _("Verifying checksums")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


ACTIVE_DOWNLOAD_STATES = (
    DownloadState.QUEUED,
    DownloadState.CHECKING,
    DownloadState.INSTALLING,
    DownloadState.DOWNLOADING,
    DownloadState.VERIFYING,
)


# Each hub's default branch: what "main" (the form's default) means for that source.
DEFAULT_REVISION: dict[str, str] = {DownloadSource.HUGGINGFACE: "main", DownloadSource.MODELSCOPE: "master"}


def default_revision(source: str, revision: str) -> str:
    """`revision`, or the source's default branch when it is empty or the generic "main" (ModelScope
    repositories live on "master", so "main" there would not be found)."""
    revision = (revision or "").strip()
    default = DEFAULT_REVISION.get(source, "main")
    return default if not revision or revision == "main" else revision
