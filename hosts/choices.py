from django.db import models


class HostStatus(models.TextChoices):
    """unknown → online | unreachable | no_driver | host_key_changed; moved by the inventory task (4/6)."""

    UNKNOWN = "unknown", "Unknown"
    ONLINE = "online", "Online"
    UNREACHABLE = "unreachable", "Unreachable"
    NO_DRIVER = "no_driver", "No GPU driver"
    HOST_KEY_CHANGED = "host_key_changed", "Host key changed"
    AUTH_FAILED = "auth_failed", "Authentication failed"
