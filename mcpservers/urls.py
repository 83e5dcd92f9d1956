from django.urls import path

from . import views

urlpatterns = [
    path("mcp-servers/", views.ServerListView.as_view(), name="mcp_server_list"),
    path("mcp-servers/new/", views.ServerEditView.as_view(), name="mcp_server_create"),
    path("mcp-servers/calls/", views.CallListView.as_view(), name="mcp_call_list"),
    path("mcp-servers/<int:pk>/", views.ServerDetailView.as_view(), name="mcp_server_detail"),
    path("mcp-servers/<int:pk>/edit/", views.ServerEditView.as_view(), name="mcp_server_edit"),
    path("mcp-servers/<int:pk>/delete/", views.ServerDeleteView.as_view(), name="mcp_server_delete"),
    path("mcp-servers/<int:pk>/check/", views.ServerCheckView.as_view(), name="mcp_server_check"),
    path(
        "mcp-servers/<int:pk>/tools/<int:tool_pk>/toggle/",
        views.ToolToggleView.as_view(),
        name="mcp_server_tool_toggle",
    ),
    path("mcp-servers/<int:pk>/grants/", views.GrantCreateView.as_view(), name="mcp_server_grant_create"),
    path(
        "mcp-servers/<int:pk>/grants/<int:grant_pk>/delete/",
        views.GrantDeleteView.as_view(),
        name="mcp_server_grant_delete",
    ),
]
