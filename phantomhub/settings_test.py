"""Settings for the test suite: PostgreSQL when reachable (required when CI=true), else SQLite.

PHANTOMHUB_TEST_BACKEND=sqlite forces SQLite, so `make test` runs the storage tests on both.

Under pytest-xdist every worker (PYTEST_XDIST_WORKER=gw0, gw1, ...) gets resources of its own, so
parallel tests never share state (docs/testing.md):
- the test database: pytest-django names it test_<name>_gw<N> (the SQLite file likewise);
- a Redis database: the one PHANTOMHUB_TEST_REDIS_URL names (default 15) minus N, written back to
  PHANTOMHUB_TEST_REDIS_URL so tests and the processes they start read the worker's own;
- a var/ directory: var/test-gw<N> (PHANTOMHUB_VAR_DIR), for archives, locks and demo tokens.
"""

import os
import re
from pathlib import Path

os.environ.setdefault("PHANTOMHUB_DEBUG", "1")
os.environ.setdefault("PHANTOMHUB_LOG_LEVEL", "WARNING")

REDIS_URL_DEFAULT = "redis://127.0.0.1:6379/15"
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ... under xdist, else ""


def worker_index() -> int:
    """This xdist worker's number (gw3 -> 3); 0 when the suite runs in one process."""
    match = re.fullmatch(r"gw(\d+)", XDIST_WORKER)
    return int(match.group(1)) if match else 0


def _worker_redis_url(url: str, index: int) -> str:
    """``url`` with its database number lowered by ``index``: redis://h:6379/15 -> .../14 for gw1."""
    match = re.fullmatch(r"(redis://[^/]+)(?:/(\d+))?", url)
    if match is None:
        raise RuntimeError(f"PHANTOMHUB_TEST_REDIS_URL={url!r}: expected redis://host:port/db")
    db = int(match.group(2) or 0) - index
    if db < 0:
        raise RuntimeError(
            f"xdist worker {XDIST_WORKER} needs Redis database {db}: run fewer workers, or give "
            f"PHANTOMHUB_TEST_REDIS_URL a higher database number (each worker takes the next lower one)"
        )
    return f"{match.group(1)}/{db}"


if XDIST_WORKER:
    os.environ["PHANTOMHUB_TEST_REDIS_URL"] = _worker_redis_url(
        os.environ.get("PHANTOMHUB_TEST_REDIS_URL", REDIS_URL_DEFAULT), worker_index()
    )
    _var_base = Path(os.environ.get("PHANTOMHUB_VAR_DIR") or Path(__file__).resolve().parent.parent / "var")
    os.environ["PHANTOMHUB_VAR_DIR"] = str(_var_base / f"test-{XDIST_WORKER}")


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
VAR_DIR.mkdir(parents=True, exist_ok=True)
if not _pg:
    # A file (not :memory:) so threads in concurrency tests share one database with real locking.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-phantomhub.sqlite3")}
# The suite's broker: a Redis database of its own. Tasks stay eager unless a test starts a real
# worker (tests/waste/test_celery_worker.py flips CELERY_TASK_ALWAYS_EAGER off).
CELERY_BROKER_URL = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", REDIS_URL_DEFAULT)
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns on every request when it is missing
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast user fixtures
