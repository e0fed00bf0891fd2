"""Writes to budgets: checked field by field (a 4xx naming the field, never a 500, never a partial
write), and never two budgets of one scope, target and GPU model over the same month."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db import transaction

from phantomhub.accounts.models import Project, Team
from phantomhub.periods import FIRST_MONTH, LAST_MONTH
from phantomhub.planning.models import Budget, BudgetScope
from phantomhub.pricing.catalog import gpu_resolve

# A month's budget above this is a unit mistake (cents for dollars, a year for a month): a billion
# dollars a month is far beyond any one team's GPU spend. docs/budgets.md, "Bounds".
MAX_BUDGET_USD = Decimal("1000000000")
_LENGTHS = {"gpu_key": 128, "note": 200}


class BudgetError(ValueError):
    """A field the budget cannot hold; `status` 400, or 409 for an overlap with another budget."""

    def __init__(self, field: str, message: str, *, status: int = 400, code: str = "invalid") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status
        self.code = code


@dataclass(frozen=True)
class BudgetFields:
    """One budget as written: its target resolved, months as their first day."""

    scope: str
    team: Team | None
    project: Project | None
    gpu_key: str
    amount_usd: Decimal
    effective_from: date
    effective_to: date | None
    note: str = ""


def month_first(text: Any, *, field: str) -> date:
    """A month `YYYY-MM` (within the range of telemetry) as its first day."""
    value = _string(field, text).strip()
    parts = value.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or len(parts[0]) != 4 or len(parts[1]) != 2:
        raise BudgetError(field, f"{value!r} is not a month (YYYY-MM)")
    if not 1 <= int(parts[1]) <= 12:
        raise BudgetError(field, f"{value!r} is not a month (YYYY-MM)")
    if not FIRST_MONTH <= value <= LAST_MONTH:
        raise BudgetError(field, f"must be a month from {FIRST_MONTH} to {LAST_MONTH}")
    return date(int(parts[0]), int(parts[1]), 1)


def amount_check(amount: Any) -> Decimal:
    if isinstance(amount, bool) or not isinstance(amount, (str, int, float, Decimal)):
        raise BudgetError("amount_usd", "must be a number (or a decimal string)")
    try:
        value = Decimal(str(amount).strip())
    except ArithmeticError:
        raise BudgetError("amount_usd", f"{str(amount)[:40]!r} is not a number") from None
    if not value.is_finite():
        raise BudgetError("amount_usd", "must be a finite number")
    if value < 0:
        raise BudgetError("amount_usd", "must not be negative")
    if value > MAX_BUDGET_USD:
        raise BudgetError("amount_usd", f"must be at most {MAX_BUDGET_USD:,} a month (a larger figure is a unit mistake)")
    if value != value.quantize(Decimal("0.01")):
        raise BudgetError("amount_usd", "must have at most 2 decimal places (cents)")
    return value.quantize(Decimal("0.01"))


def _string(field: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BudgetError(field, "must be a string")
    return value


def text_check(field: str, value: Any) -> str:
    text = _string(field, value).strip()
    if len(text) > _LENGTHS[field]:
        raise BudgetError(field, f"must be at most {_LENGTHS[field]} characters")
    if "\x00" in text:
        raise BudgetError(field, "NUL characters are not allowed")
    return text


def target_resolve(*, scope: Any, team: Any, project: Any) -> tuple[str, Team | None, Project | None]:
    """The scope and its one target, by slug: a team for a team budget, a project for a project's."""
    team, project = _string("team", team), _string("project", project)
    if not isinstance(scope, str) or scope not in BudgetScope.values:
        raise BudgetError("scope", f"must be one of {', '.join(BudgetScope.values)}")
    if scope == BudgetScope.TEAM:
        if project:
            raise BudgetError("project", "a team budget names a team, not a project")
        found = Team.objects.filter(slug=str(team or "")).first()
        if found is None:
            raise BudgetError("team", f"no team {str(team or '')[:64]!r}" if team else "required for a team budget")
        return scope, found, None
    if team:
        raise BudgetError("team", "a project budget names its project (its team follows)")
    proj = Project.objects.filter(slug=str(project or "")).select_related("team").first()
    if proj is None:
        raise BudgetError("project", f"no project {str(project or '')[:64]!r}" if project else "required for a project budget")
    return scope, None, proj


