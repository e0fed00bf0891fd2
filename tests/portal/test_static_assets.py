"""The built web UI as browsers get it: hashed assets compressed and cached for a year, the entry
page never cached stale."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

ASSETS = Path(settings.FRONTEND_DIST) / "assets"
pytestmark = pytest.mark.skipif(not ASSETS.is_dir(), reason="the web UI is not built (cd frontend && npm run build)")


def _script() -> str:
    return next(p.name for p in sorted(ASSETS.glob("index-*.js")))


@pytest.mark.parametrize("encoding", ["br", "gzip"])
def test_a_hashed_asset_is_served_compressed_and_cached_for_a_year(db: None, encoding: str) -> None:
    response = Client().get(f"/assets/{_script()}", HTTP_ACCEPT_ENCODING=f"{encoding}, identity")
    assert response.status_code == 200
    assert response["Content-Encoding"] == encoding
    assert "immutable" in response["Cache-Control"] and "max-age=315360000" in response["Cache-Control"]
    assert "Accept-Encoding" in response["Vary"]


def test_the_entry_page_is_never_cached_stale(db: None) -> None:
    for path in ("/", "/runs/anything", "/index.html"):
        response = Client().get(path)
        assert response.status_code == 200, path
        assert response["Cache-Control"] == "no-cache", path
