"""Abstract bases every app's models share: timestamps and the five gateway limits."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

# A limit of 10^12 tokens is already absurd; anything above is a typo, not a plan.
LIMIT_VALIDATORS = [MinValueValidator(1), MaxValueValidator(10**12)]


class TimeStampedModel(models.Model):
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


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
