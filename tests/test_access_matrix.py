"""The access matrix: every endpoint of the URL conf × every method × every kind of caller.

The cases are generated from the URL conf, and EXPECTED must name each one, so an endpoint added
without deciding who may reach it fails here. Outcomes: "401" (no credentials), "403" (refused),
"404" (hidden: another project's run, a token one does not manage), "ok" (let through: any
status below 500 other than 401/403/404, e.g. 200, 201, 204, or a 400/409 about the body).
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Callable, Iterator
from copy import deepcopy
from dataclasses import dataclass, field, replace
from datetime import date
from http.cookies import SimpleCookie
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from rest_framework.permissions import AllowAny
from rest_framework.test import APIClient

from phantomhub.accounts.models import Membership, Profile, Role
from phantomhub.accounts.permissions import TokenScopes
from phantomhub.accounts.services import personal_token_create, project_token_create, scim_token_create
from phantomhub.fleet.models import AttributionJob
from phantomhub.fleet.services import node_token_create
from phantomhub.planning.models import Budget
from phantomhub.pricing.models import PriceEntry
from phantomhub.telemetry.models import Job, Run
from tests.accounts.scim_factories import SCIM_METHODS
from tests.accounts.scim_factories import matrix_call as scim_matrix_call
from tests.accounts.scim_factories import matrix_kwargs as scim_matrix_kwargs
from tests.alerts.factories import MATRIX_RULE, matrix_kwargs
from tests.conftest import T0_NS, Tenant, rows_for_the_module, steps_body, tenant_for

pytestmark = pytest.mark.django_db

PRINCIPALS = ("anonymous", "project", "other_project", "personal", "member", "lead", "finance", "admin", "node", "scim")

# Left out of the matrix, with the reason. Everything else in the URL conf must be in EXPECTED.
NOT_API = {
    "spa": "the web UI's HTML shell, no data",
    "admin": "Django's admin site: staff sessions, its own login",
}
# Plain Django views (not DRF) and the methods they answer.
PLAIN_VIEW_METHODS = {"metrics": ["get"]}
# Single sign-on's browser redirects (accounts/oidc_views.py): open to anyone, they answer with a
# redirect to the provider or to /login?error=..., and return no data.
PLAIN_VIEW_METHODS.update({"oidc-start": ["get"], "oidc-callback": ["get"], "auth-breakglass": ["get"]})
PLAIN_VIEW_METHODS.update(SCIM_METHODS)  # SCIM 2.0 (accounts/scim/): django-scim2's views
# Endpoints meant for everyone (AllowAny): liveness, the schema and its docs, signing in.
PUBLIC = {"health", "schema", "api-docs", "portal-session"}

ALL_OK = "ok ok ok ok ok ok ok ok"
RUN_READ = "401 ok 404 ok ok ok ok ok"  # people see the run through their team, finance, admin
RUN_WRITE = "401 ok 404 403 403 403 403 403"  # telemetry is written by the run's project token
ORG_READ = "401 403 403 ok ok ok ok ok"  # people and their personal tokens; no project token
ADMIN_WRITE = "401 403 403 403 403 403 403 ok"  # a signed-in organization admin only
PEOPLE_ONLY = "401 403 403 403 ok ok ok ok"  # signed-in people, no token of any kind
SCIM_ONLY = "401 403 403 403 403 403 403 403"  # the SCIM token alone (SCIM_EXPECTED); sessions refused too

# (url name, method) → outcome per principal, in the order of PRINCIPALS but the last two: the node
# token (the node collector's), refused ("403") everywhere but in NODE_EXPECTED, and the SCIM token,
# refused everywhere but in SCIM_EXPECTED.
EXPECTED: dict[tuple[str, str], str] = {
    ("health", "get"): ALL_OK,
    ("run-create", "post"): "401 ok ok 403 403 403 403 403",
    ("run-detail", "get"): RUN_READ,
    ("run-steps", "get"): RUN_READ,
    ("run-steps", "post"): RUN_WRITE,
    ("run-steps-parquet", "get"): RUN_READ,
    ("run-samples", "post"): RUN_WRITE,
    ("run-events", "post"): RUN_WRITE,
    ("run-batch", "post"): RUN_WRITE,
    ("run-batches", "post"): RUN_WRITE,
    ("run-analysis", "get"): RUN_READ,
    ("run-series", "get"): RUN_READ,
    ("gpu-list", "get"): ORG_READ,
    ("price-list", "get"): ORG_READ,
    ("price-list", "post"): ADMIN_WRITE,
    ("price-csv", "get"): ORG_READ,
    ("price-csv", "post"): ADMIN_WRITE,
    ("price-detail", "get"): ORG_READ,
    ("price-detail", "patch"): ADMIN_WRITE,
    ("price-detail", "delete"): ADMIN_WRITE,
    ("price-audit", "get"): "401 403 403 ok 403 403 ok ok",  # finance reads it; the personal token is the admin's
    ("schema", "get"): ALL_OK,
    ("api-docs", "get"): ALL_OK,
    ("portal-session", "get"): ALL_OK,
    ("portal-session", "post"): ALL_OK,
    ("portal-session", "delete"): ALL_OK,
    ("portal-runs", "get"): "401 ok ok ok ok ok ok ok",  # each lists what it may see
    ("portal-runs-csv", "get"): ORG_READ,
    ("portal-leaderboard-csv", "get"): ORG_READ,
    ("portal-run", "get"): RUN_READ,
    ("portal-jobs", "get"): "401 ok ok ok ok ok ok ok",  # each lists the jobs of the projects it sees
    ("portal-job", "get"): RUN_READ,  # a job is seen by whoever sees its project's runs
    ("portal-project-failures", "get"): ORG_READ,  # as the project's page
    ("portal-compare", "get"): ORG_READ,  # people; the runs it names must be visible (400 here: none named)
    ("portal-leaderboard", "get"): ORG_READ,
    ("portal-overview", "get"): ORG_READ,
    ("portal-teams", "get"): ORG_READ,
    ("portal-team", "get"): ORG_READ,
    ("portal-team", "patch"): "401 403 403 403 403 ok 403 ok",  # display names: team and org admins
    ("portal-project", "get"): ORG_READ,
    ("portal-project", "patch"): "401 403 403 403 403 ok 403 ok",
    ("portal-finance-csv", "get"): ORG_READ,
    ("portal-finance-pdf", "get"): ORG_READ,  # as the CSV: the same review, the same rows
    ("portal-finance", "get"): ORG_READ,
    ("portal-finance-close", "post"): "401 403 403 403 403 403 ok ok",
    ("portal-finance-reopen", "post"): ADMIN_WRITE,
    ("portal-settings", "get"): ORG_READ,
    ("portal-settings", "put"): ADMIN_WRITE,
    ("portal-tokens", "get"): PEOPLE_ONLY,
    ("portal-tokens", "post"): PEOPLE_ONLY,
    ("portal-token", "delete"): "401 403 403 403 404 ok 404 ok",  # team admins and org admins
    ("portal-token-rotate", "post"): "401 403 403 403 404 ok 404 ok",  # as revoking: team admins and org admins
    ("metrics", "get"): "401 401 401 401 401 401 401 401",  # its own token (PHANTOMHUB_METRICS_TOKEN)
    ("node-samples", "post"): "401 403 403 403 403 403 403 403",  # a node token only (NODE_EXPECTED)
    ("fleet-summary", "get"): ORG_READ,
    ("fleet-csv", "get"): ORG_READ,
    ("fleet-rules", "get"): ORG_READ,
    ("fleet-rules", "put"): ADMIN_WRITE,
    ("fleet-rules-preview", "post"): ADMIN_WRITE,
    ("fleet-rules-job", "get"): "401 403 403 ok 403 403 403 ok",  # a re-attribution job's progress: admins
    ("fleet-invoices", "get"): "401 403 403 ok 403 403 ok ok",  # finance and admins; the personal token is the admin's
    ("fleet-invoices", "post"): "401 403 403 403 403 403 ok ok",  # finance imports the invoice
    # Alerts: people read the rules of what they see; org admins, and a team's admins for its
    # team's rules (the world's rule is the nlp team's), change them (tests/alerts/factories.py).
    ("alerts-rules", "get"): ORG_READ,
    ("alerts-rules", "post"): "401 403 403 403 403 ok 403 ok",
    ("alerts-rule", "get"): ORG_READ,
    ("alerts-rule", "patch"): "401 403 403 403 403 ok 403 ok",
    ("alerts-rule", "delete"): "401 403 403 403 403 ok 403 ok",
    ("alerts-rule-test", "post"): "401 403 403 403 403 ok 403 ok",
    ("alerts-states", "get"): ORG_READ,
    ("alerts-state", "patch"): "401 403 403 403 403 ok 403 ok",
    ("alerts-deliveries", "get"): ORG_READ,
    # The audit log: org admins read it all, finance its price and month entries (tests/audit);
    # no team's people (it spans every team); the personal token is the admin's.
    ("audit", "get"): "401 403 403 ok 403 403 ok ok",
    ("audit-csv", "get"): "401 403 403 ok 403 403 ok ok",
    # People & groups (portal/identity.py): the group mapping is the organization admins'; people
    # are listed to org admins (everyone) and a team's leads (their team's people, PEOPLE_SEEN),
    # who change local memberships of their own team (a lead of another team: 403, below).
    ("portal-group-mapping", "get"): "401 403 403 ok 403 403 403 ok",  # the personal token is the admin's
    ("portal-group-mapping", "put"): ADMIN_WRITE,
    ("portal-group-mapping-preview", "post"): ADMIN_WRITE,
    ("portal-people", "get"): "401 403 403 ok 403 ok 403 ok",
    ("portal-person", "patch"): ADMIN_WRITE,  # organization flags
    ("portal-person-membership", "put"): "401 403 403 403 403 ok 403 ok",
    ("portal-person-membership", "delete"): "401 403 403 403 403 ok 403 ok",
    # Saved views (portal/saved_views.py): signed-in people's, no token's. The world's view is the
    # member's, shared with nlp: its owner changes it; nlp's lead sees it (403 on change, may delete);
    # finance and the org admin are not in nlp and do not see it (404).
    ("portal-views", "get"): PEOPLE_ONLY,
    ("portal-views", "post"): PEOPLE_ONLY,
    ("portal-view", "patch"): "401 403 403 403 ok 403 404 404",
    ("portal-view", "delete"): "401 403 403 403 ok ok 404 404",
    # Scheduled reports (phantomhub/reports): signed-in people subscribe themselves (personal tokens
    # read); each sees their own subscriptions and deliveries, org admins everyone's. The world's
    # subscription is the member's nlp digest: hidden (404) from the lead and finance.
    ("reports-subscriptions", "get"): ORG_READ,
    ("reports-subscriptions", "post"): PEOPLE_ONLY,
    ("reports-subscription", "get"): "401 403 403 ok ok 404 404 ok",
    ("reports-subscription", "patch"): "401 403 403 403 ok 404 404 ok",
    ("reports-subscription", "delete"): "401 403 403 403 ok 404 404 ok",
    ("reports-deliveries", "get"): ORG_READ,
    # Budgets (planning/api.py): people read their teams' budgets (the world's is llm-pretrain's, of
    # nlp), finance and org admins all; org admins and finance set any, a team's leads its projects'.
    ("budget-list", "get"): ORG_READ,
    ("budget-list", "post"): "401 403 403 403 403 ok ok ok",
    ("budget-detail", "get"): ORG_READ,
    ("budget-detail", "patch"): "401 403 403 403 403 ok ok ok",
    ("budget-detail", "delete"): "401 403 403 403 403 ok ok ok",
    ("budget-status", "get"): ORG_READ,
    ("oidc-start", "get"): ALL_OK,  # a redirect (to the provider, or /login?error=oidc_off here)
    ("oidc-callback", "get"): ALL_OK,  # a redirect to /login?error=state_missing: no state
    ("auth-breakglass", "get"): ALL_OK,  # a redirect to /login?error=breakglass_invalid: no token
    **{(name, method): SCIM_ONLY for name, methods in SCIM_METHODS.items() for method in methods},
}
NODE_EXPECTED: dict[tuple[str, str], str] = {
    ("health", "get"): "ok",
    ("schema", "get"): "ok",
    ("api-docs", "get"): "ok",
    ("portal-session", "get"): "ok",
    ("portal-session", "post"): "ok",
    ("portal-session", "delete"): "ok",
    ("metrics", "get"): "401",
    ("node-samples", "post"): "ok",
    ("oidc-start", "get"): "ok",
    ("oidc-callback", "get"): "ok",
    ("auth-breakglass", "get"): "ok",
}
# The SCIM token (the identity provider's): /scim/v2/ only; the API refuses it ("403") even where
# it is public, but for the liveness check, which reads no credentials.
SCIM_EXPECTED: dict[tuple[str, str], str] = {
    ("health", "get"): "ok",
    ("metrics", "get"): "401",
    # single sign-on's redirects read no bearer token (plain views): the same answer as anyone's
    ("oidc-start", "get"): "ok",
    ("oidc-callback", "get"): "ok",
    ("auth-breakglass", "get"): "ok",
    **{(name, method): "ok" for name, methods in SCIM_METHODS.items() for method in methods},
}


@dataclass(frozen=True)
class Endpoint:
    name: str
    callback: Any

    @property
    def view_class(self) -> Any:
        return getattr(self.callback, "cls", None) or getattr(self.callback, "view_class", None)


def _walk(patterns: list[Any]) -> Iterator[tuple[str | None, Any]]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                yield "admin", None
                continue
            yield from _walk(entry.url_patterns)
        elif isinstance(entry, URLPattern):
            yield entry.name, entry.callback


def endpoints() -> list[Endpoint]:
    found: dict[str, Endpoint] = {}
    for name, callback in _walk(get_resolver().url_patterns):
        assert name, f"an unnamed URL pattern ({callback}): name it so the access matrix can cover it"
        if name not in NOT_API:
            found[name] = Endpoint(name, callback)
    return list(found.values())


def methods(endpoint: Endpoint) -> list[str]:
    if endpoint.name in PLAIN_VIEW_METHODS:
        return PLAIN_VIEW_METHODS[endpoint.name]
    cls = endpoint.view_class
    assert cls is not None, f"{endpoint.name}: a plain view; list its methods in PLAIN_VIEW_METHODS"
    return [m for m in cls.http_method_names if m not in ("options", "head", "trace") and hasattr(cls, m)]


CASES = [(e.name, m) for e in endpoints() for m in methods(e)]


def test_every_endpoint_of_the_url_conf_is_in_the_matrix() -> None:
    assert sorted(CASES) == sorted(EXPECTED), "decide who may reach the new endpoint, in EXPECTED"


@pytest.mark.parametrize("endpoint", endpoints(), ids=lambda e: e.name)
def test_every_api_view_keeps_the_token_scopes(endpoint: Endpoint) -> None:
    cls = endpoint.view_class
    if cls is None or not hasattr(cls, "permission_classes"):
        assert endpoint.name in PLAIN_VIEW_METHODS
        return
    if endpoint.name in PUBLIC:
        assert cls.permission_classes == [AllowAny] or issubclass(cls.permission_classes[0], AllowAny)
        return
    assert any(issubclass(p, TokenScopes) for p in cls.permission_classes), (
        f"{endpoint.name}: {cls.__name__}.permission_classes drop TokenScopes (extend it, do not replace it)"
    )


@dataclass(frozen=True)
class Caller:
    """How one principal calls: a bearer token, a signed-in person (DRF's forced authentication and
    the session cookie, which plain Django views such as /scim/v2/ read), or neither."""

    bearer: str = ""
    user_id: int | None = None
    cookies: SimpleCookie | None = None

    def client(self) -> APIClient:
        client = APIClient()
        if self.bearer:
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.bearer}")
        if self.user_id is not None:
            client.force_authenticate(User.objects.get(pk=self.user_id))
        if self.cookies is not None:
            client.cookies = deepcopy(self.cookies)
        return client


@dataclass
class World:
    owner: Tenant
    outsider: Tenant
    callers: dict[str, Caller]
    run_id: str
    price_id: int
    token_id: int
    job_id: int
    training_job_id: str
    view_id: int = 0
    subscription_id: int = 0
    clients: dict[str, APIClient] = field(default_factory=dict)
    budget_id: int = 0


def _world_build(owner: Tenant, outsider: Tenant) -> World:
    run_id = owner.create_run()
    users = {name: User.objects.create_user(name, password="pw") for name in ("member", "lead", "finance", "admin")}
    Membership.objects.create(user=users["member"], team=owner.project.team, role=Role.MEMBER)
    Membership.objects.create(user=users["lead"], team=owner.project.team, role=Role.ADMIN)
    Profile.objects.create(user=users["finance"], is_finance=True)
    Profile.objects.create(user=users["admin"], is_org_admin=True)
    callers = {
        "anonymous": Caller(),
        "project": Caller(bearer=owner.token),
        "other_project": Caller(bearer=outsider.token),
        # The strongest personal token there is: an organization admin's. It still only reads.
        "personal": Caller(bearer=personal_token_create(user=users["admin"]).raw),
    }
    for name, user in users.items():
        signed_in = APIClient()
        signed_in.force_login(user)
        callers[name] = Caller(user_id=user.pk, cookies=signed_in.cookies)
    price = PriceEntry.objects.order_by("id").first()
    assert price is not None
    spare = project_token_create(project=owner.project, name="spare").token
    callers["node"] = Caller(bearer=node_token_create(name="matrix", hostnames=["matrix-node"]).raw)
    callers["scim"] = Caller(bearer=scim_token_create(name="matrix").raw)
    job = AttributionJob.objects.create()
    training = Job.objects.create(project=owner.project, key="matrix")
    Run.objects.filter(pk=run_id).update(job=training, attempt=0)
    from phantomhub.portal.models import SavedView

    view = SavedView.objects.create(owner=users["member"], name="matrix", page="runs", query="team=nlp", team=owner.project.team)
    from phantomhub.reports.models import Subscription

    User.objects.filter(pk=users["member"].pk).update(email="member@example.com")  # a report goes to one's own address
    subscription = Subscription.objects.create(
        owner=users["member"], kind="digest_team", team=owner.project.team, cadence="weekly", weekday=0,
        email_to=["member@example.com"],
    )  # fmt: skip
    budget = Budget.objects.create(
        scope="project", project=owner.project, amount_usd=1000, effective_from=date(2026, 9, 1), effective_to=date(2026, 9, 1)
    )
    return World(
        owner=owner,
        outsider=outsider,
        callers=callers,
        run_id=run_id,
        price_id=price.pk,
        token_id=spare.pk,
        job_id=job.pk,
        training_job_id=str(training.pk),
        view_id=view.pk,
        subscription_id=subscription.pk,
        budget_id=budget.pk,
    )


@pytest.fixture(scope="module")
def shared_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """The world, built once for the module (each case's writes are rolled back after it): built
    per case, it was nine tenths of the matrix's time."""
    with rows_for_the_module(django_db_blocker):
        yield _world_build(tenant_for("nlp", "llm-pretrain"), tenant_for("vision", "detector"))


@pytest.fixture
def world(shared_world: World, db: None) -> World:
    """The module's world with clients of this test's own: a cookie or a sign-out one case's
    response leaves in a client stays with that case."""
    return replace(shared_world, clients={name: caller.client() for name, caller in shared_world.callers.items()})


def _kwargs(name: str, world: World) -> dict[str, Any]:
    if name.startswith("alerts-"):
        return matrix_kwargs(name)
    if name.startswith("scim-"):
        return scim_matrix_kwargs(name)
    return {
        "run-detail": {"run_id": world.run_id},
        "run-steps": {"run_id": world.run_id},
        "run-steps-parquet": {"run_id": world.run_id},
        "run-samples": {"run_id": world.run_id},
        "run-events": {"run_id": world.run_id},
        "run-batch": {"run_id": world.run_id},
        "run-batches": {"run_id": world.run_id},
        "run-analysis": {"run_id": world.run_id},
        "run-series": {"run_id": world.run_id},
        "portal-run": {"run_id": world.run_id},
        "price-detail": {"price_id": world.price_id},
        "portal-token": {"token_id": world.token_id},
        "portal-token-rotate": {"token_id": world.token_id},
        "portal-leaderboard": {"kind": "teams"},
        "portal-leaderboard-csv": {"kind": "teams"},
        "portal-team": {"slug": "nlp"},
        "portal-project": {"slug": "llm-pretrain"},
        "portal-project-failures": {"slug": "llm-pretrain"},
        "portal-job": {"job_id": world.training_job_id},
        "portal-finance-csv": {"month": "2026-09"},
        "portal-finance-pdf": {"month": "2026-09"},
        "portal-finance": {"month": "2026-09"},
        "portal-finance-close": {"month": "2026-09"},
        "portal-finance-reopen": {"month": "2026-09"},
        "fleet-csv": {"table": "nodes"},
        "fleet-rules-job": {"job_id": world.job_id},
        "portal-person": {"username": "member"},
        "portal-person-membership": {"username": "member", "slug": "nlp"},
        "portal-view": {"view_id": world.view_id},
        "reports-subscription": {"sub_id": world.subscription_id},
        "budget-detail": {"budget_id": world.budget_id},
    }.get(name, {})


CSV = "gpu,usd_per_gpu_hour,effective_from\nH200,2.2,2026-08-01T00:00:00Z\n"
FOCUS_CSV = (
    "BilledCost,ChargePeriodStart,ChargePeriodEnd,BillingCurrency,ResourceId\n"
    "9.5,2026-09-01T00:00:00Z,2026-09-02T00:00:00Z,USD,i-1\n"
)
NODE_BODY = {
    "node": {"hostname": "matrix-node", "gpu_count": 1},
    "interval_s": 15,
    "gpus": {"t_ns": [T0_NS], "gpu_index": [0], "util_pct": [0.0], "mem_used_bytes": [0]},
}
BODIES: dict[tuple[str, str], Callable[[], Any]] = {
    ("run-create", "post"): lambda: {"id": str(uuid.uuid4()), "name": "matrix"},
    ("run-steps", "post"): lambda: steps_body(5),
    ("run-samples", "post"): lambda: {"rank": 0, "samples": {"t_ns": [T0_NS], "gpu_util_pct": [50.0]}},
    ("run-events", "post"): lambda: {"events": [{"id": "m1", "kind": "counters", "t_ns": T0_NS, "data": {"dropped_steps": 0}}]},
    ("run-batch", "post"): lambda: {**steps_body(5), "samples": {"t_ns": [T0_NS]}},
    ("run-batches", "post"): lambda: {"batches": [{**steps_body(5, rank=k), "samples": {"t_ns": [T0_NS]}} for k in range(2)]},
    ("price-list", "post"): lambda: {"gpu": "H200", "usd_per_gpu_hour": "3.10", "effective_from": "2026-07-01T00:00:00Z"},
    ("price-detail", "patch"): lambda: {"note": "matrix"},
    ("portal-session", "post"): lambda: {"username": "nobody", "password": "wrong"},
    ("portal-settings", "put"): lambda: {"target_mfu": 0.4},
    ("portal-tokens", "post"): lambda: {"kind": "personal", "name": "matrix"},
    ("portal-token-rotate", "post"): lambda: {"overlap_s": 60},
    ("portal-team", "patch"): lambda: {"display_name": "NLP"},
    ("portal-project", "patch"): lambda: {"display_name": "LLM pre-training"},
    ("alerts-rules", "post"): lambda: dict(MATRIX_RULE),
    ("alerts-rule", "patch"): lambda: {"name": "matrix, renamed"},
    ("alerts-state", "patch"): lambda: {"muted": True},
    ("node-samples", "post"): lambda: NODE_BODY,
    ("fleet-rules", "put"): lambda: {"rules": []},
    ("fleet-rules-preview", "post"): lambda: {"rules": []},
    ("portal-group-mapping", "put"): lambda: {"rules": [{"pattern": "matrix-*", "grant": "team_member", "team": "nlp"}]},
    ("portal-group-mapping-preview", "post"): lambda: {"rules": [{"pattern": "matrix-*", "grant": "team_member", "team": "nlp"}]},
    ("portal-person", "patch"): lambda: {"is_finance": True},
    ("portal-person-membership", "put"): lambda: {"role": "viewer"},
    ("portal-views", "post"): lambda: {"name": "matrix, mine", "page": "finance", "query": "month=2026-09"},
    ("portal-view", "patch"): lambda: {"name": "matrix, renamed"},
    ("reports-subscriptions", "post"): lambda: {"kind": "digest_team", "team": "nlp", "cadence": "weekly", "weekday": 0},
    ("reports-subscription", "patch"): lambda: {"hour": 9},
    ("budget-list", "post"): lambda: {
        "scope": "project",
        "project": "llm-pretrain",
        "amount_usd": 900,
        "effective_from": "2026-10",
    },
    ("budget-detail", "patch"): lambda: {"amount_usd": 1100},
}


def _call(client: APIClient, method: str, path: str, name: str) -> Any:
    if name.startswith("scim-"):
        return scim_matrix_call(client, method, path, name)
    if method == "get":
        return client.get(path)
    if (name, method) == ("price-csv", "post"):
        return client.post(path, CSV, content_type="text/csv")
    if (name, method) == ("fleet-invoices", "post"):
        return client.post(path, FOCUS_CSV, content_type="text/csv")
    body = BODIES.get((name, method), lambda: None)()
    return getattr(client, method)(path, body, format="json")


def _outcome(status: int) -> str:
    assert status < 500, f"server error {status}"
    return str(status) if status in (401, 403, 404) else "ok"


@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize(("name", "method"), CASES, ids=[f"{n}-{m}" for n, m in CASES])
@override_settings(METRICS_TOKEN="matrix-metrics-token")
def test_access_matrix(world: World, name: str, method: str, principal: str) -> None:
    outcomes = [
        *EXPECTED[(name, method)].split(),
        NODE_EXPECTED.get((name, method), "403"),
        SCIM_EXPECTED.get((name, method), "403"),
    ]
    expected = dict(zip(PRINCIPALS, outcomes, strict=True))[principal]
    path = reverse(name, kwargs=_kwargs(name, world))
    response = _call(world.clients[principal], method, path, name)
    assert _outcome(response.status_code) == expected, (response.status_code, response.content[:300])


# --- what each principal sees of the fleet's holders and of node tokens ---------------------------

HOLDERS = {"slurm job 1 (ann, nlp)": 1.0, "slurm job 2 (bob, vision)": 2.0, "user carol": 4.0}
MEMBER_HOLDERS = {"slurm job 1 (ann, nlp)": 1.0, "other teams": 2.0, "unattributed": 4.0}
# principal → the holders named (with dollars) in the fleet summary and holders.csv, or the refusal.
HOLDERS_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": HOLDERS,  # the organization admin's personal token
    "member": MEMBER_HOLDERS,  # of the world's team (nlp): its holders, the rest summed
    "lead": MEMBER_HOLDERS,
    "finance": HOLDERS,
    "admin": HOLDERS,
    "node": 403,
    "scim": 403,
}
# principal → the node tokens listed in Settings (name, hostnames), or the refusal.
NODE_TOKENS_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": 403,  # tokens are managed by signed-in people
    "member": [],
    "lead": [],
    "finance": [],
    "admin": [("matrix", ["matrix-node"])],
    "node": 403,
    "scim": 403,
}


