from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class McpServersConfig(AppConfig):
    name = "mcpservers"
    label = "mcpservers"
    verbose_name = _("MCP servers")

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from portal import audit

        from .tasks import ensure_schedule

        post_migrate.connect(ensure_schedule, sender=self, dispatch_uid="mcpservers-default-schedule")

        from .models import McpGrant, McpServer, McpTool

        audit.register(McpServer, ignore={"status", "status_message", "last_checked", "last_error", "last_duration_ms"})
        audit.register(McpTool, ignore={"description", "input_schema", "last_seen"})
        audit.register(McpGrant)
