"""Which nodes a node token may report for (pure: no Django).

A node token names its hostnames when it is made: exact names, or shell globs (`gpu-a-*`) for a
fleet that shares one token. A request for any other hostname is refused, so one node's token can
neither rewrite another node's history nor create nodes outside its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

MAX_HOSTNAMES = 1_000
# A hostname as the collector sends it (at most 255 characters), plus the glob characters.
HOSTNAME_PATTERN = re.compile(r"[A-Za-z0-9_.:\-*?\[\]]{1,255}")


def hostnames_clean(values: object) -> list[str]:
    """The patterns of a node token, checked and deduplicated in order; ValueError says what is wrong."""
    if isinstance(values, str):
        values = [v for v in re.split(r"[\s,]+", values) if v]
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError("name at least one hostname (exact, or a glob like gpu-a-*)")
    if len(values) > MAX_HOSTNAMES:
        raise ValueError(f"at most {MAX_HOSTNAMES} hostnames")
    out: list[str] = []
    for value in values:
        if not isinstance(value, str) or not HOSTNAME_PATTERN.fullmatch(value):
            raise ValueError(f"{str(value)[:60]!r} is not a hostname or glob (letters, digits, . _ - :, and * ? [])")
        if value not in out:
            out.append(value)
    return out


def hostname_allowed(patterns: Iterable[str], hostname: str) -> bool:
    return any(fnmatchcase(hostname, pattern) for pattern in patterns)
