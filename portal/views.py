"""Pages of the ground floor: the health check and the dashboard the apps compose."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from . import dashboard as home
from . import health


@never_cache
@require_GET
def healthz(request):
    """Liveness for load balancers and `portal up`: 200 when the database and broker answer."""
    database, broker = health.check_database(), health.check_broker()
    ok = database["ok"] and broker["ok"]
    return JsonResponse(
        {"status": "ok" if ok else "error", "database": database, "broker": broker}, status=200 if ok else 503
    )


@login_required
def dashboard(request):
    """Admins: counts and recent changes. Developers: their keys and the models they may use."""
    return render(request, "portal/dashboard.html", home.context_for(request.user))
