"""Upstream channels, public models and the per-channel routes between them."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from portal.fields import EncryptedTextField
from portal.models import TimeStampedModel

from .choices import ChannelKind, ChannelStatus

MODEL_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$",
    "Use letters, digits and . _ : / @ + - (up to 128 characters, starting with a letter or digit).",
)


class Channel(TimeStampedModel):
    """An upstream endpoint the gateway can route to.

    `status` moves unknown → healthy ↔ degraded ↔ down (health checks, 3/6; gateway failures feed
    the same window). `credentials_rejected` is set on a 401/403 and stays until an admin edits the
    channel. A launch job (4/6) creates the channel for a deployment it started.
    """

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=ChannelKind, default=ChannelKind.OPENAI)
    base_url = models.CharField(max_length=500, help_text="Stored canonical, ending in /v1.")
    api_key = EncryptedTextField(blank=True, help_text="Sent upstream by the gateway; write-only.")
    host = models.ForeignKey("hosts.Host", null=True, blank=True, on_delete=models.SET_NULL, related_name="channels")
    priority = models.IntegerField(
        default=0,
        validators=[MinValueValidator(-1000), MaxValueValidator(1000)],
        help_text="Higher is tried first.",
    )
    weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(1000)],
        help_text="Share of traffic among channels of the same priority.",
    )
    enabled = models.BooleanField(default=True)
    speaks_messages = models.BooleanField(
        default=False, help_text="Serves the Anthropic Messages API natively (always true for kind anthropic)."
    )
    speaks_responses = models.BooleanField(
        default=False, help_text="Serves the OpenAI Responses API natively (requests are passed through)."
    )
    status = models.CharField(max_length=24, choices=ChannelStatus, default=ChannelStatus.UNKNOWN)
    status_message = models.CharField(max_length=300, blank=True)  # what an operator should do next
    status_changed = models.DateTimeField(null=True, blank=True)
    last_checked = models.DateTimeField(null=True, blank=True)
    notes = models.TextField(blank=True, max_length=5000)

    class Meta:
        ordering = ["-priority", "name"]

    def __str__(self) -> str:
        return self.name


class Model(TimeStampedModel):
    """The public model name developers use (e.g. `qwen3-32b`), served by one or more channels."""

    name = models.CharField(max_length=128, unique=True, validators=[MODEL_NAME_VALIDATOR])
    display_name = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True, max_length=2000)
    enabled = models.BooleanField(default=True)
    channels = models.ManyToManyField(Channel, through="ModelRoute", related_name="models")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def effective_limits(self) -> tuple[int | None, int | None]:
        """(context window, max output tokens) a client can rely on: the smallest over the
        enabled routes, preferring each route's discovered context window."""
        ctx, out = [], []
        for route in self.routes.filter(enabled=True, channel__enabled=True):
            if route.effective_context_window:
                ctx.append(route.effective_context_window)
            if route.max_output_tokens:
                out.append(route.max_output_tokens)
        return (min(ctx) if ctx else None, min(out) if out else None)


class ModelRoute(TimeStampedModel):
    """One channel serving one public model, with the upstream's own id and limits."""

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="routes")
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="routes")
    upstream_model = models.CharField(
        max_length=256, blank=True, help_text="The id the upstream knows; blank means the public name."
    )
    context_window = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(256), MaxValueValidator(10_000_000)],
    )
    max_output_tokens = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(10_000_000)],
    )
    discovered_context_window = models.PositiveIntegerField(null=True, blank=True)
    discovered_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["model__name", "-channel__priority"]
        constraints = [models.UniqueConstraint(fields=["model", "channel"], name="modelroute_unique_model_channel")]

    def __str__(self) -> str:
        return f"{self.model} → {self.channel}"

    @property
    def upstream_id(self) -> str:
        return self.upstream_model or self.model.name

    @property
    def effective_context_window(self) -> int | None:
        return self.discovered_context_window or self.context_window

    @property
    def context_mismatch(self) -> bool:
        return bool(
            self.discovered_context_window
            and self.context_window
            and self.discovered_context_window != self.context_window
        )
