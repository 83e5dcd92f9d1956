from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "GPU hosts"

    def ready(self) -> None:
        from portal import audit

        from .models import Host

        audit.register(
            Host, ignore={"status", "status_message", "driver_version", "cuda_version", "seen_host_key_fingerprint"}
        )