def _fleet_days(owner: Tenant, outsider: Tenant) -> None:
    from phantomhub.fleet.models import FleetDay, GpuClass, Node, Owner

    node = Node.objects.create(hostname="matrix-node")
    held = [
        ({"kind": "slurm", "job_id": "1", "account": "nlp", "user": "ann"}, owner.project.team, 100),
        ({"kind": "slurm", "job_id": "2", "account": "vision", "user": "bob"}, outsider.project.team, 200),
        ({"kind": "user", "user": "carol"}, None, 400),
    ]
    for i, (data, team, cents) in enumerate(held):
        holder = Owner.objects.create(digest=f"{i:064x}", kind=data["kind"], data=data, team=team)
        FleetDay.objects.create(
            node=node, day="2026-09-21", cls=GpuClass.IDLE_HELD, holder=holder, team=team, gpu_ns=3600 * 10**9, cost_cents=cents
        )


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_fleet_holders_each_principal_sees(world: World, principal: str) -> None:
    _fleet_days(world.owner, world.outsider)
    client, expected = world.clients[principal], HOLDERS_SEEN[principal]
    summary = client.get("/api/v1/fleet/summary?period=2026-09")
    csv_response = client.get("/api/v1/fleet/holders.csv?period=2026-09")
    if isinstance(expected, int):
        assert (summary.status_code, csv_response.status_code) == (expected, expected)
        return
    assert {h["holder"]: h["cost_usd"] for h in summary.json()["holders"]} == expected
    rows = csv.DictReader(io.StringIO(b"".join(csv_response.streaming_content).decode()))
    assert {r["holder"]: float(r["cost_usd"]) for r in rows} == expected
    named_teams = {h["team"] for h in summary.json()["holders"]} - {None}
    assert named_teams == ({"nlp"} if expected is MEMBER_HOLDERS else {"nlp", "vision"})


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_node_tokens_each_principal_sees(world: World, principal: str) -> None:
    response = world.clients[principal].get("/api/v1/portal/tokens")
    expected = NODE_TOKENS_SEEN[principal]
    if isinstance(expected, int):
        assert response.status_code == expected
        return
    listed = [(t["name"], t["hostnames"]) for t in response.json() if t["kind"] == "node"]
    assert listed == expected
    assert all(t["hostnames"] == [] for t in response.json() if t["kind"] != "node")


