"""FOCUS invoice import: all or nothing with row-numbered errors, idempotent, matched to nodes,
and reconciled with the fleet's measured cost in the finance review."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.fleet.derive import fleet_derive_pending
from phantomhub.fleet.focus import focus_import
from phantomhub.fleet.models import InvoiceImport, InvoiceLine
from phantomhub.fleet.services import rules_replace
from phantomhub.periods import month_period
from phantomhub.portal.finance import finance_review
from tests.fleet.test_ground_truth import post_hour, rules

pytestmark = pytest.mark.django_db

HEADER = "BilledCost,ResourceId,ChargePeriodStart,ChargePeriodEnd,ServiceName,SkuId,Tags,BillingCurrency\n"


def line(cost: str, resource: str = "i-gpu-a-17", start: str = "2026-09-21T10:00:00Z", tags: str = "{}", sku: str = "p5") -> str:
    end = start[:11] + f"{int(start[11:13]) + 1:02d}" + start[13:] if start[:4].isdigit() else "2026-09-21T11:00:00Z"
    return f'{cost},{resource},{start},{end},Amazon EC2,{sku},"{tags.replace(chr(34), chr(34) * 2)}",USD\n'


def invoice(*lines: str) -> str:
    return HEADER + "".join(lines)


def test_the_same_file_imported_twice_changes_nothing(db: None) -> None:
    text = invoice(line("98.32"), line("5.00", resource="vol-1", sku="ebs"))
    first = focus_import(text=text, filename="sept.csv")
    assert (first.created, first.lines, first.lines_new) == (True, 2, 2)
    again = focus_import(text=text, filename="sept.csv")
    assert again.duplicate_file and not again.created
    assert InvoiceImport.objects.count() == 1 and InvoiceLine.objects.count() == 2


def test_a_line_already_imported_in_another_file_is_not_stored_twice(db: None) -> None:
    focus_import(text=invoice(line("98.32")))
    second = focus_import(text=invoice(line("98.32"), line("7.00", start="2026-09-21T11:00:00Z")))
    assert (second.lines, second.lines_new) == (2, 1)
    assert InvoiceLine.objects.count() == 2


def test_errors_name_their_rows_and_nothing_is_written(db: None) -> None:
    text = invoice(
        line("98.32"),
        line("lots"),  # line 3
        line("1.00", start="yesterday"),  # line 4
        line("2.00", tags="[1, 2]", sku="x"),  # line 5
        line("98.32"),  # line 6: the same charge as line 2
    )
    result = focus_import(text=text)
    assert result.errors == [
        "line 3: BilledCost: 'lots' is not a number",
        "line 4: ChargePeriodStart: 'yesterday' is not an ISO 8601 datetime",
        "line 5: Tags: not a JSON object",
        "line 6: the same charge as line 2",
    ]
    assert not InvoiceImport.objects.exists() and not InvoiceLine.objects.exists()


def test_a_changed_cost_for_a_charge_already_imported_is_refused(db: None) -> None:
    focus_import(text=invoice(line("98.32")))
    result = focus_import(text=invoice(line("99.00")))
    assert result.errors == ["line 2: a charge already imported with BilledCost 98.320000"]
    assert InvoiceLine.objects.count() == 1


def test_a_missing_column_is_named(db: None) -> None:
    result = focus_import(text="ResourceId,BilledCost\ni-1,3\n")
    assert result.errors == ["line 1: header: missing column(s) ChargePeriodStart, ChargePeriodEnd, BillingCurrency"]


def test_lines_match_nodes_by_resource_id_or_tag_and_reconcile_per_team(node_client, h100_price, teams) -> None:
    rules_replace(rules=rules(teams))
    post_hour(node_client)  # one node, $14.40 measured: nlp $7.20, vision $3.60, unattributed (empty) $3.60
    fleet_derive_pending()
    result = focus_import(
        text=invoice(
            line("10.00"),  # by resource id
            line("6.00", resource="", tags='{"phantomhub-node": "gpu-a-17"}', sku="p5-b"),  # by tag
            line("3.00", resource="vol-9", sku="ebs"),  # not a GPU line
        )
    )
    assert result.matched == 2
    review = finance_review(period=month_period("2026-09"))
    inv = review["invoice"]
    assert inv["totals"] == {"billed_usd": 16.0, "measured_usd": 14.4, "unexplained_usd": 1.6}
    assert inv["unmatched_billed_usd"] == 3.0
    # $16.00 billed split as measured: nlp 7.20/14.40, vision and unattributed 3.60/14.40 each
    assert {r["team"]: (r["billed_usd"], r["measured_usd"], r["unexplained_usd"]) for r in inv["rows"]} == {
        "nlp": (8.0, 7.2, 0.8),
        "vision": (4.0, 3.6, 0.4),
        None: (4.0, 3.6, 0.4),
    }


def test_the_api_imports_for_finance_and_answers_row_numbered_errors(db: None) -> None:
    user = User.objects.create_user("fin", password="pw")
    Profile.objects.create(user=user, is_finance=True)
    client = APIClient()
    client.force_authenticate(user)
    bad = client.post("/api/v1/fleet/invoices", invoice(line("x")), content_type="text/csv")
    assert bad.status_code == 400
    assert bad.json()["error"]["fields"] == {"line 2": "BilledCost: 'x' is not a number"}
    ok = client.post("/api/v1/fleet/invoices?filename=sept.csv", invoice(line("1.00")), content_type="text/csv")
    assert ok.status_code == 201 and ok.json()["lines_new"] == 1
    again = client.post("/api/v1/fleet/invoices", invoice(line("1.00")), content_type="text/csv")
    assert again.status_code == 200 and again.json()["duplicate_file"] is True


def test_importfocus_imports_once_and_says_so(db: None, tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "bill.csv"
    path.write_text(invoice(line("1.00")))
    call_command("importfocus", str(path))
    call_command("importfocus", str(path))
    out = capsys.readouterr().out
    assert "1 lines, 1 new" in out and "already imported; nothing changed" in out
    path.write_text(invoice(line("nope")))
    with pytest.raises(CommandError, match="line 2: BilledCost"):
        call_command("importfocus", str(path))


def test_nul_characters_and_sub_micro_cents_are_handled(db: None) -> None:
    bad = focus_import(text=invoice(line("1.00", tags='{"a": "x\\u0000y"}')))
    assert bad.errors == ["line 2: Tags: NUL characters are not allowed"]
    assert focus_import(text=invoice(line("1.0000004"))).created
    assert InvoiceLine.objects.get().billed_cost == Decimal("1.000000")
    assert focus_import(text=invoice(line("1.0000004"), line("2", sku="other"))).lines_new == 1  # the first line is known
