"""Content-Security-Policy on every response: the web UI's pages, its API answers, static files.

The UI is one built page (frontend/dist/index.html) that loads its scripts and styles from this
origin, so the policy allows scripts from this origin alone, plus the one inline script the page
carries (it applies the saved colour theme before the first paint), by its SHA-256, read from the
built file (a rebuild is picked up at the next response). No plugin, no framing, no <base>, forms
post only here. Styles: stylesheets and <style> elements from this origin only, but the charts
(ECharts' SVG renderer and tooltips) write `style="..."` attributes, so inline style attributes
alone are allowed (style-src-attr; they cannot run code; tests/e2e/test_csp.py found no other
violation on any page).

The API's documentation page (drf-spectacular's Swagger UI) renders its setup inline, from this
server's settings and no user data: its inline script and style are allowed by their hashes, on
that page only. PHANTOMHUB_CSP_REPORT_ONLY=1 sends the policy as Content-Security-Policy-Report-Only
(browsers then report what it would refuse, in their consoles, without refusing it).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse

DIRECTIVES: dict[str, tuple[str, ...]] = {
    "default-src": ("'self'",),
    "script-src": ("'self'",),
    "style-src": ("'self'",),
    "style-src-attr": ("'unsafe-inline'",),
    "img-src": ("'self'", "data:", "blob:"),
    "font-src": ("'self'", "data:"),
    "connect-src": ("'self'",),
    "object-src": ("'none'",),
    "frame-ancestors": ("'none'",),
    "base-uri": ("'self'",),
    "form-action": ("'self'",),
}
# Pages whose inline <script> and <style> elements are allowed by hash: server-rendered from
# settings alone (the API documentation).
INLINE_HASHED_PREFIXES = ("/api/docs/",)

_INLINE = re.compile(rb"<(script|style)\b([^>]*)>(.*?)</\1\s*>", re.DOTALL | re.IGNORECASE)
_SRC = re.compile(rb"\bsrc\s*=", re.IGNORECASE)


def _sha256(text: bytes) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text).digest()).decode() + "'"


def inline_hashes(html: bytes) -> tuple[list[str], list[str]]:
    """The CSP hashes of an HTML document's inline scripts and of its <style> elements."""
    scripts: list[str] = []
    styles: list[str] = []
    for match in _INLINE.finditer(html):
        tag, attributes, text = match.group(1).lower(), match.group(2), match.group(3)
        if tag == b"script" and not _SRC.search(attributes):
            scripts.append(_sha256(text))
        elif tag == b"style":
            styles.append(_sha256(text))
    return scripts, styles


def policy(*, scripts: Iterable[str] = (), styles: Iterable[str] = ()) -> str:
    """The policy, with these hashes added to script-src and style-src."""
    extra = {"script-src": tuple(scripts), "style-src": tuple(styles)}
    return "; ".join(" ".join((name, *sources, *extra.get(name, ()))) for name, sources in DIRECTIVES.items())


class _ShellPolicy:
    """The policy of every response: with the hashes of the built page's inline scripts, read
    again when the file changes (a stat a response)."""

    def __init__(self) -> None:
        self._key: tuple[Path, int] | None = None
        self._value = policy()

    def get(self) -> str:
        index = Path(settings.FRONTEND_DIST) / "index.html"
        try:
            key = (index, index.stat().st_mtime_ns)
        except OSError:
            return policy()
        if key != self._key:
            scripts, _styles = inline_hashes(index.read_bytes())
            self._key, self._value = key, policy(scripts=scripts)
        return self._value


class ContentSecurityPolicyMiddleware:
    """Sets the policy on every response that has none (place it before WhiteNoise, so static
    files and the built page that WhiteNoise answers get it too)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.shell = _ShellPolicy()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        header = "Content-Security-Policy-Report-Only" if settings.CSP_REPORT_ONLY else "Content-Security-Policy"
        if header in response:
            return response
        if request.path.startswith(INLINE_HASHED_PREFIXES) and self._is_html(response):
            scripts, styles = inline_hashes(response.content)
            response[header] = policy(scripts=scripts, styles=styles)
        else:
            response[header] = self.shell.get()
        return response

    @staticmethod
    def _is_html(response: HttpResponse) -> bool:
        return not response.streaming and response.get("Content-Type", "").startswith("text/html")
