"""Price books: resolution by specificity and date, piecewise segments, audit, API and CSV."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.pricing.models import PriceAudit, PriceEntry
from phantomhub.pricing.selectors import gpu_key_for, price_segments
from phantomhub.pricing.services import price_set, prices_export_csv, prices_import_csv

pytestmark = pytest.mark.django_db
D = datetime.fromisoformat


def test_example_prices_ship_marked_as_examples() -> None:
    assert PriceEntry.objects.count() > 20
    assert not PriceEntry.objects.filter(is_example=False).exists()
    fallback = PriceEntry.objects.get(gpu="H100-SXM", provider="", region="", tier="on_demand")
    assert "median" in fallback.note


def test_device_names_resolve_to_catalog_keys_and_unknown_names_stay() -> None:
    assert gpu_key_for("NVIDIA H100 80GB HBM3") == "H100-SXM"
    assert gpu_key_for("Mystery Accelerator 9000") == "Mystery Accelerator 9000"


def test_the_most_specific_price_in_force_wins() -> None:
    PriceEntry.objects.all().delete()
    start = D("2026-03-01T00:00:00+00:00")
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("3"), effective_from=start)
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("2"), provider="aws", effective_from=start)
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("1.5"), provider="aws", region="us-west-2", effective_from=start)
    price_set(gpu="A100-80GB", usd_per_gpu_hour=Decimal("0.9"), provider="aws", tier="spot", effective_from=start)

    def price(provider: str, region: str, tier: str = "on_demand") -> Decimal | None:
        segs = price_segments(
            gpu="A100-80GB", provider=provider, region=region, tier=tier, start=start, end=start + timedelta(hours=1)
        )
        assert len(segs) == 1
        return segs[0].usd_per_gpu_hour

    assert price("gcp", "") == Decimal("3")
    assert price("aws", "eu-west-1") == Decimal("2")
    assert price("aws", "us-west-2") == Decimal("1.5")  # region beats tier
    assert price("aws", "eu-west-1", "spot") == Decimal("0.9")
    assert price("gcp", "", "spot") == Decimal("3")  # on-demand is the fallback tier


def test_a_price_change_splits_a_run_into_segments_and_gaps_are_unpriced() -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("4"), effective_from=D("2026-01-01T00:00:00+00:00"))
    price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("2.5"), effective_from=D("2026-06-01T00:00:00+00:00"))
    first = PriceEntry.objects.get(usd_per_gpu_hour=4)
    assert first.effective_to == D("2026-06-01T00:00:00+00:00")
    segs = price_segments(
        gpu="H100-SXM", provider="", region="", tier="on_demand",
        start=D("2026-05-31T12:00:00+00:00"), end=D("2026-06-01T06:00:00+00:00"),
    )  # fmt: skip
    assert [(s.start.hour, s.end.hour, s.usd_per_gpu_hour) for s in segs] == [
        (12, 0, Decimal("4")),
        (0, 6, Decimal("2.5")),
    ]
    early = price_segments(
        gpu="H100-SXM", provider="", region="", tier="on_demand",
        start=D("2025-12-31T23:00:00+00:00"), end=D("2026-01-01T01:00:00+00:00"),
    )  # fmt: skip
    assert [s.usd_per_gpu_hour for s in early] == [None, Decimal("4")]
    assert early[0].source == "no price"


def test_a_price_inserted_before_an_existing_one_ends_where_it_starts() -> None:
    PriceEntry.objects.all().delete()
    price_set(gpu="L4", usd_per_gpu_hour=Decimal("1"), effective_from=D("2026-06-01T00:00:00+00:00"))
    early = price_set(gpu="L4", usd_per_gpu_hour=Decimal("2"), effective_from=D("2026-01-01T00:00:00+00:00"))
    assert early.effective_to == D("2026-06-01T00:00:00+00:00")


def test_every_change_is_audited() -> None:
    before = PriceAudit.objects.count()
    price_set(gpu="T4", usd_per_gpu_hour=Decimal("0.4"), effective_from=D("2026-02-01T00:00:00+00:00"), actor_label="test")
    actions = list(PriceAudit.objects.order_by("id").values_list("action", flat=True)[before:])
    assert actions == ["close", "create"]  # the example T4 fallback is closed, the new one created


def test_setprice_command(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "2.50", "--provider", "aws", "--from", "2026-01-01")
    entry = PriceEntry.objects.get(provider="aws", region="", gpu="H100-SXM")
    assert entry.usd_per_gpu_hour == Decimal("2.5") and entry.effective_from == D("2026-01-01T00:00:00+00:00")
    with pytest.raises(CommandError, match="not a number"):
        call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "cheap")
    with pytest.raises(CommandError, match="not a date"):
        call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "1", "--from", "June")


def test_csv_round_trip_and_all_or_nothing_import() -> None:
    text = prices_export_csv()
    PriceEntry.objects.all().delete()
    result = prices_import_csv(text=text.replace("True", "false"))
    assert result.errors == [] and result.created == text.count("\n") - 1
    assert PriceEntry.objects.filter(is_example=False).count() == result.created
    bad = "gpu,usd_per_gpu_hour,effective_from\nH100-SXM,2.0,2026-01-01\nH200,lots,2026-01-01\n"
    count = PriceEntry.objects.count()
    outcome = prices_import_csv(text=bad)
    assert outcome.created == 0 and outcome.errors == ["line 3: usd_per_gpu_hour: 'lots' is not a number"]
    assert PriceEntry.objects.count() == count
    out = io.StringIO()
    call_command("exportprices", stdout=out)
    assert out.getvalue().startswith("gpu,provider,region,tier,usd_per_gpu_hour")


@pytest.fixture
def admin_client() -> APIClient:
    user = User.objects.create_user("ada")
    Profile.objects.create(user=user, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def member_client() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.create_user("bob"))
    return client


def test_everyone_signed_in_reads_prices_and_only_org_admins_write(admin_client: APIClient, member_client: APIClient) -> None:
    assert APIClient().get("/api/v1/pricing/prices").status_code == 401
    assert member_client.get("/api/v1/pricing/prices").status_code == 200
    assert member_client.get("/api/v1/pricing/gpus").json()[0]["peak_tflops"]
    body = {"gpu": "H200", "usd_per_gpu_hour": "3.10", "provider": "aws", "effective_from": "2026-07-01T00:00:00Z"}
    assert member_client.post("/api/v1/pricing/prices", body, format="json").status_code == 403
    created = admin_client.post("/api/v1/pricing/prices", body, format="json")
    assert created.status_code == 201
    price_id = created.json()["id"]
    assert (
        admin_client.patch(f"/api/v1/pricing/prices/{price_id}", {"note": "contract"}, format="json").json()["note"] == "contract"
    )
    assert member_client.delete(f"/api/v1/pricing/prices/{price_id}").status_code == 403
    assert admin_client.delete(f"/api/v1/pricing/prices/{price_id}").status_code == 204
    audit = admin_client.get("/api/v1/pricing/audit").json()
    assert [row["action"] for row in audit[:3]] == ["delete", "update", "create"]
    assert audit[0]["actor"] == "ada"
    assert member_client.get("/api/v1/pricing/audit").status_code == 403


def test_bad_price_input_names_the_field(admin_client: APIClient) -> None:
    response = admin_client.post("/api/v1/pricing/prices", {"gpu": "H200", "usd_per_gpu_hour": "-1"}, format="json")
    assert response.status_code == 400 and "usd_per_gpu_hour" in response.json()["error"]["fields"]
    csv_bad = admin_client.post("/api/v1/pricing/prices.csv", "gpu,usd_per_gpu_hour\nH200,x\n", content_type="text/csv")
    assert csv_bad.status_code == 400 and "line 2" in csv_bad.json()["error"]["fields"]
    csv_ok = admin_client.post("/api/v1/pricing/prices.csv", "gpu,usd_per_gpu_hour\nH200,2.2\n", content_type="text/csv")
    assert csv_ok.status_code == 201 and csv_ok.json() == {"created": 1}
    assert admin_client.get("/api/v1/pricing/prices.csv")["Content-Type"] == "text/csv"


@pytest.mark.parametrize(
    ("price", "message"),
    [
        ("NaN", "must be a finite number"),
        ("Infinity", "must be a finite number"),
        ("1e12", "must be at most 100000"),
        ("-0.5", "must not be negative"),
        ("2.123456", "must have at most 4 decimal places"),
    ],
)
def test_csv_import_refuses_prices_that_are_not_finite_non_negative_and_sane(
    admin_client: APIClient, price: str, message: str
) -> None:
    count = PriceEntry.objects.count()
    text = f"gpu,usd_per_gpu_hour,effective_from\nH200,2.0,2026-01-01\nH100-SXM,{price},2026-01-01\n"
    response = admin_client.post("/api/v1/pricing/prices.csv", text, content_type="text/csv")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"line 3": f"usd_per_gpu_hour: {message}"}
    assert PriceEntry.objects.count() == count  # line 2 was fine, and is not imported either


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("H200,2.0,0001-01-01", "effective_from: must be from 2000-01-01 to before 2100-01-01"),
        ("H200,2.0,9999-12-31", "effective_from: must be from 2000-01-01 to before 2100-01-01"),
        ("H200,2.0,2026-02-30", "effective_from: '2026-02-30' is not an ISO 8601 datetime"),
        (",2.0,2026-01-01", "gpu: is required"),
        ("H200\x00,2.0,2026-01-01", "gpu: NUL characters are not allowed"),
        ("H200,2.0,2026-01-01,extra", "more fields than the header has columns"),
    ],
)
def test_csv_import_names_the_line_and_field_of_every_bad_row(admin_client: APIClient, row: str, field: str) -> None:
    count = PriceEntry.objects.count()
    text = f"gpu,usd_per_gpu_hour,effective_from\n{row}\n"
    response = admin_client.post("/api/v1/pricing/prices.csv", text, content_type="text/csv")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"line 2": field}
    assert PriceEntry.objects.count() == count


def test_csv_import_reports_every_bad_line_and_refuses_unknown_columns() -> None:
    outcome = prices_import_csv(text="gpu,usd_per_gpu_hour\nH200,-1\nL4,1\nT4,NaN\n")
    assert outcome.created == 0
    assert outcome.errors == [
        "line 2: usd_per_gpu_hour: must not be negative",
        "line 4: usd_per_gpu_hour: must be a finite number",
    ]
    typo = prices_import_csv(text="gpu,usd_per_gpu_hour,regoin\nH200,1,us\n")
    assert typo.created == 0 and typo.errors[0].startswith("header: unknown column(s) regoin")


def test_csv_import_is_all_or_nothing_when_a_row_is_refused_while_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    from phantomhub.pricing import services

    real = services.price_set
    calls: list[str] = []

    def refuse_the_third(**row: object) -> PriceEntry:
        calls.append(str(row["gpu"]))
        if len(calls) == 3:
            raise services.PriceError("gpu", "refused by the price book")
        return real(**row)  # type: ignore[arg-type]

    monkeypatch.setattr(services, "price_set", refuse_the_third)
    count, audits = PriceEntry.objects.count(), PriceAudit.objects.count()
    outcome = prices_import_csv(text="gpu,usd_per_gpu_hour\nH200,1\nL4,1\nT4,1\n")
    assert outcome == services.ImportResult(0, ["line 4: gpu: refused by the price book"])
    assert (PriceEntry.objects.count(), PriceAudit.objects.count()) == (count, audits)


def test_the_api_refuses_insane_prices_on_create_and_edit(admin_client: APIClient) -> None:
    for price in ("1e12", "100000.0001", "NaN", "-1"):
        response = admin_client.post("/api/v1/pricing/prices", {"gpu": "H200", "usd_per_gpu_hour": price}, format="json")
        assert response.status_code == 400 and "usd_per_gpu_hour" in response.json()["error"]["fields"], price
    body = {"gpu": "H200", "usd_per_gpu_hour": "1", "effective_from": "0001-01-01T00:00:00Z"}
    old = admin_client.post("/api/v1/pricing/prices", body, format="json")
    assert old.status_code == 400 and "effective_from" in old.json()["error"]["fields"]
    entry = PriceEntry.objects.first()
    assert entry is not None
    response = admin_client.patch(f"/api/v1/pricing/prices/{entry.pk}", {"usd_per_gpu_hour": "1e12"}, format="json")
    assert response.status_code == 400 and "usd_per_gpu_hour" in response.json()["error"]["fields"]


def test_setprice_refuses_an_insane_price() -> None:
    with pytest.raises(CommandError, match="must be at most 100000"):
        call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "1e12")
