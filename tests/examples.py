"""How many examples a property test tries: its own number in `make test` (CI), a fraction of it
in `make check`'s edit loop (``PHANTOMHUB_TEST_EXAMPLES=0.25``; docs/testing.md). The properties
are the same; the edit loop looks less far for a counterexample, and CI looks as far as before."""

from __future__ import annotations

import os

SCALE = float(os.environ.get("PHANTOMHUB_TEST_EXAMPLES", "1"))


def examples(n: int) -> int:
    """``n`` examples, scaled (at least 10: fewer finds little)."""
    return max(10, round(n * SCALE)) if SCALE != 1 else n
