"""Pages of the ground floor: the dashboard the apps compose, and the error page for a database outage."""

from __future__ import annotations

import logging
import sys

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils.translation import gettext_lazy as _
from django.views import defaults
from rest_framework.exceptions import APIException, NotFound

from . import dashboard as home
from .logfilters import is_database_outage

logger = logging.getLogger(__name__)


@login_required
def dashboard(request):
    """Admins: counts and recent changes. Developers: their keys and the models they may use."""
    return render(request, "portal/dashboard.html", home.context_for(request.user))


def page_not_found(request, exception):
    """handler404: under /api/ a script gets JSON, as from the API's own 404s (an unknown action or
    resource path was Django's HTML page); elsewhere the site's page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": str(NotFound.default_detail), "code": NotFound.default_code}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """handler500: a database that does not answer, or takes no writes for now (a failover), is a
    503 (a small page, or JSON under /api/) that needs nothing from the database; anything else is
    a 500: Django's page, or under /api/ the API's `{"detail", "code"}` (a script got the HTML
    page). Django has logged the traceback."""
    exc = sys.exc_info()[1]
    if not is_database_outage(exc):
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": str(APIException.default_detail), "code": "server_error"}, status=500)
        return defaults.server_error(request)
    logger.error("database unavailable while serving %s: %s", request.path, exc.__class__.__name__)
    message = _("The portal cannot reach its database right now. Please try again in a minute.")
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": str(message), "code": "database_unavailable"}, status=503)
    else:
        response = HttpResponse(render_to_string("portal/503.html", {"message": message}), status=503)
    response["Retry-After"] = "30"
    response["Cache-Control"] = "no-store"
    return response
