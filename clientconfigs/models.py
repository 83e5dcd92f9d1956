"""Download tokens for the one-line installers, and what each developer last downloaded."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import TimeStampedModel


class KeyMode(models.TextChoices):
    MINT = "mint", _("Mint a new key for this client")
    PLACEHOLDER = "placeholder", _("Placeholder (use a key I already have)")


class DownloadToken(TimeStampedModel):
    """A short-lived, single-use token the installer trades for one bundle.

    Only its keyed hash is stored. In mint mode the key is issued when the token is redeemed, so the
    key's plaintext only ever exists in that one response. `used_at` is set by a conditional update,
    so two installers racing with the same token cannot both win.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="download_tokens")
    client = models.CharField(max_length=32)
    key_mode = models.CharField(max_length=16, choices=KeyMode, default=KeyMode.PLACEHOLDER)
    key_name = models.CharField(max_length=100, blank=True, help_text=_("Name of the key minted on redemption."))
    key = models.ForeignKey(
        "keys.Key",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("Placeholder mode: the key whose models to list. Mint mode: the key minted on redemption."),
    )
    default_model = models.CharField(max_length=128, blank=True)
    replace_key = models.BooleanField(
        default=True, help_text=_("Mint mode: the new key replaces the one minted before for this client and machine.")
    )
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.client} for {self.user} ({self.state})"

    @property
    def state(self) -> str:
        if self.used_at:
            return "used"
        if self.expires_at <= timezone.now():
            return "expired"
        return "unused"


class ConfigDownload(models.Model):
    """One download of a client's files: the version stamp tells the page when it went stale."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="config_downloads")
    client = models.CharField(max_length=32)
    version = models.CharField(max_length=32)
    key = models.ForeignKey("keys.Key", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    via = models.CharField(max_length=16, default="page", help_text=_("page, api or installer"))

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["user", "client", "created"], name="ccdownload_user_client")]

    def __str__(self) -> str:
        return f"{self.user} {self.client} {self.version}"
