"""The invoice against the fleet: per month and team, billed, measured, unexplained.

Billed: the imported FOCUS lines matched to a node, dated by their ChargePeriodStart. Measured: the
node's GPU time priced with the price book (every class; FleetDay). A node's billed cents are split
over the teams in proportion to its measured cents (largest remainder, so they add up); a node
billed but never measured that month is billed to "unattributed". Unexplained = billed - measured:
what the bill holds that the price book and the collectors do not account for (price differences,
time no collector saw, non-GPU charges on a GPU instance).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, time, timedelta
from fractions import Fraction
from typing import Any

from django.db.models import Sum

from phantomhub.accounts.models import Team
from phantomhub.fleet.models import FleetDay, InvoiceLine
from phantomhub.periods import Period
from phantomhub.waste.core.money import cents_allocate, cents_round


def _bounds(period: Period) -> tuple[datetime, datetime]:
    start = datetime.combine(period.start, time(0), tzinfo=UTC)
    return start, datetime.combine(period.end, time(0), tzinfo=UTC) + timedelta(days=1)


def invoice_reconcile(*, period: Period) -> dict[str, Any]:
    start, end = _bounds(period)
    lines = InvoiceLine.objects.filter(period_start__gte=start, period_start__lt=end)
    billed_node: dict[int, int] = defaultdict(int)
    for node_id, cost in lines.filter(node__isnull=False).values_list("node_id", "billed_cost"):
        billed_node[node_id] += cents_round(Fraction(cost))
    unmatched = sum((cents_round(Fraction(c)) for c in lines.filter(node__isnull=True).values_list("billed_cost", flat=True)), 0)
    measured: dict[int, dict[int | None, int]] = defaultdict(lambda: defaultdict(int))
    days = FleetDay.objects.filter(day__gte=period.start, day__lte=period.end, node_id__in=billed_node)
    for row in days.values("node_id", "team_id").annotate(cents=Sum("cost_cents")):
        measured[row["node_id"]][row["team_id"]] += row["cents"] or 0
    per_team: dict[int | None, dict[str, int]] = defaultdict(lambda: {"billed": 0, "measured": 0})
    for node_id, billed in billed_node.items():
        shares = measured.get(node_id, {})
        if sum(shares.values()) <= 0:
            per_team[None]["billed"] += billed
            continue
        split = cents_allocate(billed, {str(k): Fraction(v) for k, v in shares.items()})
        for key, cents in split.items():
            team_id = None if key == "None" else int(key)
            per_team[team_id]["billed"] += cents
            per_team[team_id]["measured"] += shares[team_id]
    teams = {t.pk: t for t in Team.objects.filter(pk__in=[k for k in per_team if k is not None])}
    rows = [
        {
            "team": teams[tid].slug if tid is not None else None,
            "team_name": teams[tid].label if tid is not None else "unattributed",
            "billed_usd": sums["billed"] / 100,
            "measured_usd": sums["measured"] / 100,
            "unexplained_usd": (sums["billed"] - sums["measured"]) / 100,
        }
        for tid, sums in per_team.items()
    ]
    rows.sort(key=lambda r: (r["team"] is None, r["team"] or ""))
    billed = sum(s["billed"] for s in per_team.values())
    measured_total = sum(s["measured"] for s in per_team.values())
    return {
        "rows": rows,
        "totals": {
            "billed_usd": billed / 100,
            "measured_usd": measured_total / 100,
            "unexplained_usd": (billed - measured_total) / 100,
        },
        "unmatched_billed_usd": unmatched / 100,
        "lines": lines.count(),
    }
