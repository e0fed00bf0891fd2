"""Reads of the fleet, from FleetDay and GpuState only (never raw samples)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Max, Sum
from django.utils import timezone

from phantomhub.accounts.models import Membership, Project, Team
from phantomhub.accounts.selectors import user_sees_everything
from phantomhub.fleet.attribution import Rule, owner_attribute, owner_label
from phantomhub.fleet.models import CLASS_NAMES, PRICED_CLASSES, FleetDay, GpuClass, GpuState, Node, Owner
from phantomhub.periods import Period
from phantomhub.pricing.selectors import gpu_key_for, price_segments
from phantomhub.telemetry.models import PricingTier

NS = 10**9
NS_PER_HOUR = 3600 * NS
# A GPU whose node has not reported for this many intervals is no longer "now".
STALE_INTERVALS = 4
# The collector's counters of requests lost for good: refused by its full queue, or neither
# delivered nor written to (or evicted from) its full spool.
DROPPED_COUNTERS = ("dropped_samples", "spool_dropped_batches")


def collector_dropped(counters: Any) -> int:
    """Requests a node's collector reported losing (0 when it reported no counters)."""
    if not isinstance(counters, dict):
        return 0
    return sum(v for k in DROPPED_COUNTERS if isinstance(v := counters.get(k), int) and not isinstance(v, bool) and v >= 0)


def _hours(ns: int) -> float:
    return round(ns / NS_PER_HOUR, 3)


def _usd(cents: int) -> float:
    return round(cents / 100, 2)


def usd_per_gpu_hour_now(node: Node, at: datetime | None = None) -> float | None:
    at = at or timezone.now()
    segments = price_segments(
        gpu=gpu_key_for(node.gpu_model), provider=node.provider, region=node.region,
        tier=PricingTier.ON_DEMAND, start=at, end=at + timedelta(seconds=1),
    )  # fmt: skip
    price = segments[0].usd_per_gpu_hour if segments else None
    return None if price is None else float(price)


# Who sees which holders (docs/fleet.md, "Who sees what"): None is everyone's (organization
# admins, finance); else the ids of the viewer's teams. Holders outside them are summed into
# one row per kind of absence, never named.
Visible = frozenset[int] | None
OTHER_TEAMS = "other teams"
UNATTRIBUTED = "unattributed"


def fleet_teams_visible(user: Any) -> Visible:
    """The teams whose holders `user` sees on the fleet (None: all of them)."""
    if user_sees_everything(user):
        return None
    user_id = getattr(user, "pk", None)
    if user_id is None:
        return frozenset()
    return frozenset(Membership.objects.filter(user_id=user_id).values_list("team_id", flat=True))


def _hidden(team_id: int | None, visible: Visible) -> str | None:
    """Why a row of this team is not shown by name to this viewer (None: it is shown)."""
    if visible is None or (team_id is not None and team_id in visible):
        return None
    return OTHER_TEAMS if team_id is not None else UNATTRIBUTED


def _slugs() -> tuple[dict[int, Team], dict[int, Project]]:
    return {t.pk: t for t in Team.objects.all()}, {p.pk: p for p in Project.objects.all()}


def idle_held_now(*, min_minutes: float = 0, now: datetime | None = None, visible: Visible = None) -> list[dict[str, Any]]:
    """GPUs idle-held right now, longest first: node (hostname), gpu_index, holder (display string),
    team and project (slugs or None), since (aware datetime), usd_per_hour (float, 0 when unpriced).
    A holder outside `visible` teams reads "other teams" (or "unattributed"), with no team or project."""
    now = now or timezone.now()
    now_ns = int(now.timestamp() * NS)
    states = GpuState.objects.filter(cls=GpuClass.IDLE_HELD).select_related("node", "holder", "holder__team", "holder__project")
    out = []
    prices: dict[int, float | None] = {}
    for state in states:
        node = state.node
        if now_ns - state.last_t_ns > STALE_INTERVALS * node.interval_s * NS:
            continue
        held_min = (now_ns - state.since_ns) / NS / 60
        if held_min < min_minutes:
            continue
        if node.pk not in prices:
            prices[node.pk] = usd_per_gpu_hour_now(node, now)
        owner = state.holder
        hidden = _hidden(owner.team_id if owner else None, visible) if owner else None
        out.append(
            {
                "node": node.hostname,
                "gpu_index": state.gpu_index,
                "holder": hidden or owner_label(owner.data if owner else None),
                "team": owner.team.slug if owner and owner.team and not hidden else None,
                "project": owner.project.slug if owner and owner.project and not hidden else None,
                "since": datetime.fromtimestamp(state.since_ns / NS, tz=UTC),
                "usd_per_hour": prices[node.pk] or 0.0,
            }
        )
    return sorted(out, key=lambda r: (r["since"], r["node"], r["gpu_index"]))


