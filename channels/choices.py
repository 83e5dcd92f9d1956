from django.db import models
from django.utils.translation import gettext_lazy as _


class ChannelKind(models.TextChoices):
    OPENAI = "openai", "OpenAI-compatible (cloud)"
    VLLM = "vllm", "vLLM"
    LLAMACPP = "llamacpp", "llama.cpp (llama-server)"
    SGLANG = "sglang", "SGLang"
    ANTHROPIC = "anthropic", "Anthropic"


class Locality(models.TextChoices):
    """Where a channel's server runs. Requests of local-only keys and aliases never go to an
    external one (the gateway drops those routes before failover can reach them)."""

    LOCAL = "local", "Local (our own machines)"
    EXTERNAL = "external", "External (a cloud provider)"


class ChannelStatus(models.TextChoices):
    """unknown → healthy ↔ degraded ↔ down; credentials_rejected is terminal until an admin acts.

    The health task and the gateway's passive checks move the arrows; an admin edit of the
    base URL or key resets to unknown.
    """

    UNKNOWN = "unknown", "Unknown"
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    DOWN = "down", "Down"
    CREDENTIALS_REJECTED = "credentials_rejected", "Credentials rejected"


class ProbeSource(models.TextChoices):
    ACTIVE = "active", "Probe"
    PASSIVE = "passive", "Gateway traffic"


class AlertKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON, Slack-compatible)"
    EMAIL = "email", "E-mail"


class BalancePolicy(models.TextChoices):
    """How the gateway spreads a model's requests over its equal-priority channels (`gateway.balance`)."""

    WEIGHTED = "weighted", "Weighted random"
    AFFINITY = "affinity", "Session affinity (prompt caches)"
    LEAST_BUSY = "least_busy", "Least busy"


class PriceSource(models.TextChoices):
    """Where a route's price came from."""

    MANUAL = "manual", _("Set by hand")
    CATALOGUE = "catalogue", _("Price catalogue")
    GPU_HOURS = "gpu_hours", _("GPU-hour cost ÷ measured tokens per hour")