# --- what each principal sees of tokens (Settings' list): which rows, each with every field --------

# principal → the tokens listed as (kind, project, owner), or the refusal. The rows' fields (owner,
# last use and its address, state, ...) are seen by whoever manages the token, no one else: a
# person their personal tokens; a team's admins its projects' tokens; organization admins every
# project, node and SCIM token, never another person's personal token.
TOKENS_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": 403,  # tokens are managed by signed-in people
    "member": [],
    "lead": [("project", "llm-pretrain", None), ("project", "llm-pretrain", None)],  # the tenant's and the spare
    "finance": [],
    "admin": [
        ("node", None, None),
        ("personal", None, "admin"),
        ("scim", None, None),
        ("project", "detector", None),
        ("project", "llm-pretrain", None),
        ("project", "llm-pretrain", None),
    ],
    "node": 403,
    "scim": 403,
}
TOKEN_ROW_FIELDS = {
    "id", "prefix", "kind", "name", "project", "user", "owner", "created_at", "expires_at", "last_used_at",
    "last_used_address", "revoked_at", "state", "replaced_by", "overlap_ends_at", "ends_at", "hostnames",
}  # fmt: skip


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_tokens_each_principal_sees(world: World, principal: str) -> None:
    response = world.clients[principal].get("/api/v1/portal/tokens")
    expected = TOKENS_SEEN[principal]
    if isinstance(expected, int):
        assert response.status_code == expected
        return
    rows = response.json()
    assert sorted(((t["kind"], t["project"], t["owner"]) for t in rows), key=str) == sorted(expected, key=str)
    assert all(set(t) == TOKEN_ROW_FIELDS for t in rows)


