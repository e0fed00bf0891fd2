"""Every CSV the service answers goes through phantomhub.csvfile: a text cell a spreadsheet would
run as a formula comes out neutralised, on every CSV endpoint, while figures stay numbers."""

from __future__ import annotations

import ast
import csv
import io
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile, Project, Team
from phantomhub.accounts.services import project_token_create
from phantomhub.csvfile import csv_cell, csv_lines, csv_text, csv_uncell
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.services import RuleInput, node_token_create, rules_replace
from phantomhub.pricing.models import PriceEntry
from phantomhub.pricing.services import price_set
from phantomhub.waste import sweeps

pytestmark = pytest.mark.django_db
HOSTILE = "=cmd|' /C calc'!A0"
NEUTRALISED = "'" + HOSTILE
ROOT = Path(__file__).resolve().parents[2]
S = 10**9
WRITERS = {"writer", "DictWriter"}


def _rows(response: Any) -> list[dict[str, str]]:
    assert response.status_code == 200, response.content[:300] if hasattr(response, "content") else response
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return list(csv.DictReader(io.StringIO(body.decode())))


def test_text_cells_that_start_a_formula_are_neutralised_and_numbers_stay_numbers() -> None:
    for text in (HOSTILE, "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"):
        assert csv_cell(text) == "'" + text
        assert csv_uncell(csv_cell(text)) == text
    for number in (-12.5, -3, Decimal("-0.50"), 0, 7.25):
        assert csv_cell(number) == number  # a negative number is a number to a spreadsheet, not a formula
    assert csv_cell(None) == "" and csv_cell("plain") == "plain" and csv_uncell("'quoted") == "'quoted"
    text = csv_text(["name", "usd"], [[HOSTILE, Decimal("-1.50")], ["-1.50", -2]])
    assert text == "name,usd\n'=cmd|' /C calc'!A0,-1.50\n'-1.50,-2\n"
    assert "".join(csv_lines(["a"], [])) == "a\n"  # no rows: the header alone


