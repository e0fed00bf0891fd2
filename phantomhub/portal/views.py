"""Serve the built web UI: index.html for every client-side route (assets come from WhiteNoise)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def spa(request: HttpRequest) -> HttpResponse:
    index = settings.FRONTEND_DIST / "index.html"
    if not index.is_file():
        return HttpResponse(
            "<h1>PhantomHub</h1><p>The web UI is not built. Run <code>make frontend</code> (or <code>make run</code>)."
            ' The API is at <a href="/api/docs/">/api/docs/</a>.</p>',
            status=503,
        )
    response = HttpResponse(index.read_bytes(), content_type="text/html; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response
