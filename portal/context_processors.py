from django.conf import settings

from .permissions import is_admin


def portal(request):
    user = getattr(request, "user", None)
    return {
        "is_admin": is_admin(user),
        "public_url": settings.PORTAL_PUBLIC_URL or request.build_absolute_uri("/").rstrip("/"),
    }
