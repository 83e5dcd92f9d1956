from django.conf import settings


def portal(request):
    user = getattr(request, "user", None)
    return {
        "is_admin": bool(user is not None and user.is_authenticated and user.is_admin),
        "public_url": settings.PORTAL_PUBLIC_URL or request.build_absolute_uri("/").rstrip("/"),
    }
