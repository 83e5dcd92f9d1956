"""Single sign-on with OpenID Connect (mozilla-django-oidc), configured by PORTAL_OIDC_* settings.

`discovery.py` finds the provider's endpoints, `backends.py` checks the ID token and refuses
password logins where they are off, `services.py` turns verified claims into a user and a role
(created at the first login, the role mapped again at every one), `views.py` starts the redirect
and takes the provider's answer.
"""

from django.conf import settings


def enabled() -> bool:
    return bool(settings.OIDC_RP_CLIENT_ID)


def provider_name() -> str:
    return str(settings.PORTAL_OIDC_NAME)
