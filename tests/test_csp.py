"""Content-Security-Policy on every response: the web UI's page, API answers (errors too), and the
API documentation (its inline setup allowed by hash, on that page only). The browser side is
tests/e2e/test_csp.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client, override_settings

from phantomhub.csp import inline_hashes, policy

pytestmark = pytest.mark.django_db

STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "object-src": "'none'",
    "frame-ancestors": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
}


def _directives(header: str) -> dict[str, list[str]]:
    return {name: sources for name, *sources in (part.split() for part in header.split(";"))}


def _assert_strict(header: str) -> dict[str, list[str]]:
    directives = _directives(header)
    for name, source in STRICT.items():
        assert directives[name][0] == source, (name, header)
    assert not any("'unsafe-inline'" in directives[name] or "'unsafe-eval'" in directives[name] for name in STRICT)
    return directives


def test_the_ui_page_has_a_strict_policy_that_allows_its_one_inline_script_by_hash(tmp_path: Path) -> None:
    script = b"\n      document.documentElement.dataset.theme = 'dark';\n    "
    (tmp_path / "index.html").write_bytes(b"<html><head><script>" + script + b'</script><script type="module" src="/a.js">'
                                          b"</script></head><body></body></html>")  # fmt: skip
    with override_settings(FRONTEND_DIST=tmp_path):
        response = Client().get("/runs")
    assert response.status_code == 200
    directives = _assert_strict(response["Content-Security-Policy"])
    assert directives["script-src"] == ["'self'", inline_hashes(b"<script>" + script + b"</script>")[0][0]]
    assert directives["style-src-attr"] == ["'unsafe-inline'"]  # the charts' style="..." attributes only


def test_api_answers_and_errors_carry_it_too() -> None:
    client = Client()
    for path, status in (("/api/v1/health", 200), ("/api/v1/portal/runs", 401), ("/api/v1/nothing-here", 404)):
        response = client.get(path)
        assert response.status_code == status, path
        _assert_strict(response["Content-Security-Policy"])


def test_report_only_sends_the_same_policy_under_the_report_only_header() -> None:
    with override_settings(CSP_REPORT_ONLY=True):
        response = Client().get("/api/v1/health")
    assert "Content-Security-Policy" not in response
    _assert_strict(response["Content-Security-Policy-Report-Only"])


def test_inline_hashes_are_those_of_the_element_text_exactly() -> None:
    html = b'<script>alert(1)</script><script src="/x.js"></script><STYLE media="x">b{}</STYLE><script type="module">y</script>'
    scripts, styles = inline_hashes(html)
    # printf 'alert(1)' | openssl dgst -sha256 -binary | base64
    assert scripts[0] == "'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"
    assert len(scripts) == 2 and len(styles) == 1
    assert policy(scripts=scripts).count("'sha256-") == 2