def _days(period: Period) -> Any:
    return FleetDay.objects.filter(day__gte=period.start, day__lte=period.end)


def fleet_classes(period: Period) -> dict[str, dict[str, float]]:
    sums = {row["cls"]: row for row in _days(period).values("cls").annotate(ns=Sum("gpu_ns"), cents=Sum("cost_cents"))}
    return {
        CLASS_NAMES[c.value]: {
            "gpu_hours": _hours(sums.get(c.value, {}).get("ns") or 0),
            "usd": _usd(sums.get(c.value, {}).get("cents") or 0),
        }
        for c in GpuClass
    }


def fleet_by_team(period: Period) -> dict[int | None, dict[str, float]]:
    """Per team id (None: unattributed): uninstrumented-busy and idle-held dollars and hours."""
    out: dict[int | None, dict[str, float]] = defaultdict(lambda: {"uninstrumented_usd": 0.0, "idle_held_usd": 0.0})
    rows = _days(period).filter(cls__in=[GpuClass.BUSY_UNINSTRUMENTED, GpuClass.IDLE_HELD])
    for row in rows.values("team_id", "cls").annotate(cents=Sum("cost_cents")):
        name = "uninstrumented_usd" if row["cls"] == GpuClass.BUSY_UNINSTRUMENTED else "idle_held_usd"
        out[row["team_id"]][name] = _usd(row["cents"] or 0)
    return dict(out)


def fleet_by_project(period: Period) -> dict[int | None, dict[str, float]]:
    out: dict[int | None, dict[str, float]] = defaultdict(lambda: {"uninstrumented_usd": 0.0, "idle_held_usd": 0.0})
    rows = _days(period).filter(cls__in=[GpuClass.BUSY_UNINSTRUMENTED, GpuClass.IDLE_HELD])
    for row in rows.values("project_id", "cls").annotate(cents=Sum("cost_cents")):
        name = "uninstrumented_usd" if row["cls"] == GpuClass.BUSY_UNINSTRUMENTED else "idle_held_usd"
        out[row["project_id"]][name] = _usd(row["cents"] or 0)
    return dict(out)


def _class_columns(rows: list[dict[str, Any]]) -> dict[str, float]:
    cols = dict.fromkeys((f"{c}_usd" for c in PRICED_CLASSES), 0.0)
    for row in rows:
        name = CLASS_NAMES[row["cls"]]
        if name in PRICED_CLASSES:
            cols[f"{name}_usd"] = round(cols[f"{name}_usd"] + (row["cents"] or 0) / 100, 2)
    return cols


def fleet_nodes(period: Period, limit: int | None = None) -> list[dict[str, Any]]:
    """Nodes by cost over the period, with each class's dollars and the GPU-hours billed."""
    per: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in _days(period).values("node_id", "cls").annotate(ns=Sum("gpu_ns"), cents=Sum("cost_cents")):
        per[row["node_id"]].append(row)
    nodes = {n.pk: n for n in Node.objects.filter(pk__in=per)}
    out: list[dict[str, Any]] = []
    for node_id, rows in per.items():
        node = nodes[node_id]
        billed = sum(r["ns"] or 0 for r in rows if r["cls"] != GpuClass.UNKNOWN)
        inst = sum(r["ns"] or 0 for r in rows if r["cls"] == GpuClass.INSTRUMENTED)
        out.append(
            {
                "node": node.hostname, "gpu_model": node.gpu_model, "gpu_count": node.gpu_count,
                "provider": node.provider, "region": node.region,
                "billed_gpu_hours": _hours(billed),
                "coverage": round(inst / billed, 4) if billed else None,
                "cost_usd": _usd(sum(r["cents"] or 0 for r in rows)),
                **_class_columns(rows),
                "unknown_gpu_hours": _hours(sum(r["ns"] or 0 for r in rows if r["cls"] == GpuClass.UNKNOWN)),
                "last_seen_at": node.last_seen_at.isoformat() if node.last_seen_at else None,
                "counters": node.counters or {},
                "counters_at": node.counters_at.isoformat() if node.counters_at else None,
                "collector_sent": (node.counters or {}).get("sent_batches"),
                "collector_spooled": (node.counters or {}).get("spooled_batches"),
                "collector_dropped": collector_dropped(node.counters) if node.counters else None,
            }
        )  # fmt: skip
    out.sort(key=lambda r: (-float(r["cost_usd"]), str(r["node"])))
    return out[:limit] if limit else out


