"""Two writes of overlapping budgets at once: the second waits for the first's lock on the team's
row and then sees its budget, so one is stored and the other refused (services._lock_target).
Without the lock, the second's overlap check runs before the first commits and both are stored."""

from __future__ import annotations

import threading
import time
from datetime import date
from decimal import Decimal

import pytest
from django.db import connections, transaction

from phantomhub.planning import services
from phantomhub.planning.models import Budget, BudgetScope
from tests.conftest import Tenant


def _fields(tenant: Tenant, start: date) -> services.BudgetFields:
    return services.BudgetFields(
        scope=BudgetScope.PROJECT, team=None, project=tenant.project, gpu_key="", amount_usd=Decimal(100),
        effective_from=start, effective_to=None,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_overlapping_budgets_written_at_once_store_one(owner: Tenant) -> None:
    first_in = threading.Event()
    outcome: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                services.budget_create(fields=_fields(owner, date(2026, 1, 1)))
                first_in.set()
                time.sleep(0.5)  # holds the team's lock: the second write waits here
            outcome["first"] = "stored"
        except BaseException as exc:  # surfaced below
            outcome["first"] = exc
        finally:
            connections.close_all()

    def second() -> None:
        first_in.wait(5)
        try:
            services.budget_create(fields=_fields(owner, date(2026, 6, 1)))
            outcome["second"] = "stored"
        except services.BudgetError as exc:
            outcome["second"] = (exc.status, exc.field)
        except BaseException as exc:
            outcome["second"] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcome == {"first": "stored", "second": (409, "effective_from")}
    assert Budget.objects.count() == 1
