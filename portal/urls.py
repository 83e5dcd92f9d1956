from csp.decorators import csp_update
from django.contrib.auth.views import redirect_to_login
from django.urls import include, path
from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerSplitView

from . import views
from .api.schema_view import SchemaView

# The API docs pages run vendored Swagger UI / ReDoc, which style their widgets with inline styles
# (ReDoc also runs its search in a blob: worker); scripts stay 'self' only (the split Swagger view
# serves its start-up script as a file).
_docs_csp = csp_update({"style-src": ["'unsafe-inline'"], "worker-src": ["'self'", "blob:"]})


def docs_csp(view):
    """The docs pages are pages: signed out, the browser goes to the login page (and back after it)
    instead of a bare 401; the schema itself stays an API answer (401)."""
    wrapped = _docs_csp(view)

    def docs_page(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        return wrapped(request, *args, **kwargs)

    return docs_page


urlpatterns = [
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", docs_csp(SpectacularSwaggerSplitView.as_view(url_name="api-schema")), name="api-docs"),
    path("api/redoc/", docs_csp(SpectacularRedocView.as_view(url_name="api-schema")), name="api-redoc"),
    path("api/", include("portal.api.urls")),
    path("", views.dashboard, name="dashboard"),
    path("", include("accounts.urls")),
    path("", include("hosts.urls")),
    path("", include("channels.urls")),
    path("", include("keys.urls")),
    path("", include("mcpservers.urls")),
    path("", include("clientconfigs.urls")),
]

handler404 = "portal.views.page_not_found"
handler500 = "portal.views.server_error"
