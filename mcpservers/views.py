"""MCP server pages (admin): servers, their tools and grants, and the calls made through the gateway."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, render
from django.urls import reverse, reverse_lazy
from django.utils.translation import gettext as _
from django.views import View
from django.views.generic import CreateView, DeleteView, DetailView, UpdateView

from portal.permissions import AdminRequiredMixin
from portal.ui import FilteredListView, InvalidFormStatusMixin, SafeDeleteMixin, done

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


class ServerCreateView(AdminRequiredMixin, InvalidFormStatusMixin, CreateView):
    model = McpServer
    form_class = McpServerForm
    template_name = "mcpservers/server_form.html"

    def get_success_url(self) -> str:
        server = self.object
        assert server is not None
        messages.success(self.request, _("MCP server %(name)s added.") % {"name": server.name})
        return reverse("mcp_server_detail", args=[server.pk])


class ServerUpdateView(AdminRequiredMixin, InvalidFormStatusMixin, UpdateView):
    model = McpServer
    form_class = McpServerForm
    template_name = "mcpservers/server_form.html"

    def get_success_url(self) -> str:
        messages.success(self.request, _("MCP server %(name)s saved.") % {"name": self.object.name})
        return reverse("mcp_server_detail", args=[self.object.pk])


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


class ServerDeleteView(AdminRequiredMixin, SafeDeleteMixin, DeleteView):
    model = McpServer
    template_name = "mcpservers/server_confirm_delete.html"
    success_url = reverse_lazy("mcp_server_list")


class ServerCheckView(AdminRequiredMixin, View):
    """Run the health check now (lists the tools), and say what it found."""

    def post(self, request, pk: int):
        server = check_server(get_object_or_404(McpServer, pk=pk).pk)
        assert server is not None
        if server.status == "healthy":
            text = _("%(name)s answered with %(count)d tools.") % {"name": server.name, "count": server.tools.count()}
            return done(request, text, "mcp_server_detail", pk)
        text = _("%(name)s did not answer: %(error)s") % {"name": server.name, "error": server.last_error}
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
        return done(request, _("Grant added."), "mcp_server_detail", pk)


class GrantDeleteView(AdminRequiredMixin, View):
    template_name = "mcpservers/grant_confirm_delete.html"

    def get(self, request, pk: int, grant_pk: int):
        grant = get_object_or_404(McpGrant, pk=grant_pk, server_id=pk)
        return render(request, self.template_name, {"grant": grant})

    def post(self, request, pk: int, grant_pk: int):
        get_object_or_404(McpGrant, pk=grant_pk, server_id=pk).delete()
        return done(request, _("Grant removed."), "mcp_server_detail", pk)


class CallListView(AdminRequiredMixin, FilteredListView):
    model = McpCall
    filterset_class = McpCallFilterSet
    template_name = "mcpservers/call_list.html"
    sort_fields = {"created": "created", "server": "server_slug", "tool": "tool", "duration": "duration_ms"}

    def get_base_queryset(self):
        return McpCall.objects.select_related("key", "user")
