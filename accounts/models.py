"""People: users and their roles, personal API tokens, and the audit log of who changed what."""

from __future__ import annotations

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.utils import timezone

from portal.choices import AuditAction
from portal.models import Limits, ShownOnceQuerySet, ShownOnceSecret

from .choices import Role


class User(AbstractUser, Limits):
    """A person. `role` decides what they see; the limits apply to all their keys together and are
    also the ceiling for any single key they own."""

    role = models.CharField(max_length=16, choices=Role, default=Role.DEVELOPER)
    key_defaults = models.JSONField(
        default=dict,
        blank=True,
        help_text='Limits pre-filled on this user\'s new keys, e.g. {"tokens_per_day": 200000}.',
    )
    allowed_models = models.ManyToManyField(
        "channels.Model",
        blank=True,
        related_name="+",
        help_text="Models this user may use; empty: every enabled model.",
    )
    # The single sign-on identity (the IdP's `sub`): set at the first OIDC login, how later ones find
    # this user again whatever their username or e-mail became.
    oidc_subject = models.CharField(max_length=255, unique=True, null=True, blank=True, editable=False)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"

    def __str__(self) -> str:
        return self.username

    def save(self, *args, **kwargs):
        if self.is_superuser:
            self.role = Role.ADMIN
        super().save(*args, **kwargs)

    @property
    def is_admin(self) -> bool:
        return self.is_active and (self.role == Role.ADMIN or self.is_superuser)


class ApiToken(ShownOnceSecret):
    """A personal token for scripts using the REST API. Shown once; stored as a keyed hash."""

    PREFIX = "gpt-"
    HASH_FIELD = "token_hash"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)

    objects = ShownOnceQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="apitoken_unique_active_name_per_user",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"


class AuditLog(models.Model):
    """Who changed what, when. Secrets appear as "changed", never with their value."""

    created = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=16, choices=AuditAction)
    object_type = models.CharField(max_length=50, db_index=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True)
    message = models.CharField(max_length=300, blank=True)
    ip_address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'} {self.action} {self.object_type} {self.object_repr}"
