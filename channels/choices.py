from django.db import models
from django.utils.translation import gettext_lazy as _


class ChannelKind(models.TextChoices):
    OPENAI = "openai", _("OpenAI-compatible (cloud)")
    VLLM = "vllm", _("vLLM")
    LLAMACPP = "llamacpp", _("llama.cpp (llama-server)")
    SGLANG = "sglang", _("SGLang")
    ANTHROPIC = "anthropic", _("Anthropic")


class Locality(models.TextChoices):
    """Where a channel's server runs. Requests of local-only keys and aliases never go to an
    external one (the gateway drops those routes before failover can reach them)."""

    LOCAL = "local", _("Local (our own machines)")
    EXTERNAL = "external", _("External (a cloud provider)")


class ChannelStatus(models.TextChoices):
    """unknown → healthy ↔ degraded ↔ down; credentials_rejected is terminal until an admin acts.

    The health task and the gateway's passive checks move the arrows; an admin edit of the
    base URL or key resets to unknown.
    """

    UNKNOWN = "unknown", _("Unknown")
    HEALTHY = "healthy", _("Healthy")
    DEGRADED = "degraded", _("Degraded")
    DOWN = "down", _("Down")
    CREDENTIALS_REJECTED = "credentials_rejected", _("Credentials rejected")


class ProbeSource(models.TextChoices):
    ACTIVE = "active", _("Probe")
    PASSIVE = "passive", _("Gateway traffic")


class AlertKind(models.TextChoices):
    WEBHOOK = "webhook", _("Webhook (JSON, Slack-compatible)")
    EMAIL = "email", _("E-mail")


class BalancePolicy(models.TextChoices):
    """How the gateway spreads a model's requests over its equal-priority channels (`gateway.balance`)."""

    WEIGHTED = "weighted", _("Weighted random")
    AFFINITY = "affinity", _("Session affinity (prompt caches)")
    LEAST_BUSY = "least_busy", _("Least busy")


class ModelKind(models.TextChoices):
    """What a public model does: a chat model answers Chat, Completions, Responses and Messages; an
    embedding model answers Embeddings only. Client configs offer each where it belongs (Continue's
    `embed` role; no chat model list)."""

    CHAT = "chat", _("Chat model")
    EMBEDDING = "embedding", _("Embedding model")


class UnpricedPolicy(models.TextChoices):
    """What a key with a budget meets on a route without a price (never free): the portal's
    default (PORTAL_UNPRICED_ROUTES), a refusal, or the fallback price."""

    DEFAULT = "", _("Portal default")
    REFUSE = "refuse", _("Refuse budgeted keys")
    FALLBACK = "fallback", _("Charge the fallback price")


class PriceSource(models.TextChoices):
    """Where a route's price came from."""

    MANUAL = "manual", _("Set by hand")
    CATALOGUE = "catalogue", _("Price catalogue")
    GPU_HOURS = "gpu_hours", _("GPU-hour cost ÷ measured tokens per hour")
