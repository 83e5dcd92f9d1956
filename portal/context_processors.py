from .permissions import is_admin
from .public import public_url


def portal(request):
    user = getattr(request, "user", None)
    return {
        "is_admin": is_admin(user),
        "public_url": public_url(request),
    }