# --- what each principal sees of alerts: subjects and rule destinations ----------------------------

SLACK = "https://hooks.slack.com/services/T000/B000/credential"
ALERTS_ALL = {"org:nlp", "org:vision", "nlp:nlp"}
ALERTS_NLP = {"org:nlp", "nlp:nlp"}
# principal → (alerts listed, rules whose destinations are shown), or the refusal.
ALERTS_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": (ALERTS_ALL, set()),  # the organization admin's token reads everything, changes nothing
    "member": (ALERTS_NLP, set()),
    "lead": (ALERTS_NLP, {"nlp"}),  # leads the nlp team: may change its rule
    "finance": (ALERTS_ALL, set()),
    "admin": (ALERTS_ALL, {"org", "nlp"}),
    "node": 403,
    "scim": 403,
}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_alerts_and_rule_destinations_each_principal_sees(world: World, principal: str) -> None:
    owner, outsider = world.owner, world.outsider
    from phantomhub.alerts.models import AlertDelivery, AlertRule, AlertState

    runs = {"nlp": Run.objects.get(pk=world.run_id), "vision": Run.objects.get(pk=outsider.create_run(name="vision"))}
    rules = {
        "org": AlertRule.objects.create(name="org", kind="waste_rate", params={"share": 0.5}, webhook_url=SLACK,
                                        webhook_secret="s" * 32, email_to=["oncall@example.com"]),
        "nlp": AlertRule.objects.create(name="nlp", kind="waste_rate", scope="team", team=owner.project.team,
                                        params={"share": 0.5}, webhook_url=f"{SLACK}/nlp", email_to=["nlp@example.com"]),
    }  # fmt: skip
    for rule_name, run_name in (("org", "nlp"), ("org", "vision"), ("nlp", "nlp")):
        rule, run = rules[rule_name], runs[run_name]
        state = AlertState.objects.create(rule=rule, subject=f"run:{run.pk}", subject_label=f"{rule_name}:{run_name}",
                                          run=run, state="firing", usd_per_hour=1.0)  # fmt: skip
        AlertDelivery.objects.create(rule=rule, alert=state, event="firing", channel="webhook", target=rule.webhook_url,
                                     body="{}", status="sent")  # fmt: skip
    client, expected = world.clients[principal], ALERTS_SEEN[principal]
    answers = [client.get(f"/api/v1/alerts/{what}") for what in ("alerts", "rules", "deliveries")]
    if isinstance(expected, int):
        assert [a.status_code for a in answers] == [expected] * 3
        return
    listed, destinations = expected
    alerts, rules_seen, deliveries = (a.json() for a in answers)
    alerts = alerts["alerts"] if isinstance(alerts, dict) else alerts
    rules_seen = rules_seen["rules"] if isinstance(rules_seen, dict) else rules_seen
    deliveries = deliveries["deliveries"] if isinstance(deliveries, dict) else deliveries
    assert {a["subject_label"] for a in alerts} == listed
    shown = {r["name"] for r in rules_seen if r["webhook_url"] is not None}
    assert shown == destinations
    for r in rules_seen:
        hidden = r["name"] not in destinations
        assert (r["webhook_secret"] is None, r["email_to"] is None) == (hidden, hidden), r
    assert len(deliveries) == len(listed)
    assert all((d["target"] is None) == (d["rule"] not in {rules[n].pk for n in destinations}) for d in deliveries), deliveries


