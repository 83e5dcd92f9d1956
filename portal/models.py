"""Abstract bases every app's models share: timestamps, the five gateway limits, shown-once secrets."""

from __future__ import annotations

import functools
import hmac
import operator
import secrets as pysecrets
from collections.abc import Sequence
from typing import ClassVar, Self, TypeVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .secrets import keyed_hash

# A limit of 10^12 tokens is already absurd; anything above is a typo, not a plan.
LIMIT_VALIDATORS = [MinValueValidator(1), MaxValueValidator(10**12)]


class TimeStampedModel(models.Model):
    """`created` and `updated`, set by the database layer, on every model that has a history."""

    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def unique_error_message(self, model_class: type[models.Model], unique_check: Sequence[str]) -> ValidationError:
        """A value already taken, said in the reader's language. Django's own message names the
        model and the field by their verbose names, untranslated ("Channel with this Name already
        exists"), and an alias by "Model"."""
        if len(unique_check) != 1:
            return super().unique_error_message(model_class, unique_check)
        value = getattr(self, unique_check[0])
        return ValidationError(
            _("“%(value)s” is already taken; choose another."), code="unique", params={"value": value}
        )


def exactly_one_set(*fields: str) -> models.Q:
    """A CheckConstraint condition: exactly one of the nullable `fields` is set (a row for a key, a
    user or a team)."""
    terms = [
        functools.reduce(operator.and_, (models.Q(**{f"{f}__isnull": f != chosen}) for f in fields))
        for chosen in fields
    ]
    return functools.reduce(operator.or_, terms)


def limit_field(help_text: str):
    return models.BigIntegerField(null=True, blank=True, validators=LIMIT_VALIDATORS, help_text=help_text)


class Limits(models.Model):
    """Rate limits and quotas; blank means unlimited. Shared by keys and users."""

    LIMIT_FIELDS = (
        "requests_per_minute",
        "tokens_per_minute",
        "tokens_per_day",
        "tokens_per_month",
        "max_parallel_requests",
    )

    requests_per_minute = limit_field("Requests per minute (blank: unlimited)")
    tokens_per_minute = limit_field("Tokens per minute (blank: unlimited)")
    tokens_per_day = limit_field("Tokens per UTC day (blank: unlimited)")
    tokens_per_month = limit_field("Tokens per calendar month, UTC (blank: unlimited)")
    max_parallel_requests = limit_field("Requests in flight at once (blank: unlimited)")

    class Meta:
        abstract = True

    def limits(self) -> dict[str, int | None]:
        return {f: getattr(self, f) for f in self.LIMIT_FIELDS}


_M = TypeVar("_M", bound=models.Model)


class ShownOnceQuerySet(models.QuerySet[_M]):
    def not_revoked(self) -> Self:
        """Still holding their name: usable, expired or in a rotation's grace period."""
        return self.filter(revoked_at__isnull=True)

    def unexpired(self) -> Self:
        """Not revoked and not past `expires_at`."""
        return self.not_revoked().filter(models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=timezone.now()))

    def active(self) -> Self:
        """Usable now; a subclass adds its owner's rule (the QuerySet form of `is_active`)."""
        return self.unexpired()


class ShownOnceSecret(TimeStampedModel):
    """A credential shown once and stored only as a keyed hash (developer keys, API tokens).

    Subclasses name their public `PREFIX` and the field holding the hash (`HASH_FIELD`); lists show
    `prefix…last_four`. Revoked, never deleted, because records point at it.
    """

    PREFIX: ClassVar[str]
    HASH_FIELD: ClassVar[str]
    MAX_PRESENTED = 200

    prefix = models.CharField(max_length=16, help_text=_("First characters, shown in lists."))
    last_four = models.CharField(max_length=4)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def masked(self) -> str:
        return f"{self.prefix}…{self.last_four}"

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and not self.is_expired

    @classmethod
    def mint(cls) -> tuple[dict[str, str], str]:
        """A new plaintext (prefix + 256 random bits) and the fields that store it: prefix, last four
        and the keyed hash. The plaintext itself is never stored."""
        plaintext = cls.PREFIX + pysecrets.token_urlsafe(32)
        stored = {
            "prefix": plaintext[: len(cls.PREFIX) + 6],
            "last_four": plaintext[-4:],
            cls.HASH_FIELD: keyed_hash(plaintext),
        }
        return stored, plaintext

    @classmethod
    def find(cls, presented: str, queryset: models.QuerySet | None = None) -> Self | None:
        """The row whose hash matches `presented` (active or not), or None; constant-time compare."""
        value = (presented or "").strip()
        if not value.startswith(cls.PREFIX) or len(value) > cls.MAX_PRESENTED:
            return None
        digest = keyed_hash(value)
        rows = queryset if queryset is not None else cls._default_manager.all()
        found = rows.filter(**{cls.HASH_FIELD: digest}).first()
        if found is None or not hmac.compare_digest(getattr(found, cls.HASH_FIELD), digest):
            return None
        return found

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at", "updated"])