def _csv_writers(path: Path) -> list[str]:
    """Where a module calls csv.writer / csv.DictWriter (or imports them by name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        by_attribute = (
            isinstance(node, ast.Attribute)
            and node.attr in WRITERS
            and isinstance(node.value, ast.Name)
            and node.value.id == "csv"
        )
        by_import = isinstance(node, ast.ImportFrom) and node.module == "csv" and bool({a.name for a in node.names} & WRITERS)
        if by_attribute or by_import:
            found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    return found


def test_no_module_but_csvfile_writes_csv() -> None:
    writers = [hit for path in sorted((ROOT / "phantomhub").rglob("*.py")) for hit in _csv_writers(path)]
    assert writers and all(hit.startswith("phantomhub/csvfile.py:") for hit in writers), writers
    # and nobody reaches into another app's private CSV helper any more (fleet used portal's `_lines`)
    assert not [p for p in (ROOT / "phantomhub").rglob("*.py") if "exports import _" in p.read_text()]


@pytest.fixture
def hostile_org(db: None) -> dict[str, Any]:
    """A team, a project and a run all named like a formula, analysed, and an admin to read them."""
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("36"), effective_from=datetime(2020, 1, 1, tzinfo=UTC))
    team = Team.objects.create(slug=HOSTILE, name=HOSTILE)
    project = Project.objects.create(slug=HOSTILE, name=HOSTILE, team=team)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {project_token_create(project=project, name='t').raw}")
    start = timezone.now().replace(microsecond=0) - timedelta(days=2)
    run_id = str(uuid.uuid4())
    body = {"id": run_id, "name": HOSTILE, "gpu_model": "H100-SXM", "gpu_count": 1, "dtype": "bf16", "tags": [HOSTILE],
            "allocation_start": start.isoformat(), "started_at": start.isoformat()}  # fmt: skip
    assert client.post("/api/v1/runs", body, format="json").status_code == 201
    t0, n = int(start.timestamp()) * S, 300
    steps = {"step": list(range(n)), "t_start_ns": [t0 + i * S for i in range(n)], "dur_ns": [S] * n,
             "data_ns": [S // 4] * n, "forward_ns": [S // 4] * n, "backward_ns": [S // 2] * n,
             "flops": [0.15 * 989.4e12] * n}  # fmt: skip
    assert client.post(f"/api/v1/runs/{run_id}/steps", {"rank": 0, "steps": steps}, format="json").status_code == 200
    event = {"id": "end", "kind": "finish", "t_ns": t0 + n * S, "status": "finished"}
    client.post(f"/api/v1/runs/{run_id}/events", {"events": [event]}, format="json")
    sweeps.analysis_sweep(inline=True)
    admin = User.objects.create_user("root")
    Profile.objects.create(user=admin, is_org_admin=True)
    reader = APIClient()
    reader.force_authenticate(admin)
    return {"reader": reader, "month": f"{start:%Y-%m}", "team": team}


def test_the_runs_csv_neutralises_a_run_name(hostile_org: dict[str, Any]) -> None:
    (row,) = _rows(hostile_org["reader"].get("/api/v1/portal/runs.csv"))
    assert (row["name"], row["team"], row["project"], row["tags"]) == (NEUTRALISED,) * 4
    assert float(row["cost_usd"]) > 0


@pytest.mark.parametrize(
    ("kind", "columns"), [("teams", ["team"]), ("projects", ["project", "team"]), ("runs", ["run", "team", "project"])]
)
def test_every_leaderboard_csv_neutralises_its_names(hostile_org: dict[str, Any], kind: str, columns: list[str]) -> None:
    (row,) = _rows(hostile_org["reader"].get(f"/api/v1/portal/leaderboards/{kind}.csv", {"period": "90d"}))
    assert [row[c] for c in columns] == [NEUTRALISED] * len(columns)


def test_the_finance_csv_neutralises_names_and_keeps_its_figures_numbers(hostile_org: dict[str, Any]) -> None:
    rows = _rows(hostile_org["reader"].get(f"/api/v1/portal/finance/{hostile_org['month']}.csv"))
    assert (rows[0]["team"], rows[0]["project"]) == (NEUTRALISED, NEUTRALISED)
    assert rows[-1]["team"] == "TOTAL" and rows[-1]["cost_usd"] == rows[0]["cost_usd"]
    assert Decimal(rows[0]["cost_usd"]) > 0 and len(rows[0]["cost_usd"].split(".")[1]) == 2  # a number, two places


def test_the_price_book_csv_neutralises_a_provider_and_imports_back_as_it_was(db: None) -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("2.5"), provider=HOSTILE, note="@note",
              effective_from=datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip
    admin = User.objects.create_user("root")
    Profile.objects.create(user=admin, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    response = client.get("/api/v1/pricing/prices.csv")
    (row,) = _rows(response)
    assert (row["provider"], row["note"], row["usd_per_gpu_hour"]) == (NEUTRALISED, "'@note", "2.5000")
    PriceEntry.objects.all().delete()
    assert client.post("/api/v1/pricing/prices.csv", response.content.decode(), content_type="text/csv").status_code == 201
    entry = PriceEntry.objects.get()
    assert (entry.provider, entry.note, entry.usd_per_gpu_hour) == (HOSTILE, "@note", Decimal("2.5"))


def test_the_fleet_csvs_neutralise_provider_and_team_names(db: None, settings: Any) -> None:
    from tests.fleet.conftest import HOUR_START, NS, T0, node_body, node_meta
    from tests.fleet.test_ground_truth import OWNERS, one_per_class

    settings.FLEET_RAW_DAYS = 3650  # the samples carry fixed dates in 2026
    PriceEntry.objects.create(gpu="H100-SXM", provider=HOSTILE, region="us-east-1", usd_per_gpu_hour=Decimal("3.6"),
                              effective_from=datetime(2026, 1, 1, tzinfo=UTC))  # fmt: skip
    team = Team.objects.create(slug=HOSTILE, name=HOSTILE)
    rules_replace(rules=[RuleInput("k8s_label", "team", "nlp", team, None)])
    nodes = APIClient()
    nodes.credentials(HTTP_AUTHORIZATION=f"Bearer {node_token_create(name='t', hostnames=['*']).raw}")
    times = [T0 + (i + 1) * 15 * NS for i in range(240)]
    body = node_body(t_ns=times, activity=one_per_class, owners=OWNERS, node=node_meta(provider=HOSTILE))
    answer = nodes.post("/api/v1/nodes/samples", body, format="json")
    assert answer.status_code == 200, answer.content
    fleet_derive_pending()
    admin = User.objects.create_user("root")
    Profile.objects.create(user=admin, is_org_admin=True)
    reader = APIClient()
    reader.force_authenticate(admin)
    day = f"{HOUR_START:%Y-%m-%d}..{HOUR_START:%Y-%m-%d}"
    (node,) = _rows(reader.get("/api/v1/fleet/nodes.csv", {"period": day}))
    assert node["provider"] == NEUTRALISED and float(node["cost_usd"]) == pytest.approx(14.4)
    assert NEUTRALISED in {r["team"] for r in _rows(reader.get("/api/v1/fleet/holders.csv", {"period": day}))}
    assert NEUTRALISED in {r["team"] for r in _rows(reader.get("/api/v1/fleet/teams.csv", {"period": day}))}