# --- what each principal sees of people (Settings → People & groups) ---------------------------------

EVERYONE = {"member": ["nlp"], "lead": ["nlp"], "finance": [], "admin": []}
# principal → {username: teams listed}, and whether flags and directory groups are shown; or the refusal.
PEOPLE_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": (EVERYONE, True),  # the organization admin's personal token reads as the admin
    "member": 403,
    "lead": ({"member": ["nlp"], "lead": ["nlp"]}, False),  # the people of the team they lead
    "finance": 403,
    "admin": (EVERYONE, True),
    "node": 403,
    "scim": 403,
}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_people_each_principal_sees(world: World, principal: str) -> None:
    response = world.clients[principal].get("/api/v1/portal/people")
    expected = PEOPLE_SEEN[principal]
    if isinstance(expected, int):
        assert response.status_code == expected
        return
    listed, org_fields = expected
    people = response.json()["people"]
    assert {p["username"]: [m["team"] for m in p["memberships"]] for p in people} == listed
    assert all((p["flags"] is not None, p["groups"] is not None) == (org_fields, org_fields) for p in people)


def test_a_lead_of_another_team_manages_none_of_this_teams_people(world: World) -> None:
    outsider = world.outsider
    vision_lead = User.objects.create_user("vision-lead")
    Membership.objects.create(user=vision_lead, team=outsider.project.team, role=Role.ADMIN)
    client = APIClient()
    client.force_authenticate(vision_lead)
    path = reverse("portal-person-membership", kwargs={"username": "member", "slug": "nlp"})
    assert client.put(path, {"role": "viewer"}, format="json").status_code == 403
    assert client.delete(path).status_code == 403
    assert Membership.objects.get(user__username="member").role == Role.MEMBER
    people = client.get("/api/v1/portal/people").json()["people"]
    assert [(p["username"], p["memberships"]) for p in people] == [
        ("vision-lead", [{"team": "vision", "team_name": "vision", "role": "admin", "source": "local", "origin": None}])
    ]


