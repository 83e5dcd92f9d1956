"""Weight downloads: one job per (host, source, repo, revision, pattern) while it is active."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.choices import labelled
from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel

from .choices import ACTIVE_DOWNLOAD_STATES, DEFAULT_REVISION, DownloadSource, DownloadState

REPO_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$",
    _("A repository id such as Qwen/Qwen3-8B or unsloth/Qwen3-8B-GGUF."),
)
REVISION_VALIDATOR = RegexValidator(
    r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$",
    _("A branch, tag or commit, e.g. main."),
)
PATTERN_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9*?\[\]._/-]+( [A-Za-z0-9*?\[\]._/-]+)*$",
    _("File patterns separated by spaces, e.g. *Q4_K_M.gguf config.json (empty: the whole repository)."),
)
ENDPOINT_VALIDATOR = RegexValidator(r"^https?://[^\s]+$", _("An http(s) URL, e.g. https://hf-mirror.com."))


class ModelDownloadQuerySet(models.QuerySet[Any]):
    def active(self) -> ModelDownloadQuerySet:
        """Jobs not finished yet; at most one per (host, source, repo, revision, pattern)."""
        return self.filter(state__in=ACTIVE_DOWNLOAD_STATES)

    def done(self) -> ModelDownloadQuerySet:
        return self.filter(state=DownloadState.DONE)


class ModelDownload(TimeStampedModel):
    """Weights downloaded onto a host by the host's own `hf`/`huggingface-cli` or `modelscope` tool.

    `files` is the expected file list with sizes, checksums and bytes on disk at the last poll
    (`done`); `done_bytes`, `rate_bps` and `eta_seconds` are written by every poll, so any page or
    API client sees the same progress. `token` is encrypted at rest (as channel API keys are),
    handed to the host through a 0600 file read from SSH stdin (never argv); a download that
    failed or was cancelled clears it, one that finished keeps it so the same files can be
    downloaded onto another host (models on demand) until an admin forgets it. `lease_until`
    keeps two workers from stepping the same job; `polled` tells the sweep a job's chain of
    re-scheduled steps broke (its worker died) so it queues the next step again.
    """

    objects = ModelDownloadQuerySet.as_manager()

    host = models.ForeignKey("hosts.Host", on_delete=models.CASCADE, related_name="downloads")
    source = models.CharField(max_length=16, choices=DownloadSource, default=DownloadSource.HUGGINGFACE)
    repo_id = models.CharField(max_length=200, validators=[REPO_VALIDATOR])
    revision = models.CharField(max_length=200, default="main", validators=[REVISION_VALIDATOR])
    pattern = models.CharField(max_length=300, blank=True, validators=[PATTERN_VALIDATOR])
    endpoint = models.CharField(
        max_length=300,
        blank=True,
        validators=[ENDPOINT_VALIDATOR],
        help_text=_("Mirror (HF_ENDPOINT) for this download; empty: the portal-wide setting."),
    )
    token = EncryptedTextField(blank=True)
    install_tool = models.BooleanField(
        default=False, help_text=_("Install the download tool into a venv on the host when it is missing.")
    )
    state = models.CharField(max_length=16, choices=DownloadState, default=DownloadState.QUEUED)
    message = models.CharField(max_length=1000, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    transitions = models.JSONField(default=list, blank=True)
    commit = models.CharField(max_length=64, blank=True, help_text=_("The revision resolved to a commit."))
    local_path = models.CharField(max_length=500, blank=True, help_text=_("The download folder on the host."))
    tool = models.CharField(max_length=500, blank=True)
    files = models.JSONField(default=list, blank=True)
    total_bytes = models.BigIntegerField(default=0)
    done_bytes = models.BigIntegerField(default=0)
    rate_bps = models.BigIntegerField(null=True, blank=True)
    eta_seconds = models.PositiveIntegerField(null=True, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    restarts = models.PositiveSmallIntegerField(default=0)
    log_tail = models.TextField(blank=True)
    polled = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "source", "repo_id", "revision", "pattern"],
                condition=models.Q(state__in=ACTIVE_DOWNLOAD_STATES),
                name="modeldownload_one_active_per_target",
            )
        ]

    def __str__(self) -> str:
        what = f"{self.repo_id}@{self.revision}"
        return f"{what} [{self.pattern}] → {self.host}" if self.pattern else f"{what} → {self.host}"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_DOWNLOAD_STATES

    @property
    def history(self) -> list[dict[str, Any]]:
        """`transitions` with each state's label (`labelled`)."""
        return labelled(self.transitions, DownloadState)

    @property
    def percent(self) -> int:
        return min(100, int(self.done_bytes * 100 / self.total_bytes)) if self.total_bytes else 0

    @property
    def folder_name(self) -> str:
        """The job's folder under the host's download folder: one per repo and revision."""
        name = self.repo_id.replace("/", "--")
        if self.source == DownloadSource.MODELSCOPE:
            name = f"modelscope--{name}"
        if self.revision != DEFAULT_REVISION.get(self.source, "main"):
            name += "@" + self.revision.replace("/", "-")
        return name

    @property
    def remote_dir(self) -> str:
        """The job's own folder (logs, pid files), relative to the SSH user's home."""
        return f".gateway-portal/downloads/{self.pk}"

    @property
    def file_names(self) -> set[str]:
        return {f["name"] for f in self.files}

    @property
    def gguf_files(self) -> list[str]:
        return [f["name"] for f in self.files if f["name"].endswith(".gguf")]
