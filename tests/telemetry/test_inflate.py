"""Gzip bodies inflate the same way through zlib and, where installed, ISA-L (isal)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import pytest

from phantomhub.errors import ApiError
from phantomhub.telemetry.parsers import _inflate_capped

LIBS: list[Any] = [zlib]
try:
    from isal import isal_zlib

    LIBS.append(isal_zlib)
except ImportError:  # the optional dependency is not installed here
    pass


@pytest.fixture(params=LIBS, ids=lambda lib: lib.__name__)
def lib(request: pytest.FixtureRequest) -> Any:
    return request.param


def test_a_body_under_the_cap_comes_back_whole(lib: Any) -> None:
    raw = b'{"step": [' + b",".join(str(i).encode() for i in range(50_000)) + b"]}"
    assert _inflate_capped(gzip.compress(raw, 1), len(raw), lib) == raw


def test_a_body_one_byte_over_the_cap_is_413(lib: Any) -> None:
    raw = b"x" * 100_000
    with pytest.raises(ApiError) as caught:
        _inflate_capped(gzip.compress(raw), len(raw) - 1, lib)
    assert caught.value.status_code == 413


def test_bytes_that_are_not_gzip_are_a_400_naming_the_body(lib: Any) -> None:
    with pytest.raises(ApiError) as caught:
        _inflate_capped(b"this is plain text, not gzip at all", 1000, lib)
    assert caught.value.status_code == 400
    assert caught.value.code == "invalid_gzip"
