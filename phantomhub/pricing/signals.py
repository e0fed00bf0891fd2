"""What the price book announces (docs/architecture.md, "Signals"). Pricing never imports the
readers of its prices; they connect here from their apps' ready()."""

from __future__ import annotations

from django.dispatch import Signal

# Prices of ``gpu`` changed (a price set, edited or deleted). Sent inside the change's transaction,
# not on commit: waste's receiver marks the analyses priced by it stale in the same transaction,
# so a price change and "these analyses need recomputing" commit together or not at all.
prices_changed = Signal()

# Asked before a change to the price book: which closed periods (finance's closed months) does this
# span of time reach? Sent with ``start`` and ``end`` (None: open); each receiver answers a list
# of labels ("2026-11"). Portal answers (portal/apps.py).
price_span_closed = Signal()
