"""Reads of the price book: which price was in force for a run at each moment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from itertools import pairwise

from django.db.models import Q

from phantomhub.pricing.catalog import gpu_resolve
from phantomhub.pricing.models import PriceEntry
from phantomhub.telemetry.models import PricingTier, Run


@dataclass(frozen=True)
class PriceSegment:
    start: datetime
    end: datetime
    usd_per_gpu_hour: Decimal | None  # None: no price in force (the time is shown as unpriced)
    entry_id: int | None
    source: str  # "price book", "run override" or "no price"


def gpu_key_for(reported: str) -> str:
    """The catalog key for a reported GPU name, or the name itself when it is not in the catalog."""
    spec = gpu_resolve(reported) if reported else None
    return spec.key if spec else reported


def _specificity(entry: PriceEntry, tier: str) -> tuple[int, datetime]:
    # Region beats provider beats tier; among equals the most recently started entry wins.
    score = (4 if entry.region else 0) + (2 if entry.provider else 0) + (1 if entry.tier == tier else 0)
    return (score, entry.effective_from)


def price_segments(*, gpu: str, provider: str, region: str, tier: str, start: datetime, end: datetime) -> list[PriceSegment]:
    """Cover [start, end) with the most specific entry in force at each moment.

    An entry applies when its gpu matches and its provider/region are blank or equal to the
    run's; the run's tier is preferred, with on-demand as the fallback tier.
    """
    if end <= start:
        return []
    tiers = {tier, PricingTier.ON_DEMAND}
    candidates = list(
        PriceEntry.objects.filter(
            Q(gpu=gpu),
            Q(provider="") | Q(provider=provider),
            Q(region="") | Q(region=region),
            Q(tier__in=tiers),
            Q(effective_from__lt=end),
            Q(effective_to__isnull=True) | Q(effective_to__gt=start),
        )
    )
    cuts = {start, end}
    for entry in candidates:
        for moment in (entry.effective_from, entry.effective_to):
            if moment is not None and start < moment < end:
                cuts.add(moment)
    bounds = sorted(cuts)
    segments: list[PriceSegment] = []
    for lo, hi in pairwise(bounds):
        live = [e for e in candidates if e.effective_from <= lo and (e.effective_to is None or e.effective_to >= hi)]
        best = max(live, key=lambda e: _specificity(e, tier), default=None)
        if segments and segments[-1].entry_id == (best.pk if best else None):
            segments[-1] = PriceSegment(
                segments[-1].start, hi, segments[-1].usd_per_gpu_hour, segments[-1].entry_id, segments[-1].source
            )
            continue
        if best is None:
            segments.append(PriceSegment(lo, hi, None, None, "no price"))
        else:
            segments.append(PriceSegment(lo, hi, best.usd_per_gpu_hour, best.pk, "price book"))
    return segments


def run_price_segments(*, run: Run, end: datetime) -> list[PriceSegment]:
    """Price segments over a run's billed span [allocation_start, end), honouring its override."""
    override = run.price_override_usd_per_gpu_hour
    if override is not None:
        return [PriceSegment(run.allocation_start, end, override, None, "run override")] if end > run.allocation_start else []
    return price_segments(
        gpu=gpu_key_for(run.gpu_model),
        provider=run.provider,
        region=run.region,
        tier=run.pricing_tier,
        start=run.allocation_start,
        end=end,
    )
