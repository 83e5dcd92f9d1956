"""GPU hosts reached over SSH and their GPUs."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel

from .choices import HostStatus

USERNAME_VALIDATOR = RegexValidator(r"^[a-z_][a-z0-9_.-]{0,31}$", "A POSIX user name (lowercase, up to 32).")
ADDRESS_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$|^[0-9a-fA-F:]{2,45}$",
    "A host name or an IPv4/IPv6 address.",
)


class Host(TimeStampedModel):
    """A GPU machine. The private key is encrypted at rest and decrypted only in the worker.

    `host_key_fingerprint` is empty until the admin confirms the key seen on first contact (4/6);
    afterwards a different key is refused.
    """

    name = models.CharField(max_length=100, unique=True)
    address = models.CharField(max_length=253, validators=[ADDRESS_VALIDATOR])
    ssh_port = models.PositiveIntegerField(default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)])
    username = models.CharField(max_length=32, validators=[USERNAME_VALIDATOR])
    private_key = EncryptedTextField(blank=True, help_text="OpenSSH private key; write-only.")
    host_key_fingerprint = models.CharField(max_length=100, blank=True)
    seen_host_key_fingerprint = models.CharField(
        max_length=100, blank=True, help_text="Key offered on the last contact, awaiting confirmation."
    )
    labels = models.JSONField(default=list, blank=True)
    notes = models.TextField(blank=True, max_length=5000)
    status = models.CharField(max_length=20, choices=HostStatus, default=HostStatus.UNKNOWN)
    status_message = models.CharField(max_length=300, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    driver_version = models.CharField(max_length=50, blank=True)
    cuda_version = models.CharField(max_length=50, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GPU(TimeStampedModel):
    """One GPU as the last inventory saw it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=100, blank=True)
    name = models.CharField(max_length=100)
    memory_total_mib = models.PositiveIntegerField(null=True, blank=True)
    memory_used_mib = models.PositiveIntegerField(null=True, blank=True)
    utilization_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    temperature_c = models.SmallIntegerField(null=True, blank=True)
    processes = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["host__name", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_unique_host_index")]

    def __str__(self) -> str:
        return f"{self.host}#{self.index} {self.name}"

    @property
    def memory_free_mib(self) -> int | None:
        if self.memory_total_mib is None or self.memory_used_mib is None:
            return None
        return max(self.memory_total_mib - self.memory_used_mib, 0)