# --- what each principal reads of the audit log -----------------------------------------------------

AUDIT_ALL = {"price", "month", "team"}
# principal → the kinds of entries listed (and in the CSV), or the refusal. Entries span every team:
# no team's people read them; finance reads the price book's and the month closes'.
AUDIT_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": AUDIT_ALL,  # the organization admin's token
    "member": 403,
    "lead": 403,
    "finance": {"price", "month"},
    "admin": AUDIT_ALL,
    "node": 403,
    "scim": 403,
}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_audit_entries_each_principal_reads(world: World, principal: str) -> None:
    from datetime import date

    from phantomhub.accounts.models import Team
    from phantomhub.audit.context import acting
    from phantomhub.portal.models import MonthAction, MonthLog

    with acting("matrix"):
        price = PriceEntry.objects.get(pk=world.price_id)
        price.note = "matrix"
        price.save()
        MonthLog.objects.create(month=date(2026, 9, 1), action=MonthAction.CLOSE)
        Team.objects.create(slug="matrix-team", name="matrix")
    client, expected = world.clients[principal], AUDIT_SEEN[principal]
    listed = client.get("/api/v1/audit?actor=matrix")
    csv_response = client.get("/api/v1/audit.csv?actor=matrix")
    if isinstance(expected, int):
        assert (listed.status_code, csv_response.status_code) == (expected, expected)
        return
    assert {e["kind"] for e in listed.json()["entries"]} == expected
    rows = csv.DictReader(io.StringIO(b"".join(csv_response.streaming_content).decode()))
    assert {r["kind"] for r in rows} == expected


