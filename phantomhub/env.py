"""Environment readers that fail loudly.

Every knob of PhantomHub is an environment variable named PHANTOMHUB_*. A bad value must stop
the process at start-up with a message naming the variable, not surface later as a 500.
"""

from __future__ import annotations

import os
from urllib.parse import unquote, urlparse


class ConfigError(Exception):
    """A PHANTOMHUB_* variable holds a value PhantomHub cannot use."""


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip()


def env_bool(name: str, default: bool) -> bool:
    value = env_str(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name}={number} is below the minimum {minimum}")
    if maximum is not None and number > maximum:
        raise ConfigError(f"{name}={number} is above the maximum {maximum}")
    return number


def env_float(name: str, default: float, *, minimum: float, maximum: float) -> float:
    value = env_str(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number") from None
    if not minimum <= number <= maximum:
        raise ConfigError(f"{name}={number} is outside [{minimum}, {maximum}]")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    value = env_str(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def database_from_url(name: str, url: str) -> dict[str, object]:
    """Turn `postgres://user:pass@host:port/db` or `sqlite:////abs/path.db` into Django settings."""
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = unquote(parsed.path)
        if parsed.netloc:  # sqlite://relative/path.db
            path = parsed.netloc + path
        if not path or path == "/":
            raise ConfigError(f"{name}={url!r} names no SQLite file (use sqlite:////abs/path.db)")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            # WAL lets the web process read while a writer appends steps; IMMEDIATE avoids the
            # "database is locked" upgrade deadlock between two writers.
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    if parsed.scheme in ("postgres", "postgresql", "pgsql"):
        if not parsed.path.lstrip("/"):
            raise ConfigError(f"{name}={url!r} names no database")
        try:
            port = parsed.port
        except ValueError:
            raise ConfigError(f"{name}={url!r} has an invalid port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")),
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ConfigError(f"{name}={url!r}: scheme must be postgres:// or sqlite://")
