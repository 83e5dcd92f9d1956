"""The language a page is written in (issue 30): the signed-in person's saved preference, else what
Django's LocaleMiddleware chose (the `django_language` cookie the header's switcher sets, else the
browser's Accept-Language, else English)."""

from __future__ import annotations

from django.conf import settings
from django.utils import translation


def supported(code: str | None) -> str:
    """`code` if it names one of LANGUAGES (case-insensitive), else ""."""
    code = (code or "").lower()
    return code if code in dict(settings.LANGUAGES) else ""


def language_of(user) -> str:
    """A user's saved language, "" when they chose none (or for anyone not signed in)."""
    return supported(getattr(user, "language", "")) if getattr(user, "is_authenticated", False) else ""


class UserLanguageMiddleware:
    """After AuthenticationMiddleware: a saved preference wins over the cookie and Accept-Language,
    so the choice follows the person to another browser and survives logging out and in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        code = language_of(user)
        if not code and getattr(user, "is_authenticated", False):
            # A choice made with the switcher before logging in becomes the person's preference.
            code = supported(request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME))
            if code:
                user.language = code
                user.save(update_fields=["language"])
        if code and code != getattr(request, "LANGUAGE_CODE", None):
            translation.activate(code)
            request.LANGUAGE_CODE = code
        response = self.get_response(request)
        if code and request.COOKIES.get(settings.LANGUAGE_COOKIE_NAME) != code:
            set_language_cookie(response, code)  # so the login page after logging out speaks it too
        return response


def set_language_cookie(response, code: str) -> None:
    response.set_cookie(
        settings.LANGUAGE_COOKIE_NAME,
        code,
        max_age=settings.LANGUAGE_COOKIE_AGE,
        samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        secure=settings.SESSION_COOKIE_SECURE,
        httponly=True,
    )
