"""A change to the price book that reaches into a closed finance month asks first: which changes
reach one, and the CSV import asking like the single-price endpoints."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from phantomhub.accounts.models import Profile
from phantomhub.portal.models import ClosedMonth
from phantomhub.pricing import services
from phantomhub.pricing.models import PriceEntry

pytestmark = [pytest.mark.django_db]


def _closed(month: date, last: date) -> None:
    ClosedMonth.objects.create(month=month, last_day=last, snapshot={})


@pytest.fixture
def entry() -> PriceEntry:
    PriceEntry.objects.all().delete()
    _closed(date(2026, 10, 1), date(2026, 10, 31))
    return services.price_set(gpu="H100-SXM", usd_per_gpu_hour=Decimal("4"), effective_from=datetime(2026, 9, 1, tzinfo=UTC))


def test_which_changes_reach_a_closed_month(entry: PriceEntry) -> None:
    assert services.price_update_reach(entry=entry, changes={"usd_per_gpu_hour": Decimal("5")}) == ["2026-10"]
    assert services.price_update_reach(entry=entry, changes={"usd_per_gpu_hour": Decimal("4")}) == []  # the same price
    assert services.price_update_reach(entry=entry, changes={"note": "contract"}) == []
    # An end date: only the time gained or lost counts.
    assert services.price_update_reach(entry=entry, changes={"effective_to": datetime(2026, 10, 15, tzinfo=UTC)}) == ["2026-10"]
    assert services.price_update_reach(entry=entry, changes={"effective_to": datetime(2026, 11, 15, tzinfo=UTC)}) == []
    assert services.price_delete_reach(entry=entry) == ["2026-10"]
    after = datetime(2026, 11, 1, tzinfo=UTC)
    assert services.price_set_reach(gpu="H100-SXM", effective_from=after) == []
    assert services.price_set_reach(gpu="H100-SXM", effective_from=datetime(2026, 10, 31, 23, tzinfo=UTC)) == ["2026-10"]
    assert services.price_set_reach(gpu="H100-SXM") == []  # from now on


def test_a_csv_import_reaching_a_closed_month_asks_first(entry: PriceEntry) -> None:
    admin = User.objects.create_user("ada")
    Profile.objects.create(user=admin, is_org_admin=True)
    client = APIClient()
    client.force_authenticate(admin)
    text = "gpu,usd_per_gpu_hour,effective_from\nH100-SXM,4.5,2026-10-10T00:00:00Z\n"
    refused = client.post("/api/v1/pricing/prices.csv", text, content_type="text/csv")
    assert refused.status_code == 409 and "2026-10" in refused.json()["error"]["message"]
    assert PriceEntry.objects.count() == 1
    done = client.post("/api/v1/pricing/prices.csv?confirm_closed=1", text, content_type="text/csv")
    assert done.status_code == 201 and done.json() == {"created": 1}


def test_the_commands_ask_too(entry: PriceEntry, tmp_path: Any) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"closed month.*2026-10.*--confirm-closed"):
        call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "5", "--from", "2026-10-20")
    call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "5", "--from", "2026-10-20", "--confirm-closed")
    call_command("setprice", "--gpu", "H100-SXM", "--usd-per-hour", "6", "--from", "2026-11-20")  # after it: no question
    path = tmp_path / "prices.csv"
    path.write_text("gpu,usd_per_gpu_hour,effective_from\nH100-SXM,4.5,2026-10-10T00:00:00Z\n")
    with pytest.raises(CommandError, match=r"nothing imported.*2026-10"):
        call_command("importprices", str(path))
    call_command("importprices", str(path), "--confirm-closed")