# --- what each principal sees of saved views ----------------------------------------------------------

# principal → the saved views listed (name, team), or the refusal. A view shared with a team is seen
# by that team's members (any role) and its owner; org admins and finance see their own and their
# teams', nothing more. Every field of a listed row is seen by whoever sees the row.
VIEWS_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": 403,  # saved views are signed-in people's
    "member": [("matrix", "nlp"), ("member's own", None)],
    "lead": [("matrix", "nlp")],
    "finance": [],
    "admin": [("admin's own", None)],
    "node": 403,
    "scim": 403,
}
VIEW_ROW_FIELDS = {
    "id",
    "name",
    "page",
    "query",
    "url",
    "team",
    "team_name",
    "owner",
    "mine",
    "can_delete",
    "created_at",
    "updated_at",
}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_saved_views_each_principal_sees(world: World, principal: str) -> None:
    outsider = world.outsider
    from phantomhub.portal.models import SavedView

    for name in ("member", "admin"):
        SavedView.objects.create(owner=User.objects.get(username=name), name=f"{name}'s own", page="finance")
    vic = User.objects.create_user("vic")
    Membership.objects.create(user=vic, team=outsider.project.team, role=Role.ADMIN)
    SavedView.objects.create(owner=vic, name="vision's", page="runs", team=outsider.project.team)
    response = world.clients[principal].get(reverse("portal-views"))
    expected = VIEWS_SEEN[principal]
    if isinstance(expected, int):
        assert response.status_code == expected
        return
    rows = response.json()["views"]
    assert [(v["name"], v["team"]) for v in rows] == expected
    assert all(set(v) == VIEW_ROW_FIELDS for v in rows)


