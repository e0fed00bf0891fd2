"""Environment readers that fail loudly.

Every knob of PhantomHub is an environment variable named PHANTOMHUB_*. A bad value must stop
the process at start-up with a message naming the variable, not surface later as a 500.
"""

from __future__ import annotations

import ipaddress
import os
import re
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


def env_origins(name: str) -> list[str]:
    """Comma-separated origins (`https://host[:port]`), as CSRF_TRUSTED_ORIGINS wants them."""
    origins = env_list(name, [])
    for origin in origins:
        parsed = urlparse(origin)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path not in ("", "/"):
            raise ConfigError(f"{name}: {origin!r} is not an origin (use https://host or https://host:port)")
    return origins


def env_networks(name: str) -> list[str]:
    """Comma-separated IP addresses or CIDR networks (`10.0.0.0/8`), or `*` for any; none by default.

    The same strict syntax gunicorn's forwarded_allow_ips accepts: `10.0.0.1/8` (host bits set) is
    a typo for a network, not a network, and is refused.
    """
    entries = env_list(name, [])
    for entry in entries:
        if entry == "*":
            continue
        try:
            ipaddress.ip_network(entry)
        except ValueError as exc:
            raise ConfigError(f"{name}: {entry!r} is not an IP address or network ({exc})") from None
    return entries


_RATE = re.compile(r"^(\d+)\s*/\s*(s|sec|second|m|min|minute|h|hour|d|day)$")
_PERIOD_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def env_rate(name: str, default: str) -> tuple[int, int] | None:
    """A rate like `6000/min` (per s, min, h or day) as (requests, window seconds); `off` for none."""
    value = env_str(name) or default
    if value.lower() == "off":
        return None
    match = _RATE.match(value.lower())
    if match is None:
        raise ConfigError(f"{name}={value!r} is not a rate (use e.g. 6000/min, 100/s, or off)")
    requests = int(match.group(1))
    if not 1 <= requests <= 10**9:
        raise ConfigError(f"{name}={value!r}: the number of requests must be in [1, 1000000000]")
    return requests, _PERIOD_S[match.group(2)[0]]


def cache_from_url(name: str, url: str | None) -> dict[str, dict[str, object]]:
    """Django CACHES: Redis at `redis://host:6379/0` when given, else one process's local memory."""
    if url is None:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "phantomhub"}}
    if urlparse(url).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(f"{name}={url!r}: scheme must be redis://, rediss:// or unix://")
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "phantomhub",
            # Short timeouts: a Redis outage must cost a request milliseconds, not a stall (the
            # ingest throttle lets requests through while the cache is unreachable).
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }


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
