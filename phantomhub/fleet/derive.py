"""Derive FleetDay rows: every GPU-second of a node-day, by class and holder, priced to the cent.

A GPU sample covers the time since the previous sample of the same GPU, at most twice its
interval (the first sample ever covers one interval); a longer gap is "unknown" (not reporting):
shown, not priced. A sample's time belongs to the UTC day of its timestamp and is priced at the
price-book entry in force at that moment (node GPU model, provider, region; on-demand tier).
A node-day's cost is its exact dollars rounded once to cents; the cents are handed to its rows by
the largest remainder (phantomhub/waste/core/money.py), so the classes add up to the node's cost.

Incremental: a node-day remembers how far it is derived (DayDerived); samples after that are
added to its rows (their exact cost is kept in `exact_units`, so re-footing the cents reads no
sample again). A sample arriving at or before that point (a replay from a spool, a late batch)
rebuilds the node-day from its raw samples.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db import transaction

from phantomhub.fleet.models import DayDerived, DayPending, FleetDay, GpuClass, GpuSample, Node, NodeSpec, Owner
from phantomhub.pricing.selectors import gpu_key_for, price_segments
from phantomhub.telemetry.bounds import ns_of
from phantomhub.telemetry.models import PricingTier
from phantomhub.waste.core.money import NS_PER_HOUR, cents_allocate, cents_round

NS = 10**9
PRICE_SCALE = 10_000  # price-book prices have four decimals
Key = tuple[int, int | None]  # (class, holder owner id)


def _day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _specs(node: Node, lo: int, hi: int) -> list[tuple[int, int, NodeSpec]]:
    """The node's specs in force over [lo, hi) ns, each with the span it covers: from its
    valid_from_ns to the next one's (time before the first is priced as the first)."""
    history = list(NodeSpec.objects.filter(node=node).order_by("valid_from_ns"))
    if not history:  # a node without history: its description is its spec from the beginning
        history = [NodeSpec(node=node, valid_from_ns=0, gpu_model=node.gpu_model, provider=node.provider, region=node.region)]
    out = []
    for i, spec in enumerate(history):
        begin = lo if i == 0 else max(spec.valid_from_ns, lo)
        until = min(history[i + 1].valid_from_ns, hi) if i + 1 < len(history) else hi
        if begin < until:
            out.append((begin, until, spec))
    return out


