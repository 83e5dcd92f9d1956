"""MCP server pages (admin): servers, their tools and grants, and the calls made through the gateway."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View
from django.views.generic import DetailView

from portal.permissions import AdminRequiredMixin
from portal.ui import FilteredListView, ObjectDeleteView, ObjectFormView, done

from .filters import McpCallFilterSet, McpServerFilterSet
from .forms import McpGrantForm, McpServerForm
from .models import McpCall, McpGrant, McpServer, McpTool
from .services import check_server, set_tool_enabled


class ServerListView(AdminRequiredMixin, FilteredListView):
    model = McpServer
    filterset_class = McpServerFilterSet
    template_name = "mcpservers/server_list.html"
    sort_fields = {"name": "name", "slug": "slug", "status": "status", "last_checked": "last_checked"}

    def get_base_queryset(self):
        return McpServer.objects.prefetch_related("tools")


class ServerEditView(AdminRequiredMixin, ObjectFormView):
    """Add (no pk) or edit a server; the secrets are write-only (blank keeps them)."""

    form_class = McpServerForm
    queryset = McpServer.objects.all()
    template_name = "mcpservers/server_form.html"
    success, cancel = "mcp_server_detail", "mcp_server_list"
    title = (_("Add MCP server"), _("Edit MCP server"))
    button = (_("Add MCP server"), _("Save"))
    saved = (_("MCP server %(name)s added."), _("MCP server %(name)s saved."))


class ServerDetailView(AdminRequiredMixin, DetailView):
    model = McpServer
    template_name = "mcpservers/server_detail.html"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        server = self.object
        context["tools"] = server.tools.all()
        context["grants"] = server.grants.select_related("tool", "key__owner", "user", "team")
        context["grant_form"] = kwargs.get("grant_form") or McpGrantForm(server=server)
        context["recent_calls"] = server.calls.select_related("key", "user")[:10]
        return context


class ServerDeleteView(AdminRequiredMixin, ObjectDeleteView):
    queryset = McpServer.objects.all()
    cancel, success = "mcp_server_detail", "mcp_server_list"
    title = _("Delete MCP server")
    question = _("Delete the MCP server %(name)s?")
    detail = _(
        "Its tools and grants are deleted too; developers' clients get a 404 at its gateway path. "
        "Past call records are kept."
    )
    button = _("Delete MCP server")
    deleted = _("MCP server %(name)s deleted.")


class ServerCheckView(AdminRequiredMixin, View):
    """Run the health check now (lists the tools), and say what it found."""

    def post(self, request, pk: int):
        server = check_server(get_object_or_404(McpServer, pk=pk).pk)
        assert server is not None
        if server.status == "healthy":
            text = _("%(name)s answered with %(count)d tools.") % {"name": server.name, "count": server.tools.count()}
            return done(request, text, "mcp_server_detail", pk)
        text = _("%(name)s did not answer: %(error)s") % {"name": server.name, "error": server.status_message_text}
        return done(request, text, "mcp_server_detail", pk, level=messages.ERROR)


class ToolToggleView(AdminRequiredMixin, View):
    def post(self, request, pk: int, tool_pk: int):
        tool = get_object_or_404(McpTool, pk=tool_pk, server_id=pk)
        set_tool_enabled(tool, not tool.enabled)
        text = (_("Tool %(name)s enabled.") if tool.enabled else _("Tool %(name)s disabled.")) % {"name": tool.name}
        return done(request, text, "mcp_server_detail", pk)


class GrantCreateView(AdminRequiredMixin, View):
    def post(self, request, pk: int):
        server = get_object_or_404(McpServer, pk=pk)
        form = McpGrantForm(request.POST, server=server)
        if not form.is_valid():
            view = ServerDetailView(request=request, kwargs={"pk": pk}, object=server)
            return render(request, view.template_name, view.get_context_data(grant_form=form), status=400)
        McpGrant.objects.create(server=server, **form.cleaned_data)
        return done(request, str(_("Grant added.")), "mcp_server_detail", pk)


class GrantDeleteView(AdminRequiredMixin, ObjectDeleteView):
    title = _("Remove grant")
    question = _("Remove the grant “%(name)s”?")
    detail = _("Calls it allowed are refused from the next request on.")
    button = _("Remove grant")
    deleted = _("Grant removed.")

    def get_object(self) -> McpGrant:
        return get_object_or_404(McpGrant, pk=self.kwargs["grant_pk"], server_id=self.kwargs["pk"])

    def names(self, obj: McpGrant) -> dict[str, Any]:
        return {"name": obj.describe()}

    def get_cancel_url(self, obj: McpGrant) -> str:
        return reverse("mcp_server_detail", args=[obj.server_id])

    def act(self, obj: McpGrant) -> HttpResponse:
        self.success = self.get_cancel_url(obj)
        return super().act(obj)


class CallListView(AdminRequiredMixin, FilteredListView):
    model = McpCall
    filterset_class = McpCallFilterSet
    template_name = "mcpservers/call_list.html"
    sort_fields = {"created": "created", "server": "server_slug", "tool": "tool", "duration": "duration_ms"}

    def get_base_queryset(self):
        return McpCall.objects.select_related("key", "user")
