from django.apps import AppConfig


class HostsConfig(AppConfig):
    name = "hosts"
    verbose_name = "GPU hosts"

    def ready(self) -> None:
        from portal import audit

        from .models import Deployment, Host

        audit.register(
            Host, ignore={"status", "status_message", "driver_version", "cuda_version", "seen_host_key_fingerprint"}
        )
        # Status, PID and context window are moved by launch jobs; the jobs themselves are the record.
        audit.register(Deployment, ignore={"status", "status_message", "pid", "context_window"})
