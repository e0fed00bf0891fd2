"""The web process's token cache: fewer queries per batch, revocation still bounded in time."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from phantomhub.accounts import token_cache
from phantomhub.accounts.models import ApiToken
from phantomhub.accounts.services import token_revoke
from tests.conftest import Tenant, steps_body

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    token_cache.token_cache_forget()


def _token_queries(tenant: Tenant, run_id: str, first: int) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = tenant.post_steps(run_id, steps_body(first=first))
    assert response.status_code == 200, response.content
    return sum(1 for q in queries.captured_queries if "accounts_apitoken" in q["sql"])


def test_a_cached_token_costs_no_query_on_the_next_batch(owner: Tenant, settings: object) -> None:
    run_id = owner.create_run()  # looks the token up (and touches last_used_at)
    assert _token_queries(owner, run_id, 0) == 0
    assert _token_queries(owner, run_id, 10) == 0


def test_without_the_cache_every_batch_looks_the_token_up(owner: Tenant, settings: object) -> None:
    settings.TOKEN_CACHE_S = 0  # type: ignore[attr-defined]
    run_id = owner.create_run()
    assert _token_queries(owner, run_id, 0) == 1


def test_revoking_in_this_process_refuses_the_token_at_once(owner: Tenant) -> None:
    run_id = owner.create_run()
    token_revoke(token=ApiToken.objects.get(project=owner.project))
    assert owner.post_steps(run_id, steps_body()).status_code == 401


def test_a_revocation_elsewhere_is_refused_once_the_entry_expires(owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(token_cache.time, "monotonic", lambda: clock[0])
    run_id = owner.create_run()
    # Another process revokes: this one's cache does not hear of it ...
    ApiToken.objects.filter(project=owner.project).update(revoked_at="2026-01-01T00:00:00Z")
    clock[0] += token_cache.TOKEN_CACHE_S_DEFAULT - 0.5
    assert owner.post_steps(run_id, steps_body()).status_code == 200
    # ... until its entry is TOKEN_CACHE_S old.
    clock[0] += 1.0
    response = owner.post_steps(run_id, steps_body(first=10))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


def test_an_unknown_token_is_not_cached_as_valid(owner: Tenant) -> None:
    run_id = owner.create_run()
    owner.client.credentials(HTTP_AUTHORIZATION="Bearer phk_not-a-token")
    for _ in range(2):
        assert owner.post_steps(run_id, steps_body()).status_code == 401
