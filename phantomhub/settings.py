"""PhantomHub settings: one module, every knob read from PHANTOMHUB_* environment variables.

See docs/deployment.md for the full list. A bad value raises ConfigError at start-up.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from phantomhub.env import (
    ConfigError,
    cache_from_url,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_origins,
    env_rate,
    env_str,
)
from phantomhub.periodic import beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("PHANTOMHUB_VAR_DIR", str(BASE_DIR / "var")) or "var")

DEBUG = env_bool("PHANTOMHUB_DEBUG", False)
_secret = env_str("PHANTOMHUB_SECRET_KEY")
_secret_file = Path(env_str("PHANTOMHUB_SECRET_KEY_FILE", str(VAR_DIR / "secret.key")) or "")
if _secret is None and _secret_file.is_file():  # `make run` writes one under var/ on first start
    _secret = _secret_file.read_text().strip() or None
if _secret is None:
    if not DEBUG:
        raise ConfigError(
            "PHANTOMHUB_SECRET_KEY (or a PHANTOMHUB_SECRET_KEY_FILE) is required when "
            "PHANTOMHUB_DEBUG is off (set PHANTOMHUB_DEBUG=1 for local use)"
        )
    _secret = "phantomhub-insecure-debug-key-never-use-in-production"
elif len(_secret) < 32 and not DEBUG:
    raise ConfigError("PHANTOMHUB_SECRET_KEY must be at least 32 characters")
SECRET_KEY = _secret

ALLOWED_HOSTS = env_list("PHANTOMHUB_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_origins("PHANTOMHUB_CSRF_TRUSTED_ORIGINS")
PORT = env_int("PHANTOMHUB_PORT", 8000, minimum=1, maximum=65535)

# HTTPS. The defaults suit plain http on 127.0.0.1 (`make run`, compose); docs/deployment.md gives
# the production environment, with which `manage.py check --deploy` has nothing to say.
SESSION_COOKIE_SECURE = env_bool("PHANTOMHUB_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env_bool("PHANTOMHUB_SSL_REDIRECT", False)
# The liveness check answers on plain http too: container and load-balancer probes talk to the
# server directly, not through the TLS proxy (deploy/healthcheck.py).
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
SECURE_HSTS_SECONDS = env_int("PHANTOMHUB_HSTS_SECONDS", 0, minimum=0, maximum=2 * 365 * 86_400)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("PHANTOMHUB_HSTS_PRELOAD", False)
if (SECURE_HSTS_INCLUDE_SUBDOMAINS or SECURE_HSTS_PRELOAD) and not SECURE_HSTS_SECONDS:
    raise ConfigError("PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS and PHANTOMHUB_HSTS_PRELOAD need PHANTOMHUB_HSTS_SECONDS > 0")
# The browsers' preload list takes only max-age >= 1 year with includeSubDomains (hstspreload.org).
if SECURE_HSTS_PRELOAD and not (SECURE_HSTS_INCLUDE_SUBDOMAINS and SECURE_HSTS_SECONDS >= 365 * 86_400):
    raise ConfigError(
        "PHANTOMHUB_HSTS_PRELOAD needs PHANTOMHUB_HSTS_INCLUDE_SUBDOMAINS=1 and PHANTOMHUB_HSTS_SECONDS >= 31536000"
    )
# Forwarded headers are believed only from these proxies: gunicorn (deploy/gunicorn.py) reads the
# same variable, sets the scheme from X-Forwarded-Proto only for them and drops X-Forwarded-* /
# Forwarded from anyone else, so Django may read X-Forwarded-Proto once proxies are configured.
TRUSTED_PROXIES = env_networks("PHANTOMHUB_TRUSTED_PROXIES")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if TRUSTED_PROXIES else None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "phantomhub.accounts",
    "phantomhub.telemetry",
    "phantomhub.pricing",
    "phantomhub.waste",
    "phantomhub.portal",
    "phantomhub.fleet",
    "phantomhub.planning",
    "phantomhub.alerts",
    "phantomhub.reports",
    "phantomhub.demo",
    "axes",
    "auditlog",
    "phantomhub.audit",  # after auditlog: its admin replaces auditlog's
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "phantomhub.csp.ContentSecurityPolicyMiddleware",  # before WhiteNoise: static answers get it too
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "phantomhub.telemetry.parsers.QueryStringNulMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "phantomhub.audit.middleware.AuditContextMiddleware",  # who and from where, for the audit log
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out sign-in into a 429
]

# Content-Security-Policy on every response (phantomhub/csp.py, docs/deployment.md); report-only
# sends it as Content-Security-Policy-Report-Only, to try a change without refusing anything.
CSP_REPORT_ONLY = env_bool("PHANTOMHUB_CSP_REPORT_ONLY", False)

ROOT_URLCONF = "phantomhub.urls"
WSGI_APPLICATION = "phantomhub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = env_str("PHANTOMHUB_DATABASE_URL")
if DATABASE_URL is None:  # the embedded default: one SQLite file under var/
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'phantomhub.sqlite3'}"
DATABASES = {"default": database_from_url("PHANTOMHUB_DATABASE_URL", DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis when configured (shared by every web process: the ingest rate limit counts there), else
# each process's local memory (the embedded default is one machine).
REDIS_URL = env_str("PHANTOMHUB_REDIS_URL")
CACHES = cache_from_url("PHANTOMHUB_REDIS_URL", REDIS_URL)

# Sign-in lockout (django-axes; phantomhub/accounts/signin.py): after
# PHANTOMHUB_SIGN_IN_FAILURE_LIMIT wrong passwords for one username from one client address, that
# pair is refused with 429 + Retry-After for PHANTOMHUB_SIGN_IN_LOCKOUT_S after its last failure,
# before any password is hashed; portal and admin sign-ins alike. Counting the pair (not the
# username alone) keeps anyone from locking another person out from elsewhere.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "phantomhub.accounts.signin.AddressSignInLimitBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PHANTOMHUB_SIGN_IN_FAILURE_LIMIT", 10, minimum=1, maximum=10_000)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("PHANTOMHUB_SIGN_IN_LOCKOUT_S", 900, minimum=1, maximum=7 * 86_400))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # so Retry-After holds: retrying does not extend it
AXES_LOCKOUT_CALLABLE = "phantomhub.accounts.signin.lockout_response"
# The client's address, from X-Forwarded-For when the connection is a PHANTOMHUB_TRUSTED_PROXIES one.
AXES_CLIENT_IP_CALLABLE = "phantomhub.accounts.signin.client_address"
AXES_DISABLE_ACCESS_LOG = True  # no row per successful sign-in; failures are still recorded
AXES_VERBOSE = False
# One password tried over many usernames never locks a (username, address) pair: an address with
# PHANTOMHUB_SIGN_IN_ADDRESS_FAILURE_LIMIT failed sign-ins (any usernames) within the lockout time
# gets 429 + Retry-After for all of them (phantomhub/accounts/signin.py): 30 guesses per address
# per 15 minutes instead of unlimited; a team behind one NAT address needs 30 wrong passwords
# within 15 minutes to be stopped (each person's own limit stays 10).
SIGN_IN_ADDRESS_FAILURE_LIMIT = env_int("PHANTOMHUB_SIGN_IN_ADDRESS_FAILURE_LIMIT", 30, minimum=1, maximum=100_000)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# The built web UI (frontend/dist): WhiteNoise serves its files at the site root (/assets/...),
# and phantomhub.portal.views.spa answers index.html for client-side routes.
FRONTEND_DIST = BASE_DIR / "frontend" / "dist"
WHITENOISE_ROOT = FRONTEND_DIST if FRONTEND_DIST.is_dir() else None
# Vite names every built asset by its content hash (/assets/index-B0qe8fWg.js): cache those for a
# year, immutable. The build writes .gz and .br beside them, which WhiteNoise serves to browsers that
# accept the encoding. The entry page is answered by phantomhub.portal.views.spa with no-cache (and
# by WhiteNoise at /index.html with the same), so a deploy is picked up at the next load.
WHITENOISE_IMMUTABLE_FILE_TEST = r"^/assets/.+-[A-Za-z0-9_-]{8,}\.[a-z0-9]+$"


def _whitenoise_headers(headers: Any, path: str, url: str) -> None:
    if url.endswith(".html"):
        headers["Cache-Control"] = "no-cache"


WHITENOISE_ADD_HEADERS_FUNCTION = _whitenoise_headers
# Django's own static files (admin, API docs): compressed copies written by collectstatic.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
LOGIN_URL = "/login"
CSRF_FAILURE_VIEW = "phantomhub.errors.csrf_failure"  # the API's error shape under /api/

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "phantomhub.accounts.auth.ProjectTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # Token scopes in one place: personal tokens read only, project tokens reach their runs only.
    "DEFAULT_PERMISSION_CLASSES": ["phantomhub.accounts.permissions.TokenScopes"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["phantomhub.telemetry.parsers.CappedJSONParser"],
    "EXCEPTION_HANDLER": "phantomhub.errors.api_exception_handler",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "phantomhub.errors.LenientNegotiation",  # a download is no 406
    "DEFAULT_SCHEMA_CLASS": "phantomhub.schema.ErrorResponsesAutoSchema",  # documents every error an operation answers
    "UNAUTHENTICATED_USER": None,
    # Counts only the ingest POSTs, per token, at INGEST_RATE (phantomhub/accounts/throttles.py).
    "DEFAULT_THROTTLE_CLASSES": ["phantomhub.accounts.throttles.IngestRateThrottle"],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "PhantomHub API",
    "DESCRIPTION": (
        "Ingest step-level training telemetry and read back GPU waste analysis. "
        "Authenticate with `Authorization: Bearer phk_...`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Serve Swagger UI from our own static files: self-hosted installs may have no internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {"PricingTierEnum": "phantomhub.telemetry.models.PricingTier"},
}

# Ingest limits. A request body above MAX_BODY_BYTES is refused with 413 before it is read in
# full; a gzip body is inflated at most to MAX_INFLATED_BYTES (a zip bomb gets 413, not an OOM).
MAX_BODY_BYTES = env_int("PHANTOMHUB_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024)
MAX_INFLATED_BYTES = env_int("PHANTOMHUB_MAX_INFLATED_BYTES", 64 * 1024 * 1024, minimum=1024)
MAX_BATCH_ROWS = env_int("PHANTOMHUB_MAX_BATCH_ROWS", 10_000, minimum=1, maximum=1_000_000)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_INFLATED_BYTES
# What one ingest request may cost the web process (docs/api.md "Limits", bench/ingest_limits.py).
# Inflated bytes of one rank's batch (/steps, /samples, /batch: the agent's are at most
# batch_max_bytes, 1 MiB) and of a node batch (/batches: at most 6 MiB of the peers' batches and
# local rank 0's own, ~7 MiB); steps and samples of all ranks of one request (a node batch of
# 7 MiB holds at most ~229,000 of the densest rows the agent sends, 32 bytes each).
MAX_BATCH_INFLATED_BYTES = env_int("PHANTOMHUB_MAX_BATCH_INFLATED_BYTES", 8 * 1024 * 1024, minimum=1024)
MAX_NODE_BATCH_INFLATED_BYTES = env_int("PHANTOMHUB_MAX_NODE_BATCH_INFLATED_BYTES", 16 * 1024 * 1024, minimum=1024)
MAX_REQUEST_ROWS = env_int("PHANTOMHUB_MAX_REQUEST_ROWS", 250_000, minimum=1, maximum=10_000_000)
# A body from someone not signed in (the sign-in's is ~100 bytes), compressed and inflated alike.
MAX_ANONYMOUS_BODY_BYTES = env_int("PHANTOMHUB_MAX_ANONYMOUS_BODY_BYTES", 4096, minimum=512, maximum=1024 * 1024)

# A token's last_used_at is written at most this often, so ingest is not one extra write a batch.
TOKEN_TOUCH_INTERVAL_S = env_int("PHANTOMHUB_TOKEN_TOUCH_INTERVAL_S", 60, minimum=0)
# Token lifecycle (docs/identity.md, "Tokens"): the expiry a new token gets when its creator names
# none (days; 0: none), and how long a rotated token keeps working beside its successor (0: it
# stops at once). A request may ask for up to TOKEN_MAX_* (accounts/services.py).
TOKEN_DEFAULT_EXPIRY_DAYS = env_int("PHANTOMHUB_TOKEN_DEFAULT_EXPIRY_DAYS", 0, minimum=0, maximum=730)
TOKEN_ROTATION_OVERLAP_S = env_int("PHANTOMHUB_TOKEN_ROTATION_OVERLAP_S", 86400, minimum=0, maximum=30 * 86400)

# Ingest requests (run registration, steps, samples, events) per token: (requests, window in
# seconds), or None for no limit. The agent posts about one batch a second per rank, so the
# default leaves a project token room for ~100 ranks at once; a throttled agent waits Retry-After.
INGEST_RATE = env_rate("PHANTOMHUB_INGEST_RATE", "60000/min")
# Rows (steps, samples, events) per token and window beside the requests: 2,000,000 a minute is
# ~33,000 a second, 3x a 1,000-GPU job at 10 steps/s and a sample a second per GPU.
INGEST_ROWS_RATE = env_rate("PHANTOMHUB_INGEST_ROWS_RATE", "2000000/min")

# Celery. Without a broker URL the tasks run in-process (the embedded single-machine default).
CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ALWAYS_EAGER = REDIS_URL is None
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("PHANTOMHUB_TASK_TIME_LIMIT_S", 600, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "phantomhub"
# How long a worker's BRPOP on the Redis queue waits before it asks again. A task still arrives at
# once (the BRPOP returns with it); an idle worker wakes this often, which is most of what it
# costs: 1.25 ms of CPU a second at kombu's 1 s, 0.75 at 5 s, for about a second more on a warm
# shutdown (bench/worker_idle.py; docs/performance.md, "Fleet: server cost per GPU").
BROKER_POLL_S = env_float("PHANTOMHUB_BROKER_POLL_S", 5.0, minimum=0.1, maximum=60)
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": BROKER_POLL_S}
# Celery's Django fixup closes a worker's database connections every this many tasks; so large
# that it never does: phantomhub/celery.py treats them as a request would (CONN_MAX_AGE, errors).
CELERY_DB_REUSE_MAX = 2**62
# Raw telemetry storage (phantomhub/telemetry/retention.py, docs/scaling.md "Storage"): finished
# runs are archived to Parquet under ARCHIVE_URL (a directory or any fsspec URL) once over for
# ARCHIVE_DELAY_S; their raw rows leave the database RAW_RETENTION_DAYS after the run's end
# (per project: telemetry.ProjectRetention). One maintenance pass every STORAGE_INTERVAL_S.
ARCHIVE_URL = env_str("PHANTOMHUB_ARCHIVE_URL", str(VAR_DIR / "archive")) or str(VAR_DIR / "archive")
ARCHIVE_DELAY_S = env_int("PHANTOMHUB_ARCHIVE_DELAY_S", 3600, minimum=0, maximum=30 * 86_400)
RAW_RETENTION_DAYS = env_int("PHANTOMHUB_RAW_RETENTION_DAYS", 30, minimum=1, maximum=36_500)
STORAGE_INTERVAL_S = env_float("PHANTOMHUB_STORAGE_INTERVAL_S", 900.0, minimum=10, maximum=86_400)
# The periodic jobs' intervals; the jobs themselves are listed once, in phantomhub/periodic.py,
# from which both beat's schedule and the embedded sweeper are built.
SWEEP_INTERVAL_S = env_float("PHANTOMHUB_SWEEP_INTERVAL_S", 30.0, minimum=1, maximum=3600)
ALERT_INTERVAL_S = env_float("PHANTOMHUB_ALERT_INTERVAL_S", 20.0, minimum=1, maximum=3600)
FLEET_DERIVE_INTERVAL_S = 30.0
FLEET_PURGE_INTERVAL_S = 3600.0
# The audit log (docs/audit.md): entries kept this many days, then purged by the hourly job.
AUDIT_RETENTION_DAYS = env_int("PHANTOMHUB_AUDIT_RETENTION_DAYS", 400, minimum=30, maximum=36_500)
AUDIT_PURGE_INTERVAL_S = 3600.0
# Scheduled reports (docs/reports.md): how often beat looks for subscriptions past their due time
# (the embedded sweeper looks every 5 s: a pass with nothing due reads one index), and the retries
# of a delivery that failed: base × 3^(attempt−1) seconds, up to REPORT_MAX_ATTEMPTS tries.
REPORTS_INTERVAL_S = env_float("PHANTOMHUB_REPORTS_INTERVAL_S", 60.0, minimum=1, maximum=3600)
REPORT_RETRY_BASE_S = env_float("PHANTOMHUB_REPORT_RETRY_BASE_S", 60.0, minimum=0.01, maximum=3600)
REPORT_MAX_ATTEMPTS = env_int("PHANTOMHUB_REPORT_MAX_ATTEMPTS", 6, minimum=1, maximum=50)
CELERY_BEAT_SCHEDULE = beat_schedule(globals())
# Node collector telemetry (phantomhub/fleet): raw GPU/process samples kept this many days (the
# derived per-day rows stay), and the FOCUS tag whose value names a node's hostname.
FLEET_RAW_DAYS = env_int("PHANTOMHUB_FLEET_RAW_DAYS", 14, minimum=1, maximum=3650)
FLEET_FOCUS_NODE_TAG = env_str("PHANTOMHUB_FOCUS_NODE_TAG", "phantomhub-node")
# What one node may make the server do (docs/fleet.md, "Trust"): a GPU sample older than the
# node's newest accepted one by more than the replay window is refused (72 h: a collector's spool
# replays a weekend's outage); owners (holders) per request, and new owners per node and UTC day.
FLEET_REPLAY_WINDOW_S = env_int("PHANTOMHUB_FLEET_REPLAY_WINDOW_S", 72 * 3600, minimum=60, maximum=3650 * 86_400)
FLEET_MAX_OWNERS_PER_REQUEST = env_int("PHANTOMHUB_FLEET_MAX_OWNERS_PER_REQUEST", 256, minimum=1, maximum=2000)
FLEET_MAX_NEW_OWNERS_PER_NODE_DAY = env_int("PHANTOMHUB_FLEET_MAX_NEW_OWNERS_PER_NODE_DAY", 2000, minimum=1, maximum=1_000_000)

# GET /metrics publishes org-wide spend. With a token it needs `Authorization: Bearer <token>`;
# without one it is open only when debugging or when explicitly opened (PHANTOMHUB_METRICS_PUBLIC=1,
# e.g. behind a proxy that restricts the path), and closed (403) otherwise.
METRICS_TOKEN = env_str("PHANTOMHUB_METRICS_TOKEN")
METRICS_PUBLIC = env_bool("PHANTOMHUB_METRICS_PUBLIC", DEBUG and METRICS_TOKEN is None)
if METRICS_TOKEN is not None and METRICS_PUBLIC:
    raise ConfigError("PHANTOMHUB_METRICS_PUBLIC=1 and PHANTOMHUB_METRICS_TOKEN contradict each other: set one")
if METRICS_TOKEN is not None and len(METRICS_TOKEN) < 16 and not DEBUG:
    raise ConfigError("PHANTOMHUB_METRICS_TOKEN must be at least 16 characters")

TARGET_MFU_DEFAULT = env_float("PHANTOMHUB_TARGET_MFU", 0.5, minimum=0.01, maximum=1.0)

# The organization's currency: the price book's and every figure's (the `_usd` names assume the
# default). A FOCUS invoice billed in another BillingCurrency is refused, never read as this one.
CURRENCY = (env_str("PHANTOMHUB_CURRENCY", "USD") or "USD").upper()
if not (len(CURRENCY) == 3 and CURRENCY.isalpha() and CURRENCY.isascii()):
    raise ConfigError(f"PHANTOMHUB_CURRENCY={CURRENCY!r} is not an ISO 4217 code (USD, EUR, ...)")
# The finance review's PDF (portal/finance_pdf.py): the organization's name in its title, and at
# most FINANCE_PDF_MAX_ROWS team/project rows printed (the largest by spend; the PDF says how many
# it left out, the totals and the CSV keep every row): 2,000 rows render in about a second.
ORG_NAME = env_str("PHANTOMHUB_ORG_NAME", "PhantomHub") or "PhantomHub"
FINANCE_PDF_MAX_ROWS = env_int("PHANTOMHUB_FINANCE_PDF_MAX_ROWS", 2000, minimum=10, maximum=20_000)
# FOCUS invoice import (docs/fleet.md, "The invoice"): a file of more than FOCUS_INLINE_LINES lines
# is imported by a background job (the POST answers 202), not in its request; a body is at most
# FOCUS_MAX_BYTES (the job's CSV waits in the database until it runs).
FOCUS_INLINE_LINES = env_int("PHANTOMHUB_FOCUS_INLINE_LINES", 5000, minimum=1, maximum=1_000_000)
FOCUS_MAX_BYTES = env_int("PHANTOMHUB_FOCUS_MAX_BYTES", 5 * 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024)

# SCIM 2.0 provisioning at /scim/v2/ (phantomhub/accounts/scim/, docs/identity.md "SCIM provisioning"):
# django-scim2's views with adapters over auth.User and the directory tables. A request body above
# SCIM_MAX_BODY_BYTES is refused (413) before it is read.
SCIM_MAX_BODY_BYTES = env_int("PHANTOMHUB_SCIM_MAX_BODY_BYTES", 1024 * 1024, minimum=4096, maximum=64 * 1024 * 1024)
SCIM_SERVICE_PROVIDER = {
    "USER_ADAPTER": "phantomhub.accounts.scim.adapters.ScimUser",
    "GROUP_ADAPTER": "phantomhub.accounts.scim.adapters.ScimGroup",
    "GROUP_MODEL": "phantomhub.accounts.models.DirectoryGroup",
    "USER_FILTER_PARSER": "phantomhub.accounts.scim.filters.UserFilter",
    "GROUP_FILTER_PARSER": "phantomhub.accounts.scim.filters.GroupFilter",
    "SERVICE_PROVIDER_CONFIG_MODEL": "phantomhub.accounts.scim.config.ServiceProviderConfig",
    "BASE_LOCATION_GETTER": "phantomhub.accounts.scim.config.base_location",
    "AUTH_CHECK_MIDDLEWARE": "phantomhub.accounts.scim.access.ScimAccess",
    "AUTHENTICATION_SCHEMES": [
        {
            "type": "oauthbearertoken",
            "name": "SCIM token",
            "description": "A PhantomHub SCIM token (phk_...) sent as 'Authorization: Bearer'; made by an organization admin",
            "primary": True,
        }
    ],
}

# Alerts (docs/alerts.md). Links in alerts point at PUBLIC_URL (what people open the UI by).
PUBLIC_URL = env_str("PHANTOMHUB_PUBLIC_URL", f"http://127.0.0.1:{PORT}") or f"http://127.0.0.1:{PORT}"
# The public-host allowlist: webhook hosts a team's admins may point its rules at (exact names,
# e.g. hooks.slack.com); organization admins may use any host the egress policy lets through.
ALERT_WEBHOOK_HOSTS = [h.lower() for h in env_list("PHANTOMHUB_ALERT_WEBHOOK_HOSTS", [])]
# The whole of one webhook call (connect, TLS, request, answer); phantomhub/egress.py ends it then.
ALERT_WEBHOOK_TIMEOUT_S = env_float("PHANTOMHUB_ALERT_WEBHOOK_TIMEOUT_S", 5.0, minimum=0.1, maximum=60)
# Outbound calls to user-given URLs (phantomhub/egress.py, docs/alerts.md "Egress") reach public
# addresses only; these host names and networks are the only way to an internal one.
EGRESS_ALLOW_HOSTS = [h.lower() for h in env_list("PHANTOMHUB_EGRESS_ALLOW_HOSTS", [])]
EGRESS_ALLOW_NETWORKS = env_networks("PHANTOMHUB_EGRESS_ALLOW_NETWORKS")
if "*" in EGRESS_ALLOW_NETWORKS:
    raise ConfigError("PHANTOMHUB_EGRESS_ALLOW_NETWORKS: name the networks; '*' would open every internal address")
EGRESS_MAX_RESPONSE_BYTES = env_int("PHANTOMHUB_EGRESS_MAX_RESPONSE_BYTES", 65_536, minimum=0, maximum=16 * 2**20)
# A failed delivery is retried after base × 3^(attempt−1) seconds, up to ALERT_MAX_ATTEMPTS tries.
ALERT_RETRY_BASE_S = env_float("PHANTOMHUB_ALERT_RETRY_BASE_S", 10.0, minimum=0.01, maximum=3600)
ALERT_MAX_ATTEMPTS = env_int("PHANTOMHUB_ALERT_MAX_ATTEMPTS", 6, minimum=1, maximum=50)
EMAIL_BACKEND = env_str("PHANTOMHUB_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend") or ""
EMAIL_HOST = env_str("PHANTOMHUB_EMAIL_HOST", "localhost") or "localhost"
EMAIL_PORT = env_int("PHANTOMHUB_EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("PHANTOMHUB_EMAIL_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("PHANTOMHUB_EMAIL_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("PHANTOMHUB_EMAIL_TLS", False)
EMAIL_TIMEOUT = env_int("PHANTOMHUB_EMAIL_TIMEOUT_S", 10, minimum=1, maximum=120)
DEFAULT_FROM_EMAIL = env_str("PHANTOMHUB_EMAIL_FROM", "phantomhub@localhost") or "phantomhub@localhost"

# django-auditlog writes the audit log's entries (phantomhub/audit): into its table, with values
# kept as JSON (numbers stay numbers) and related objects named as people read them.
AUDITLOG_LOGENTRY_MODEL = "audit.AuditEntry"
AUDITLOG_STORE_JSON_CHANGES = True
AUDITLOG_USE_FK_STRING_REPRESENTATION = True
# auditlog's own migrations would create its default table (auditlog_logentry) even though the
# entries live in audit.AuditEntry: it is left unmigrated, so no such table exists.
MIGRATION_MODULES = {"auditlog": None}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("PHANTOMHUB_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# Single sign-on (OIDC, authorization code with PKCE; docs/identity.md "Single sign-on (OIDC)"):
# on when PHANTOMHUB_OIDC_ISSUER is set. The provider's endpoints come from its discovery document
# (<issuer>/.well-known/openid-configuration), fetched once per process (phantomhub/accounts/oidc_provider.py).
OIDC_ISSUER = (env_str("PHANTOMHUB_OIDC_ISSUER") or "").rstrip("/") or None
OIDC_CLIENT_ID = env_str("PHANTOMHUB_OIDC_CLIENT_ID", "") or ""
_oidc_secret_file = env_str("PHANTOMHUB_OIDC_CLIENT_SECRET_FILE")
OIDC_CLIENT_SECRET = env_str("PHANTOMHUB_OIDC_CLIENT_SECRET", "") or ""
if not OIDC_CLIENT_SECRET and _oidc_secret_file:
    if not Path(_oidc_secret_file).is_file():
        raise ConfigError(f"PHANTOMHUB_OIDC_CLIENT_SECRET_FILE={_oidc_secret_file!r} is not a file")
    OIDC_CLIENT_SECRET = Path(_oidc_secret_file).read_text().strip()
OIDC_SCOPES = env_str("PHANTOMHUB_OIDC_SCOPES", "openid email profile groups") or ""
OIDC_USERNAME_CLAIM = env_str("PHANTOMHUB_OIDC_USERNAME_CLAIM", "preferred_username") or "preferred_username"
OIDC_EMAIL_CLAIM = env_str("PHANTOMHUB_OIDC_EMAIL_CLAIM", "email") or "email"
OIDC_GROUPS_CLAIM = env_str("PHANTOMHUB_OIDC_GROUPS_CLAIM", "groups") or "groups"
OIDC_LABEL = env_str("PHANTOMHUB_OIDC_LABEL", "Sign in with single sign-on") or ""
# How often a signed-in person's groups are read again (the refresh-token grant), and the whole
# of one call to the provider.
OIDC_REFRESH_S = env_int("PHANTOMHUB_OIDC_REFRESH_S", 900, minimum=1, maximum=86_400)
OIDC_TIMEOUT_S = env_float("PHANTOMHUB_OIDC_TIMEOUT_S", 10.0, minimum=0.5, maximum=60)
if OIDC_ISSUER is not None:
    if not OIDC_CLIENT_ID or not OIDC_CLIENT_SECRET:
        raise ConfigError("PHANTOMHUB_OIDC_ISSUER needs PHANTOMHUB_OIDC_CLIENT_ID and PHANTOMHUB_OIDC_CLIENT_SECRET (or _FILE)")
    if "openid" not in OIDC_SCOPES.split():
        raise ConfigError(f"PHANTOMHUB_OIDC_SCOPES={OIDC_SCOPES!r} must include openid")
    _issuer = urlparse(OIDC_ISSUER)
    if _issuer.scheme != "https" and not (
        _issuer.scheme == "http" and (DEBUG or _issuer.hostname in ("127.0.0.1", "localhost", "::1"))
    ):
        raise ConfigError(
            f"PHANTOMHUB_OIDC_ISSUER={OIDC_ISSUER!r} must be an https URL "
            "(http only on a loopback address or with PHANTOMHUB_DEBUG=1)"
        )
# mozilla-django-oidc's own settings, read by its start view (phantomhub/accounts/oidc_views.py):
# the endpoints, client and checks are PhantomHub's (phantomhub/accounts/oidc.py).
OIDC_RP_SCOPES = OIDC_SCOPES
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc-callback"
# Password sign-in (the portal's and the admin's). 0 leaves single sign-on and the break-glass
# link (`manage.py breakglass`) as the only ways in.
LOCAL_PASSWORDS = env_bool("PHANTOMHUB_LOCAL_PASSWORDS", True)
if not LOCAL_PASSWORDS and OIDC_ISSUER is None:
    raise ConfigError("PHANTOMHUB_LOCAL_PASSWORDS=0 needs PHANTOMHUB_OIDC_ISSUER: nobody could sign in")
# A single sign-on session ends this long after its sign-in however often it is refreshed (its
# expiry is set then); a password session this long after it last changed.
SESSION_COOKIE_AGE = env_int("PHANTOMHUB_SESSION_AGE_S", 14 * 86_400, minimum=60, maximum=365 * 86_400)
AUTHENTICATION_BACKENDS.append("phantomhub.accounts.oidc.OidcBackend")
MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
                  "phantomhub.accounts.oidc_session.OidcSessionMiddleware")  # fmt: skip
