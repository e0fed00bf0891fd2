"""Settings for the test suite: PostgreSQL when reachable (required when CI=true), else SQLite.

PHANTOMHUB_TEST_BACKEND=sqlite forces SQLite, so `make test` runs the storage tests on both.
"""

import os

os.environ.setdefault("PHANTOMHUB_DEBUG", "1")
os.environ.setdefault("PHANTOMHUB_LOG_LEVEL", "WARNING")


def _postgres_url() -> str | None:
    if os.environ.get("PHANTOMHUB_TEST_BACKEND") == "sqlite":
        return None
    url = os.environ.get("PHANTOMHUB_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/phantomhub")
    import psycopg

    from phantomhub.env import database_from_url

    conf = database_from_url("PHANTOMHUB_TEST_DATABASE_URL", url)
    try:
        psycopg.connect(
            dbname="postgres",
            user=str(conf["USER"]),
            password=str(conf["PASSWORD"]),
            host=str(conf["HOST"]),
            port=str(conf["PORT"] or 5432),
            connect_timeout=3,
        ).close()
    except psycopg.OperationalError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise RuntimeError(f"CI=true but PostgreSQL at {url} is unreachable: {exc}") from exc
        print(f"\n[phantomhub] PostgreSQL unreachable ({exc}); testing on SQLite only\n")
        return None
    return url


_pg = _postgres_url()
if _pg:
    os.environ["PHANTOMHUB_DATABASE_URL"] = _pg
else:
    os.environ.pop("PHANTOMHUB_DATABASE_URL", None)
    os.environ.setdefault("PHANTOMHUB_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(__file__)), "var"))

from phantomhub.settings import *  # noqa: E402,F403
from phantomhub.settings import DATABASES, STATIC_ROOT, VAR_DIR  # noqa: E402

TEST_BACKEND = "postgresql" if _pg else "sqlite"
if not _pg:
    # A file (not :memory:) so threads in concurrency tests share one database with real locking.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-phantomhub.sqlite3")}
# The suite's broker: a Redis database of its own. Tasks stay eager unless a test starts a real
# worker (tests/waste/test_celery_worker.py flips CELERY_TASK_ALWAYS_EAGER off).
CELERY_BROKER_URL = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns on every request when it is missing
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user fixtures