def _at(t_ns: int) -> datetime:
    """The moment of `t_ns`, rounded up to the microsecond (a datetime's precision)."""
    return datetime.fromtimestamp(0, tz=UTC) + timedelta(microseconds=-(-t_ns // 1000))


class _Prices:
    """The price in force at any moment of one node-day (1/10,000 USD per GPU-hour), by bisection:
    for each span, the price-book entries of the node's spec in force then (NodeSpec), so a spec
    change re-prices only the time after it."""

    def __init__(self, node: Node, start: datetime, end: datetime) -> None:
        self.starts: list[int] = []
        self.prices: list[int] = []
        for begin, until, spec in _specs(node, ns_of(start), ns_of(end)):
            segments = price_segments(
                gpu=gpu_key_for(spec.gpu_model), provider=spec.provider, region=spec.region,
                tier=PricingTier.ON_DEMAND, start=_at(begin), end=_at(until),
            )  # fmt: skip
            for k, seg in enumerate(segments):
                self.starts.append(begin if k == 0 else ns_of(seg.start))  # the spec's own ns, exactly
                self.prices.append(0 if seg.usd_per_gpu_hour is None else int(seg.usd_per_gpu_hour * PRICE_SCALE))

    def at(self, t_ns: int) -> int:
        i = bisect.bisect_right(self.starts, t_ns) - 1
        return self.prices[i] if 0 <= i < len(self.prices) else 0


def _previous(node: Node, gpus: set[int], before_ns: int) -> dict[int, int]:
    """Per GPU, the time of its last sample at or before `before_ns` (any day)."""
    out = {}
    for index in gpus:
        prev = (
            GpuSample.objects.filter(node=node, gpu_index=index, t_ns__lte=before_ns)
            .order_by("-t_ns")
            .values_list("t_ns", flat=True)
            .first()
        )
        if prev is not None:
            out[index] = prev
    return out


def _accumulate(
    rows: Sequence[tuple[int, int, int, int, int | None]], last: dict[int, int], prices: _Prices
) -> tuple[dict[Key, int], dict[Key, int]]:
    """(covered ns, exact units) per (class, holder) of `rows` (gpu, t_ns, interval_s, cls, holder),
    sorted by GPU then time, each covering the time since `last[gpu]`."""
    gpu_ns: dict[Key, int] = defaultdict(int)
    units: dict[Key, int] = defaultdict(int)
    for index, t_ns, interval_s, cls, holder in rows:
        cap = 2 * interval_s * NS
        prev = last.get(index)
        covered = interval_s * NS if prev is None else min(t_ns - prev, cap)
        if prev is not None and t_ns - prev > cap:
            gpu_ns[(GpuClass.UNKNOWN, None)] += t_ns - prev - cap
        last[index] = t_ns
        gpu_ns[(cls, holder)] += covered
        units[(cls, holder)] += covered * prices.at(t_ns)
    return gpu_ns, units


def _rows_write(node: Node, day: date, gpu_ns: dict[Key, int], units: dict[Key, int]) -> list[FleetDay]:
    """Replace the node-day's rows by these totals, their cents footed to the node-day's cost."""
    # In (class, holder) order, so the cents' ties fall the same way however the rows were built.
    keys = sorted((k for k in gpu_ns if k[0] != GpuClass.UNKNOWN), key=lambda k: (k[0], k[1] or 0))
    priced = {key: Fraction(units.get(key, 0), NS_PER_HOUR * PRICE_SCALE) for key in keys}
    total_cents = cents_round(sum(priced.values(), Fraction(0)))
    cents = cents_allocate(total_cents, {f"{c}:{h}": v for (c, h), v in priced.items()})
    owners = {o.pk: o for o in Owner.objects.filter(pk__in={h for _, h in gpu_ns if h is not None})}
    out = []
    for (klass, holder_id), covered_ns in sorted(gpu_ns.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        owner = owners.get(holder_id) if holder_id is not None else None
        out.append(
            FleetDay(
                node=node, day=day, cls=klass, holder_id=holder_id,
                team_id=owner.team_id if owner else None, project_id=owner.project_id if owner else None,
                gpu_ns=covered_ns, exact_units=Decimal(units.get((klass, holder_id), 0)),
                cost_cents=cents.get(f"{klass}:{holder_id}", 0),
            )
        )  # fmt: skip
    FleetDay.objects.filter(node=node, day=day).delete()
    FleetDay.objects.bulk_create(out)
    return out


@transaction.atomic
def node_day_derive(*, node: Node, day: date, from_ns: int = 0) -> list[FleetDay]:
    """Bring the FleetDay rows of one node and day up to date: add the samples after the point
    derived so far, or rebuild from every raw sample when one arrived at or before it."""
    start, end = _day_bounds(day)
    lo, hi = ns_of(start), ns_of(end)
    done = DayDerived.objects.select_for_update().filter(node=node, day=day).first()
    incremental = done is not None and from_ns > done.derived_to_ns
    after = done.derived_to_ns if incremental and done is not None else lo - 1
    samples = GpuSample.objects.filter(node=node, t_ns__gt=after, t_ns__lt=hi).order_by("gpu_index", "t_ns")
    rows = list(samples.values_list("gpu_index", "t_ns", "interval_s", "cls", "holder_id"))
    prices = _Prices(node, start, end)
    gpu_ns, units = _accumulate(rows, _previous(node, {r[0] for r in rows}, after), prices)
    if incremental:
        for row in FleetDay.objects.filter(node=node, day=day):
            gpu_ns[(row.cls, row.holder_id)] += row.gpu_ns
            units[(row.cls, row.holder_id)] += int(row.exact_units)
    reached = max((r[1] for r in rows), default=after)
    if done is None:
        DayDerived.objects.create(node=node, day=day, derived_to_ns=reached)
    else:
        done.derived_to_ns = max(reached, done.derived_to_ns if incremental else reached)
        done.save(update_fields=["derived_to_ns"])
    if incremental and not rows:
        return list(FleetDay.objects.filter(node=node, day=day))
    return _rows_write(node, day, gpu_ns, units)


def fleet_derive_pending(*, limit: int = 500) -> int:
    """Derive the node-days marked at ingest; returns how many were brought up to date. A mark is
    taken by deleting it, so a sample stored meanwhile marks the node-day again (a new row)."""
    done = 0
    for pending in list(DayPending.objects.select_related("node").order_by("day", "node_id")[:limit]):
        with transaction.atomic():
            claimed = DayPending.objects.filter(pk=pending.pk).delete()[0]
        if not claimed:
            continue  # another worker took it
        try:
            node_day_derive(node=pending.node, day=pending.day, from_ns=pending.from_ns)
        except Exception:
            DayPending.objects.get_or_create(node=pending.node, day=pending.day, defaults={"from_ns": 0})
            raise
        done += 1
    return done
