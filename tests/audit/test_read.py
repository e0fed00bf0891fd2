"""Reading the audit log: who may read what (finance: prices and months only), the filters, the
pages, the refusals of bad input (400 naming the parameter), and the CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from phantomhub.accounts.models import Team
from phantomhub.accounts.services import personal_token_create, project_token_for_slugs
from phantomhub.audit.context import acting
from phantomhub.audit.models import AuditEntry
from phantomhub.portal.models import MonthAction, MonthLog
from phantomhub.pricing.services import price_set
from tests.audit.conftest import mark, signed_in

pytestmark = [pytest.mark.django_db, pytest.mark.backends]  # also on SQLite, the embedded default


@pytest.fixture
def log(people: dict[str, User]) -> dict[str, Any]:
    """Entries of four kinds: a price (by root), a month close (by fin), a team (by SCIM) and the
    team's rename (by root); returns the entry ids by name."""
    start = mark()
    with acting("root", person=people["root"], address="192.0.2.10"):
        price = price_set(gpu='=HYPERLINK("x")', usd_per_gpu_hour=Decimal("2.5"), effective_from=timezone.now())
    with acting("fin", person=people["fin"], address="192.0.2.11"):
        MonthLog.objects.create(month=date(2026, 9, 1), action=MonthAction.CLOSE, totals={"cost_usd": 10})
    with acting("SCIM"):
        team = Team.objects.create(slug="ops", name="ops")
    with acting("root", person=people["root"]):
        team.display_name = "Operations"
        team.save()
    ids = list(AuditEntry.objects.filter(id__gt=start).order_by("id").values_list("id", flat=True))
    assert len(ids) == 4
    return {"price": ids[0], "month": ids[1], "team": ids[2], "rename": ids[3], "price_id": price.pk, "team_id": team.pk}


def _ids(response: Any) -> list[int]:
    assert response.status_code == 200, response.content
    return [e["id"] for e in response.json()["entries"]]


def test_an_entry_as_the_page_shows_it(people: dict[str, User], log: dict[str, Any]) -> None:
    body = signed_in(people["root"]).get("/api/v1/audit?kind=team&action=update").json()
    (entry,) = body["entries"]
    assert entry == {
        "id": log["rename"],
        "at": entry["at"],
        "actor": "root",
        "address": None,
        "kind": "team",
        "object_type": "team",
        "object_id": str(log["team_id"]),
        "object": "ops",
        "action": "update",
        "changes": [{"field": "display_name", "before": "", "after": "Operations"}],
    }
    assert datetime.fromisoformat(entry["at"]) > timezone.now() - timedelta(minutes=1)
    assert body["next"] is None
    assert [k["kind"] for k in body["kinds"]][:2] == ["price", "month"]


def test_admins_read_everything_finance_prices_months_and_budgets_no_one_else(
    people: dict[str, User], log: dict[str, Any], owner: Any
) -> None:
    admin = signed_in(people["root"])
    everything = _ids(admin.get("/api/v1/audit?limit=200"))
    assert {log["price"], log["month"], log["team"], log["rename"]} <= set(everything)
    finance = signed_in(people["fin"])
    seen = finance.get("/api/v1/audit?limit=200").json()
    assert {e["kind"] for e in seen["entries"]} == {"price", "month"}
    assert [k["kind"] for k in seen["kinds"]] == ["price", "month", "budget"]  # budget: finance sets them
    refused = finance.get("/api/v1/audit?kind=team")
    assert refused.status_code == 403 and refused.json()["error"]["fields"] == {"kind": "not readable by finance"}
    csv_rows = list(csv.DictReader(io.StringIO(b"".join(finance.get("/api/v1/audit.csv").streaming_content).decode())))
    assert {row["kind"] for row in csv_rows} == {"price", "month"}
    # A personal token reads with its owner's permission; project tokens and team members are refused.
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Bearer {personal_token_create(user=people['fin']).raw}")
    assert {e["kind"] for e in by_token.get("/api/v1/audit?limit=200").json()["entries"]} == {"price", "month"}
    member = signed_in(people["ann"]).get("/api/v1/audit")
    assert member.status_code == 403 and "organization admins" in member.json()["error"]["message"]
    assert owner.client.get("/api/v1/audit").status_code == 403
    assert APIClient().get("/api/v1/audit.csv").status_code == 401


def test_filters(people: dict[str, User], log: dict[str, Any]) -> None:
    admin = signed_in(people["root"])
    assert _ids(admin.get("/api/v1/audit?actor=SCIM")) == [log["team"]]
    assert _ids(admin.get("/api/v1/audit?actor=FIN")) == [log["month"]]  # any case
    assert _ids(admin.get(f"/api/v1/audit?kind=team&object_id={log['team_id']}")) == [log["rename"], log["team"]]  # newest first
    assert _ids(admin.get(f"/api/v1/audit?kind=price&object_id={log['price_id']}")) == [log["price"]]
    assert _ids(admin.get(f"/api/v1/audit?kind=team&object_id={log['team_id']}&action=create")) == [log["team"]]
    assert _ids(admin.get("/api/v1/audit?q=operations")) == [log["rename"]]  # in the change
    assert _ids(admin.get("/api/v1/audit?q=hyperlink")) == [log["price"]]  # in the object's name
    today = timezone.now().date()
    assert log["price"] in _ids(admin.get(f"/api/v1/audit?from={today}&to={today}"))
    assert _ids(admin.get(f"/api/v1/audit?to={today - timedelta(days=1)}")) == []
    assert _ids(admin.get(f"/api/v1/audit?from={today + timedelta(days=1)}")) == []
    moment = AuditEntry.objects.get(pk=log["month"]).timestamp
    after_month = _ids(admin.get("/api/v1/audit", {"from": moment.isoformat(), "kind": "month"}))
    assert after_month == [log["month"]]
    assert _ids(admin.get("/api/v1/audit", {"to": moment.isoformat(), "kind": "month"})) == []  # to is exclusive


