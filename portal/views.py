from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

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
