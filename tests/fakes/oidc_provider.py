"""A real OpenID Connect provider for tests: django-oauth-toolkit in OIDC mode, in its own process.

Nothing is faked on the wire: discovery, the authorization endpoint behind a login form, the
token endpoint (client secret + PKCE), RS256 ID tokens signed with a fresh RSA key, JWKS and
userinfo are django-oauth-toolkit's own views. It is a separate Django project (its own settings,
SQLite file and cookie names, so it shares nothing with the portal under test) that adds a
`groups` claim (the user's Django groups) and `preferred_username`/`email` to the ID token and
userinfo.

In a test:

    with OidcProvider(redirect_uri=live_server.url + "/oidc/callback/") as idp:
        idp.add_user("carol", "pw", email="carol@example.com", groups=["portal-admins"])
        idp.issuer                       # http://127.0.0.1:PORT/o (discovery under it)
        idp.client_id, idp.client_secret
        idp.set_groups("carol", [])      # the IdP admin removes a group

`python -m tests.fakes.oidc_provider --port … --data … --redirect-uri …` runs it directly; the
test hooks under /_fake/ answer only to loopback and are how the test plays the IdP's admin.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.fakes import processes

REPO_ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "gateway-portal"

LOGIN_TEMPLATE = """<!doctype html><html><head><title>Test IdP login</title></head><body>
<h1>Test IdP</h1>
<form method="post">{% csrf_token %}{{ form.as_p }}
<input type="hidden" name="next" value="{{ next }}"><button type="submit" id="idp-login">Sign in</button></form>
</body></html>"""
BASE_TEMPLATE = "<!doctype html><html><body>{% block content %}{% endblock %}</body></html>"


# --- the provider process ------------------------------------------------------------------------


def _configure(port: int, data: Path) -> None:
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        SECRET_KEY="test-idp-" + os.urandom(8).hex(),
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "oauth2_provider",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(data / "idp.sqlite3")}},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        # Cookies do not separate ports: the portal on the same address uses sessionid/csrftoken.
        SESSION_COOKIE_NAME="idp_sessionid",
        CSRF_COOKIE_NAME="idp_csrftoken",
        LOGIN_URL="/accounts/login/",
        USE_TZ=True,
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],  # test users only
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": False,
                "OPTIONS": {
                    "context_processors": ["django.template.context_processors.request"],
                    "loaders": [
                        (
                            "django.template.loaders.locmem.Loader",
                            {"registration/login.html": LOGIN_TEMPLATE, "base.html": BASE_TEMPLATE},
                        ),
                        "django.template.loaders.app_directories.Loader",
                    ],
                },
            }
        ],
        OAUTH2_PROVIDER={
            "OIDC_ENABLED": True,
            "OIDC_RSA_PRIVATE_KEY": (data / "rsa.pem").read_text(),
            "OIDC_ISS_ENDPOINT": f"http://127.0.0.1:{port}/o",
            "PKCE_REQUIRED": True,
            "SCOPES": {
                "openid": "OpenID Connect",
                "email": "E-mail address",
                "profile": "Profile",
                "groups": "Group membership",
            },
            "OAUTH2_VALIDATOR_CLASS": f"{__name__}.Validator",
        },
    )
    django.setup()


def _validator_class():
    from oauth2_provider.oauth2_validators import OAuth2Validator

    class Validator(OAuth2Validator):
        oidc_claim_scope = None  # every claim below, whatever the scope (the IdP's policy here)

        def get_additional_claims(self, request):
            user = request.user
            return {
                "preferred_username": user.username,
                "email": user.email,
                "email_verified": True,
                "name": user.get_full_name() or user.username,
                "groups": sorted(user.groups.values_list("name", flat=True)),
            }

    return Validator


def __getattr__(name: str):
    # OAUTH2_VALIDATOR_CLASS is imported by dotted path once Django is set up.
    if name == "Validator":
        return _validator_class()
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)


def _loopback_only(view):
    from django.http import HttpResponseForbidden

    def wrapped(request, *args, **kwargs):
        if request.META.get("REMOTE_ADDR") not in ("127.0.0.1", "::1"):
            return HttpResponseForbidden()
        return view(request, *args, **kwargs)

    return wrapped


def _urlpatterns():
    from django.contrib.auth import views as auth_views
    from django.contrib.auth.models import Group, User
    from django.http import HttpResponseNotAllowed, JsonResponse
    from django.urls import include, path
    from django.views.decorators.csrf import csrf_exempt

    @csrf_exempt
    @_loopback_only
    def user(request, username):
        """PUT {password, email, groups}: create or update a user and set their groups exactly."""
        if request.method != "PUT":
            return HttpResponseNotAllowed(["PUT"])
        body = json.loads(request.body)
        person, _ = User.objects.get_or_create(username=username)
        if "password" in body:
            person.set_password(body["password"])
        if "email" in body:
            person.email = body["email"]
        person.save()
        if "groups" in body:
            person.groups.set([Group.objects.get_or_create(name=g)[0] for g in body["groups"]])
        return JsonResponse({"sub": str(person.pk)})

    return [
        path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
        path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
        path("_fake/users/<str:username>", user),
        path("_fake/ready", _loopback_only(lambda request: JsonResponse({"ok": True}))),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Test OpenID Connect provider (django-oauth-toolkit)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data", required=True, help="folder with rsa.pem; the SQLite file goes there")
    p.add_argument("--redirect-uri", required=True, help="the relying party's callback URL")
    p.add_argument("--client-secret", required=True)
    args = p.parse_args(argv)
    data = Path(args.data)
    _configure(args.port, data)

    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    Application.objects.update_or_create(
        client_id=CLIENT_ID,
        defaults={
            "name": "Gateway Portal",
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "client_secret": args.client_secret,
            "redirect_uris": args.redirect_uri,
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,  # the team's own app: no consent screen
        },
    )

    import uvicorn
    from django.core.asgi import get_asgi_application

    uvicorn.run(get_asgi_application(), host="127.0.0.1", port=args.port, log_level="warning", lifespan="off")
    return 0


# --- the test's handle ----------------------------------------------------------------------------


class OidcProvider:
    """Starts the provider above as a subprocess on 127.0.0.1 and plays its admin."""

    def __init__(self, *, redirect_uri: str, startup_timeout: float = 60.0) -> None:
        from tests.services import free_port

        self.port = free_port()
        self.redirect_uri = redirect_uri
        self.client_id = CLIENT_ID
        self.client_secret = os.urandom(16).hex()
        self.startup_timeout = startup_timeout
        self._data = tempfile.TemporaryDirectory(prefix="test-idp-")
        self._log = tempfile.TemporaryFile()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.root_url}/o"

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def start(self) -> OidcProvider:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        Path(self._data.name, "rsa.pem").write_bytes(pem)
        argv = [sys.executable, "-m", "tests.fakes.oidc_provider", "--port", str(self.port)]
        argv += ["--data", self._data.name, "--redirect-uri", self.redirect_uri, "--client-secret", self.client_secret]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"OIDC provider exited with {self.process.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(f"{self.root_url}/_fake/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)  # migrate, then uvicorn binds: no readiness event to await
        self.stop()
        raise RuntimeError(f"OIDC provider not ready after {self.startup_timeout}s:\n{self.log()[-3000:]}")

    def add_user(self, username: str, password: str, *, email: str, groups: list[str]) -> str:
        """Create a user at the IdP; returns their `sub`."""
        return self._put(username, {"password": password, "email": email, "groups": groups})

    def set_groups(self, username: str, groups: list[str]) -> None:
        self._put(username, {"groups": groups})

    def _put(self, username: str, body: dict) -> str:
        response = httpx.put(f"{self.root_url}/_fake/users/{username}", json=body, timeout=10)
        response.raise_for_status()
        return response.json()["sub"]

    def stop(self) -> None:
        processes.stop(self.process)

    def __enter__(self) -> OidcProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
        self._data.cleanup()


if __name__ == "__main__":
    sys.exit(main())