def test_a_person_found_with_their_personal_token(people: dict[str, User]) -> None:
    start = mark()
    with acting("root (token phk_abcd1234…)", person=people["root"]):
        Team.objects.create(slug="tokened", name="t")
    ids = _ids(signed_in(people["root"]).get("/api/v1/audit?actor=root&kind=team"))
    assert ids == [e.pk for e in AuditEntry.objects.filter(id__gt=start)]


def test_pages_follow_the_cursor(people: dict[str, User], db: None) -> None:
    start = mark()
    with acting("system"):
        for i in range(7):
            Team.objects.create(slug=f"t{i}", name=f"t{i}")
    admin = signed_in(people["root"])
    seen: list[int] = []
    url = "/api/v1/audit?kind=team&actor=system&limit=3"
    page = admin.get(url).json()
    while True:
        seen += [e["id"] for e in page["entries"]]
        if page["next"] is None:
            break
        page = admin.get(f"{url}&cursor={page['next']}").json()
    made = list(AuditEntry.objects.filter(kind="team", actor_label="system").order_by("-id").values_list("id", flat=True))
    assert seen == made and len(AuditEntry.objects.filter(id__gt=start)) == 7


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kind=prices", "kind"),
        ("action=edit", "action"),
        ("from=yesterday", "from"),
        ("to=2026-13-01", "to"),
        ("to=9999-12-31", "to"),
        ("from=9999-12-31T23:00:00-14:00", "from"),
        ("from=1999-12-31", "from"),
        ("from=2026-09-02&to=2026-09-01", "to"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=x", "cursor"),
        ("q=" + "x" * 201, "q"),
        ("actor=" + "a" * 201, "actor"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(people: dict[str, User], query: str, field: str) -> None:
    for path in ("/api/v1/audit", "/api/v1/audit.csv"):
        if path.endswith(".csv") and field in ("limit", "cursor"):
            continue  # the CSV has no pages
        response = signed_in(people["root"]).get(f"{path}?{query}")
        assert response.status_code == 400, (path, query, response.content)
        assert field in response.json()["error"]["fields"], response.json()


def test_the_csv_one_row_per_changed_field_formulas_neutralised(people: dict[str, User], log: dict[str, Any]) -> None:
    response = signed_in(people["root"]).get("/api/v1/audit.csv?kind=price")
    assert response.status_code == 200 and response["Content-Type"] == "text/csv"
    assert response["Content-Disposition"].startswith('attachment; filename="phantomhub-audit-')
    text = b"".join(response.streaming_content).decode()
    assert text.splitlines()[0] == "id,at,actor,address,kind,object_type,object_id,object,action,field,before,after"
    rows = list(csv.DictReader(io.StringIO(text)))
    assert {row["id"] for row in rows} == {str(log["price"])}
    by_field = {row["field"]: row for row in rows}
    assert "id" not in by_field  # the object's own id is the object_id column
    assert by_field["gpu"]["after"] == '\'=HYPERLINK("x")'  # text a spreadsheet would run is shown as text
    assert by_field["gpu"]["object"].startswith("'=HYPERLINK")
    assert by_field["usd_per_gpu_hour"]["after"] == "2.5"
    assert by_field["is_example"]["after"] == "false"  # JSON's false, not Python's
    assert all(row["actor"] == "root" and row["address"] == "192.0.2.10" and row["action"] == "create" for row in rows)
    month = signed_in(people["root"]).get("/api/v1/audit.csv?kind=month")
    month_rows = list(csv.DictReader(io.StringIO(b"".join(month.streaming_content).decode())))
    assert {r["field"]: r["after"] for r in month_rows}["totals"] == '{"cost_usd": 10}'


def test_a_project_token_is_refused_whatever_it_asks(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {project_token_for_slugs(team_slug='a', project_slug='b').raw}")
    for path in ("/api/v1/audit", "/api/v1/audit.csv", "/api/v1/audit?kind=bogus"):
        assert client.get(path).status_code == 403


def test_entries_written_before_midnight_utc_count_for_that_day(people: dict[str, User]) -> None:
    start = mark()
    with acting("system"):
        Team.objects.create(slug="late", name="late")
    entry = AuditEntry.objects.get(id__gt=start)
    late = datetime(2026, 9, 30, 23, 59, 59, tzinfo=UTC)
    AuditEntry.objects.create(
        content_type=entry.content_type, object_pk="1", object_repr="late", action=0, timestamp=late, kind="team"
    )
    admin = signed_in(people["root"])
    assert len(_ids(admin.get("/api/v1/audit?kind=team&from=2026-09-30&to=2026-09-30"))) == 1
    assert _ids(admin.get("/api/v1/audit?kind=team&from=2026-10-01&to=2026-10-01")) == []


def test_the_filters_are_in_the_schema(db: None) -> None:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)

    def names(path: str) -> set[str]:
        return {p["name"] for p in schema["paths"][path]["get"].get("parameters", []) if p["in"] == "query"}

    filters = {"actor", "kind", "object_id", "action", "from", "to", "q"}
    assert names("/api/v1/audit") == filters | {"cursor", "limit"}
    assert names("/api/v1/audit.csv") == filters  # every matching entry: no pages
    assert {"400", "401", "403"} <= set(schema["paths"]["/api/v1/audit"]["get"]["responses"])