def _holder_row(
    label: str, kind: str | None, team: str | None, project: str | None, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    cols = _class_columns(rows)
    return {
        "holder": label,
        "kind": kind,
        "team": team,
        "project": project,
        "gpu_hours": _hours(sum(r["ns"] or 0 for r in rows)),
        "busy_uninstrumented_usd": cols["busy_uninstrumented_usd"],
        "idle_held_usd": cols["idle_held_usd"],
        "cost_usd": _usd(sum(r["cents"] or 0 for r in rows)),
    }


def fleet_holders(period: Period, limit: int | None = None, *, visible: Visible = None) -> list[dict[str, Any]]:
    """Holders of uninstrumented time (busy or idle-held) by dollars over the period. Holders of
    teams outside `visible` are summed into an "other teams" row, unattributed holders into an
    "unattributed" row (`aggregated`: true, after the named rows and never cut by `limit`), so
    the rows add up to the same total for every viewer."""
    per: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    hidden: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = _days(period).filter(cls__in=[GpuClass.BUSY_UNINSTRUMENTED, GpuClass.IDLE_HELD])
    for row in rows.values("holder_id", "team_id", "cls").annotate(ns=Sum("gpu_ns"), cents=Sum("cost_cents")):
        why = _hidden(row["team_id"], visible) if row["holder_id"] is not None else None
        if why:
            hidden[why].append(row)
        else:
            per[row["holder_id"]].append(row)
    owners = {o.pk: o for o in Owner.objects.filter(pk__in=[k for k in per if k is not None]).select_related("team", "project")}
    out: list[dict[str, Any]] = []
    for holder_id, held in per.items():
        owner = owners.get(holder_id) if holder_id is not None else None
        out.append(
            {
                **_holder_row(
                    owner_label(owner.data if owner else None), owner.kind if owner else None,
                    owner.team.slug if owner and owner.team else None, owner.project.slug if owner and owner.project else None,
                    held,
                ),
                "aggregated": False,
            }
        )  # fmt: skip
    out.sort(key=lambda r: (-float(r["cost_usd"]), str(r["holder"])))
    out = out[:limit] if limit else out
    for why in (OTHER_TEAMS, UNATTRIBUTED):
        if hidden.get(why):
            out.append({**_holder_row(why, None, None, None, hidden[why]), "aggregated": True})
    return out


def fleet_teams(period: Period, *, visible: Visible = None) -> list[dict[str, Any]]:
    """Per team (and unattributed): GPU dollars by class; instrumented dollars are the runs' own.
    Teams outside `visible` are one "other teams" row (`aggregated`: true)."""
    per: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    others: list[dict[str, Any]] = []
    for row in _days(period).values("team_id", "cls").annotate(cents=Sum("cost_cents")):
        if _hidden(row["team_id"], visible) == OTHER_TEAMS:
            others.append(row)
        else:
            per[row["team_id"]].append(row)
    teams, _ = _slugs()
    out = [
        {
            "team": teams[tid].slug if tid is not None and tid in teams else None,
            "team_name": teams[tid].label if tid is not None and tid in teams else "unattributed",
            **_class_columns(rows),
            "aggregated": False,
        }
        for tid, rows in per.items()
    ]
    out.sort(key=lambda r: (r["team"] is None, r["team"] or ""))
    if others:
        out.append({"team": None, "team_name": OTHER_TEAMS, **_class_columns(others), "aggregated": True})
    return out


def fleet_summary(*, period: Period, visible: Visible = None) -> dict[str, Any]:
    """The Fleet page. Totals, classes and nodes are everyone's; holders, teams and idle-held GPUs
    name only the `visible` teams' holders (the rest summed, see fleet_holders)."""
    classes = fleet_classes(period)
    billed = sum(classes[c]["gpu_hours"] for c in PRICED_CLASSES)
    inst = classes["instrumented"]["gpu_hours"]
    now = timezone.now()
    idle = idle_held_now(now=now, visible=visible)
    return {
        "period": period.as_dict(),
        "billed_gpu_hours": round(billed, 3),
        "instrumented_gpu_hours": inst,
        "coverage": round(inst / billed, 4) if billed else None,
        "cost_usd": round(sum(classes[c]["usd"] for c in PRICED_CLASSES), 2),
        "classes": classes,
        "nodes": fleet_nodes(period, limit=20),
        "holders": fleet_holders(period, limit=20, visible=visible),
        "teams": fleet_teams(period, visible=visible),
        "sees_all_teams": visible is None,
        "idle_held_now": [
            {**row, "since": row["since"].isoformat(), "held_minutes": round((now - row["since"]).total_seconds() / 60, 1)}
            for row in idle
        ],
        "node_count": Node.objects.count(),
        "last_report_at": _iso(Node.objects.aggregate(at=Max("last_seen_at"))["at"]),
    }


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def latest_fleet_day() -> Any:
    return FleetDay.objects.aggregate(day=Max("day"))["day"]


def rules_preview(*, rules: list[Rule]) -> dict[str, Any]:
    """What the last day's fleet time would map to under `rules` (not saved): each holder's hours
    and dollars, the rule that would match it, and its team and project now and then."""
    day = latest_fleet_day()
    if day is None:
        return {"day": None, "holders": [], "totals": []}
    rows = FleetDay.objects.filter(day=day).exclude(cls=GpuClass.EMPTY).exclude(cls=GpuClass.UNKNOWN)
    sums = rows.values("holder_id").annotate(ns=Sum("gpu_ns"), cents=Sum("cost_cents"))
    owners = {
        o.pk: o
        for o in Owner.objects.filter(pk__in=[r["holder_id"] for r in sums if r["holder_id"]]).select_related("team", "project")
    }
    teams, projects = _slugs()
    holders = []
    totals: dict[tuple[str | None, str | None], dict[str, Any]] = {}
    for row in sums:
        owner = owners.get(row["holder_id"]) if row["holder_id"] is not None else None
        data = owner.data if owner else None
        if owner and owner.kind == "run":
            team_id, project_id, index = owner.team_id, owner.project_id, None
        elif data:
            team_id, project_id, index = owner_attribute(data, rules)
        else:
            team_id, project_id, index = None, None, None
        team = teams[team_id].slug if team_id in teams else None
        project = projects[project_id].slug if project_id in projects else None
        item = {
            "holder": owner_label(data),
            "kind": owner.kind if owner else None,
            "gpu_hours": _hours(row["ns"] or 0),
            "usd": _usd(row["cents"] or 0),
            "rule": index,
            "team": team,
            "project": project,
            "current_team": owner.team.slug if owner and owner.team else None,
            "current_project": owner.project.slug if owner and owner.project else None,
        }
        holders.append(item)
        total = totals.setdefault((team, project), {"team": team, "project": project, "gpu_hours": 0.0, "usd": Decimal(0)})
        total["gpu_hours"] = round(total["gpu_hours"] + item["gpu_hours"], 3)
        total["usd"] += Decimal(row["cents"] or 0) / 100
    holders.sort(key=lambda r: (-float(r["usd"] or 0), str(r["holder"])))
    out_totals = sorted(
        ({**t, "usd": float(t["usd"])} for t in totals.values()),
        key=lambda t: (t["team"] is None, t["team"] or "", t["project"] or ""),
    )
    return {"day": day.isoformat(), "holders": holders, "totals": out_totals}