# --- the people leaderboard: a privacy setting, and each person's runs as the reader may see them ---

# principal → {launched_by: cost_usd} of the people board while it is on, or the refusal. Off, all
# who may read boards get 404 (it is switched off), the rest the same refusals.
PEOPLE_BOARD_SEEN: dict[str, Any] = {
    "anonymous": 401,
    "project": 403,
    "other_project": 403,
    "personal": {"ann": 3.0},  # the organization admin's token: every team's runs
    "member": {"ann": 1.0},  # of the world's team (nlp): ann's nlp run only
    "lead": {"ann": 1.0},
    "finance": {"ann": 3.0},
    "admin": {"ann": 3.0},
    "node": 403,
    "scim": 403,
}


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("principal", PRINCIPALS)
def test_people_board_each_principal_sees(world: World, principal: str, on: bool) -> None:
    outsider = world.outsider
    from decimal import Decimal

    from phantomhub.waste.models import OrgSettings, RunDay

    settings_row = OrgSettings.get()
    settings_row.people_leaderboard = on
    settings_row.save()
    theirs = Run.objects.get(client_id=outsider.create_run(launched_by="ann"))
    Run.objects.filter(pk=world.run_id).update(launched_by="ann")
    for run_id, cost in ((world.run_id, "1.00"), (theirs.pk, "2.00")):
        run = Run.objects.select_related("project").get(pk=run_id)
        RunDay.objects.create(
            run=run, day="2026-09-21", project=run.project, team_id=run.project.team_id, gpu_seconds=3600, cost_usd=Decimal(cost)
        )
    client, expected = world.clients[principal], PEOPLE_BOARD_SEEN[principal]
    board = client.get("/api/v1/portal/leaderboards/people?period=2026-09")
    if isinstance(expected, int) or not on:
        status = expected if isinstance(expected, int) else 404
        assert board.status_code == status, board.content[:300]
        return
    assert board.status_code == 200, board.content[:300]
    assert {row["key"]: row["cost_usd"] for row in board.json()["rows"]} == expected
