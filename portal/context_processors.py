from .permissions import is_admin, is_admin_or_team_lead
from .public import public_url


def portal(request):
    user = getattr(request, "user", None)
    return {
        "is_admin": is_admin(user),
        "is_team_lead": not is_admin(user) and is_admin_or_team_lead(user),
        "public_url": public_url(request),
    }
