"""The two ends of the redirect: to the provider ("Sign in with …" on the login page is a plain
link, so the Content-Security-Policy's form-action 'self' never meets the provider's origin) and
back (the callback), where a failure of any kind is the login page with a message, never a 500."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponseBase
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.public import public_url

from . import discovery, enabled, provider_name

logger = logging.getLogger(__name__)


def callback_url(request: HttpRequest) -> str:
    return public_url(request) + reverse("oidc_authentication_callback")


class OidcLoginView(OIDCAuthenticationRequestView):  # type: ignore[misc]  # mozilla-django-oidc ships no types
    """Redirect to the provider's authorization endpoint (state, nonce and PKCE in the session)."""

    def __init__(self, **kwargs: Any) -> None:
        View.__init__(self, **kwargs)  # the endpoint is known only after discovery, in get()

    def get(self, request: HttpRequest) -> HttpResponseBase:
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            op = discovery.provider()
        except discovery.DiscoveryError as exc:
            logger.warning("single sign-on: discovery failed: %s", exc)
            messages.error(
                request,
                _("%(provider)s cannot be reached right now. Try again in a minute.") % {"provider": provider_name()},
            )
            return redirect(settings.LOGIN_URL)
        self.OIDC_OP_AUTH_ENDPOINT = op.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)  # type: ignore[no-any-return]  # untyped base

    def get_extra_params(self, request: HttpRequest) -> dict[str, Any]:
        return {**super().get_extra_params(request), "redirect_uri": callback_url(request)}


class OidcCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]  # mozilla-django-oidc ships no types
    """The provider's answer: log the person in, or back to the login page saying why not."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        if not enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            return super().get(request)  # type: ignore[no-any-return]  # untyped base
        except SuspiciousOperation as exc:  # a state this browser did not start (an old tab, a replay)
            logger.warning("single sign-on callback refused: %s", exc)
            return self.login_failure()

    def login_failure(self) -> HttpResponseBase:
        reason = getattr(self.request, "sso_refusal", None)
        user = getattr(self, "user", None)
        if not reason and user is not None and not user.is_active:
            reason = _("Your account is deactivated. Ask an admin.")
        messages.error(
            self.request,
            reason
            or _("Signing in with %(provider)s did not work. Try again; if it keeps failing, ask an admin.")
            % {"provider": provider_name()},
        )
        return redirect(settings.LOGIN_URL)