def gpu_key_resolve(text: str) -> str:
    """A GPU model as the daily rows name it: the catalog's key ("h100" is "H100-SXM"), or the
    name as given for a GPU outside the catalog (runs report those names as they are)."""
    spec = gpu_resolve(text) if text else None
    return spec.key if spec else text


def span_check(start: date, end: date | None) -> None:
    if end is not None and end < start:
        raise BudgetError("effective_to", "must not be before effective_from")


def budget_check_overlap(fields: BudgetFields, *, exclude_id: int | None = None) -> None:
    """409 naming effective_from when another budget of the same scope, target and GPU model
    covers a month of this one's span. Callers hold the target's lock (_lock_target)."""
    same = Budget.objects.filter(scope=fields.scope, team=fields.team, project=fields.project, gpu_key=fields.gpu_key)
    if exclude_id is not None:
        same = same.exclude(pk=exclude_id)
    if fields.effective_to is not None:
        same = same.filter(effective_from__lte=fields.effective_to)
    other = same.exclude(effective_to__lt=fields.effective_from).order_by("effective_from").first()
    if other is not None:
        span = f"{other.effective_from:%Y-%m}..{f'{other.effective_to:%Y-%m}' if other.effective_to else 'open-ended'}"
        raise BudgetError(
            "effective_from",
            f"overlaps budget {other.pk} ({span}) of the same {fields.scope}"
            f"{' and GPU model' if fields.gpu_key else ''}: end that one first, or pick months it does not cover",
            status=409,
            code="overlap",
        )


def _lock_target(fields: BudgetFields) -> None:
    """Serialise budget writes per team (a project's budgets under its team's row), so two
    concurrent writes cannot both pass the overlap check."""
    team_id = fields.team.pk if fields.team is not None else (fields.project.team_id if fields.project else None)
    if team_id is not None:
        list(Team.objects.select_for_update().filter(pk=team_id).values_list("pk", flat=True))


def budget_fields(data: dict[str, Any], *, current: Budget | None = None) -> BudgetFields:
    """A budget's fields from a request body (a patch: over `current`), each checked and named."""
    if current is not None:
        for name in ("scope", "team", "project"):
            if name in data:
                raise BudgetError(name, "a budget's target cannot change: delete it and create another")
        scope, team, project = current.scope, current.team, current.project
    else:
        scope, team, project = target_resolve(scope=data.get("scope"), team=data.get("team"), project=data.get("project"))
    if current is None and "amount_usd" not in data:
        raise BudgetError("amount_usd", "required")
    if current is None and "effective_from" not in data:
        raise BudgetError("effective_from", "required")
    amount = amount_check(data.get("amount_usd", current.amount_usd if current else None))
    if "effective_from" in data or current is None:
        start = month_first(data.get("effective_from"), field="effective_from")
    else:
        start = current.effective_from
    end_raw = data.get("effective_to", f"{current.effective_to:%Y-%m}" if current and current.effective_to else None)
    end = month_first(end_raw, field="effective_to") if end_raw not in (None, "") else None
    span_check(start, end)
    return BudgetFields(
        scope=scope,
        team=team,
        project=project,
        gpu_key=gpu_key_resolve(text_check("gpu_key", data.get("gpu_key", current.gpu_key if current else ""))),
        amount_usd=amount,
        effective_from=start,
        effective_to=end,
        note=text_check("note", data.get("note", current.note if current else "")),
    )


@transaction.atomic
def budget_create(*, fields: BudgetFields, actor: Any = None) -> Budget:
    _lock_target(fields)
    budget_check_overlap(fields)
    return Budget.objects.create(
        scope=fields.scope, team=fields.team, project=fields.project, gpu_key=fields.gpu_key,
        amount_usd=fields.amount_usd, effective_from=fields.effective_from, effective_to=fields.effective_to,
        note=fields.note, created_by=actor if getattr(actor, "pk", None) else None,
    )  # fmt: skip


@transaction.atomic
def budget_update(*, budget: Budget, fields: BudgetFields) -> Budget:
    _lock_target(fields)
    budget_check_overlap(fields, exclude_id=budget.pk)
    for name in ("gpu_key", "amount_usd", "effective_from", "effective_to", "note"):
        setattr(budget, name, getattr(fields, name))
    budget.save()
    return budget


@transaction.atomic
def budget_delete(*, budget: Budget) -> None:
    budget.delete()
