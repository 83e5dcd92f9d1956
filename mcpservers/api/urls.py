"""The MCP servers API router."""

from rest_framework.routers import SimpleRouter

from . import views

router = SimpleRouter()
router.register("mcp-servers", views.McpServerViewSet, basename="mcp-server")
router.register("mcp-tools", views.McpToolViewSet, basename="mcp-tool")
router.register("mcp-grants", views.McpGrantViewSet, basename="mcp-grant")
router.register("mcp-calls", views.McpCallViewSet, basename="mcp-call")

urlpatterns = router.urls
