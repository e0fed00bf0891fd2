"""Container healthcheck: GET /api/v1/health from this container's gunicorn; exit 0 when it answers 200.

Django answers only the hosts in PHANTOMHUB_ALLOWED_HOSTS (400 to any other Host header), so the
request names the first of them rather than 127.0.0.1, which a real deployment does not list.
The health path is exempt from the HTTPS redirect (settings.SECURE_REDIRECT_EXEMPT), so this
works over plain http whatever PHANTOMHUB_SSL_REDIRECT says.
"""

from __future__ import annotations

import http.client
import os
import sys

PATH = "/api/v1/health"


def health_host(allowed_hosts: str | None) -> str:
    """A Host header that Django's ALLOWED_HOSTS check accepts, from PHANTOMHUB_ALLOWED_HOSTS."""
    for entry in (allowed_hosts or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        if entry == "*":
            return "localhost"
        return entry.lstrip(".")  # ".example.com" allows example.com and its subdomains
    return "localhost"  # the settings' default list names it


def check(port: int, host: str, timeout_s: float = 4.0) -> tuple[bool, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", PATH, headers={"Host": host})
        response = connection.getresponse()
        return response.status == 200, f"{response.status} {response.read(200)!r}"
    except OSError as exc:
        return False, str(exc)
    finally:
        connection.close()


def main() -> int:
    port = int(os.environ.get("PHANTOMHUB_PORT") or 8000)
    host = health_host(os.environ.get("PHANTOMHUB_ALLOWED_HOSTS"))
    healthy, detail = check(port, host)
    if not healthy:
        print(f"GET http://127.0.0.1:{port}{PATH} (Host: {host}): {detail}", file=sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
