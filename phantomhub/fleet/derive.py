"""Derive FleetDay rows: every GPU-second of a node-day, by class and holder, priced to the cent.

A GPU sample covers the time since the previous sample of the same GPU, at most twice its
interval (the first sample ever covers one interval); a longer gap is "unknown" (not reporting):
shown, not priced. A sample's time belongs to the UTC day of its timestamp and is priced at the
price-book entry in force at that moment (node GPU model, provider, region; on-demand tier).
A node-day's cost is its exact dollars rounded once to cents; the cents are handed to its rows by
the largest remainder (phantomhub/waste/money.py), so the classes add up to the node's cost.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from datetime import UTC, date, datetime, time, timedelta
from fractions import Fraction

from django.db import transaction

from phantomhub.fleet.models import DayPending, FleetDay, GpuClass, GpuSample, Node, Owner
from phantomhub.pricing.selectors import gpu_key_for, price_segments
from phantomhub.telemetry.bounds import ns_of
from phantomhub.telemetry.models import PricingTier
from phantomhub.waste.money import cents_allocate, cents_round, usd_for

NS = 10**9


def _day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


class _Prices:
    """The price in force at any moment of one node-day, by bisection over its segments."""

    def __init__(self, node: Node, start: datetime, end: datetime) -> None:
        segments = price_segments(
            gpu=gpu_key_for(node.gpu_model), provider=node.provider, region=node.region,
            tier=PricingTier.ON_DEMAND, start=start, end=end,
        )  # fmt: skip
        self.starts = [ns_of(s.start) for s in segments]
        self.prices = [None if s.usd_per_gpu_hour is None else Fraction(s.usd_per_gpu_hour) for s in segments]

    def at(self, t_ns: int) -> Fraction | None:
        i = bisect.bisect_right(self.starts, t_ns) - 1
        return self.prices[i] if 0 <= i < len(self.prices) else None


def node_day_derive(*, node: Node, day: date) -> list[FleetDay]:
    """Rebuild the FleetDay rows of one node and day from its raw GPU samples."""
    start, end = _day_bounds(day)
    lo, hi = ns_of(start), ns_of(end)
    samples = GpuSample.objects.filter(node=node, t_ns__gte=lo, t_ns__lt=hi).order_by("gpu_index", "t_ns")
    rows = list(samples.values_list("gpu_index", "t_ns", "interval_s", "cls", "holder_id"))
    before: dict[int, int] = {}
    for index in {r[0] for r in rows}:
        prev = (
            GpuSample.objects.filter(node=node, gpu_index=index, t_ns__lt=lo)
            .order_by("-t_ns")
            .values_list("t_ns", flat=True)
            .first()
        )
        if prev is not None:
            before[index] = prev
    prices = _Prices(node, start, end)
    gpu_ns: dict[tuple[int, int | None], int] = defaultdict(int)
    usd: dict[tuple[int, int | None], Fraction] = defaultdict(Fraction)
    last: dict[int, int] = dict(before)
    for index, t_ns, interval_s, cls, holder in rows:
        cap = 2 * interval_s * NS
        prev = last.get(index)
        covered = interval_s * NS if prev is None else min(t_ns - prev, cap)
        if prev is not None and t_ns - prev > cap:
            gpu_ns[(GpuClass.UNKNOWN, None)] += t_ns - prev - cap
        last[index] = t_ns
        gpu_ns[(cls, holder)] += covered
        usd[(cls, holder)] += usd_for(covered, prices.at(t_ns))
    priced = {key: value for key, value in usd.items() if key[0] != GpuClass.UNKNOWN}
    total_cents = cents_round(sum(priced.values(), Fraction(0)))
    labels = {f"{cls}:{holder}": (cls, holder) for cls, holder in priced}
    cents = cents_allocate(total_cents, {label: priced[key] for label, key in labels.items()})
    owners = {o.pk: o for o in Owner.objects.filter(pk__in={h for _, h in gpu_ns if h is not None})}
    out = []
    for (klass, holder_id), covered_ns in sorted(gpu_ns.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        owner = owners.get(holder_id) if holder_id is not None else None
        out.append(
            FleetDay(
                node=node, day=day, cls=klass, holder_id=holder_id,
                team_id=owner.team_id if owner else None, project_id=owner.project_id if owner else None,
                gpu_ns=covered_ns, cost_cents=cents.get(f"{klass}:{holder_id}", 0),
            )
        )  # fmt: skip
    with transaction.atomic():
        FleetDay.objects.filter(node=node, day=day).delete()
        FleetDay.objects.bulk_create(out)
    return out


def fleet_derive_pending(*, limit: int = 500) -> int:
    """Derive the node-days marked at ingest; returns how many were rebuilt. A mark is cleared
    only if no newer sample re-marked it while deriving (the delete is by id, the re-mark a new row)."""
    done = 0
    for pending in list(DayPending.objects.select_related("node").order_by("day", "node_id")[:limit]):
        with transaction.atomic():
            claimed = DayPending.objects.filter(pk=pending.pk).delete()[0]
        if not claimed:
            continue  # another worker took it
        try:
            node_day_derive(node=pending.node, day=pending.day)
        except Exception:
            DayPending.objects.get_or_create(node=pending.node, day=pending.day)
            raise
        done += 1
    return done
