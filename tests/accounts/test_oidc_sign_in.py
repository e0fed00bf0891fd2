"""Single sign-on's server side without a browser (the browser tests, tests/e2e/test_oidc_sign_in.py,
go through a real provider): discovery, the person a sign-in finds or makes, the callback's
refusals, the refresh that ends a session, password sign-in switched off, the break-glass link."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.utils import timezone

from phantomhub.accounts import breakglass, oidc_provider
from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup, GroupMappingRule, Membership, Profile, Role, Team
from phantomhub.accounts.oidc import OidcBackend
from phantomhub.accounts.oidc_provider import OidcError
from phantomhub.accounts.oidc_session import REFRESH_AT, REFRESH_TOKEN, SUBJECT

pytestmark = pytest.mark.django_db

ISSUER = "https://idp.example"
User = get_user_model()


@pytest.fixture(autouse=True)
def _fresh_provider() -> Iterator[None]:
    oidc_provider.forget()
    with override_settings(OIDC_ISSUER=ISSUER, OIDC_CLIENT_ID="phantomhub", OIDC_CLIENT_SECRET="s" * 32):
        yield
    oidc_provider.forget()


# --- discovery -----------------------------------------------------------------------------------


class _Discovery(BaseHTTPRequestHandler):
    document: dict[str, Any] = {}
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        body = json.dumps(self.document).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def idp() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Discovery)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    _Discovery.hits = 0
    _Discovery.document = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/auth",
        "token_endpoint": f"{issuer}/token",
        "jwks_uri": f"{issuer}/jwks",
        "end_session_endpoint": f"{issuer}/session/end",
    }
    with override_settings(OIDC_ISSUER=issuer, EGRESS_ALLOW_HOSTS=[], EGRESS_ALLOW_NETWORKS=[]):
        yield issuer
    server.shutdown()


def test_discovery_is_fetched_once_per_process_from_the_issuer_even_on_an_internal_address(idp: str) -> None:
    first = oidc_provider.provider()
    assert oidc_provider.provider() is first and _Discovery.hits == 1
    assert (first.token_endpoint, first.userinfo_endpoint) == (f"{idp}/token", None)


def test_a_discovery_document_naming_another_issuer_is_refused_and_not_kept(idp: str) -> None:
    _Discovery.document = {**_Discovery.document, "issuer": "https://someone-else.example"}
    for _ in range(2):
        with pytest.raises(OidcError, match=r"its issuer 'https://someone-else\.example' is not") as caught:
            oidc_provider.provider()
        assert caught.value.code == "provider_unavailable"
    assert _Discovery.hits == 2


def test_an_endpoint_that_is_not_http_is_refused() -> None:
    doc = {
        "issuer": ISSUER,
        "authorization_endpoint": "javascript:alert(1)",
        "token_endpoint": f"{ISSUER}/t",
        "jwks_uri": f"{ISSUER}/k",
    }
    with pytest.raises(OidcError, match="authorization_endpoint"):
        oidc_provider.discovery_parse(doc, issuer=ISSUER, allowed_hosts=[])


def test_endpoints_must_be_on_the_issuers_host_or_allowed_by_the_operator() -> None:
    doc = {"issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/auth", "jwks_uri": "https://keys.example/jwks"}
    doc["token_endpoint"] = "https://tokens.example/token"
    with pytest.raises(OidcError, match=r"token_endpoint is on 'tokens\.example'.*PHANTOMHUB_EGRESS_ALLOW_HOSTS"):
        oidc_provider.discovery_parse(doc, issuer=ISSUER, allowed_hosts=["keys.example"])
    found = oidc_provider.discovery_parse(doc, issuer=ISSUER, allowed_hosts=["Keys.example", "tokens.example"])
    assert (found.token_endpoint, found.jwks_uri) == ("https://tokens.example/token", "https://keys.example/jwks")


def test_the_provider_down_sends_the_browser_to_the_sign_in_page_with_its_code() -> None:
    with override_settings(OIDC_ISSUER="http://127.0.0.1:1"):
        response = Client().get("/api/v1/auth/oidc/start")
    assert (response.status_code, response["Location"]) == (302, "/login?error=provider_unavailable")


def test_the_start_goes_to_the_provider_with_state_nonce_and_pkce(idp: str) -> None:
    client = Client()
    response = client.get("/api/v1/auth/oidc/start?next=/runs")
    assert response.status_code == 302 and response["Location"].startswith(f"{idp}/auth?")
    query = dict(p.split("=", 1) for p in response["Location"].split("?", 1)[1].split("&"))
    assert query["code_challenge_method"] == "S256" and query["state"] and query["nonce"]
    assert (
        query["redirect_uri"] == "http%3A%2F%2Ftestserver%2Fapi%2Fv1%2Fauth%2Foidc%2Fcallback"
        or "callback" in query["redirect_uri"]
    )
    assert query["state"] in client.session["oidc_states"]


# --- the person a sign-in finds or makes ---------------------------------------------------------


def _claims(sub: str = "sub-ann", **over: Any) -> dict[str, Any]:
    return {"sub": sub, "preferred_username": "ann", "email": "ann@example.com", "groups": ["ml-nlp"], **over}


def test_a_new_person_is_made_with_their_groups_and_the_mapping_applied() -> None:
    nlp = Team.objects.create(slug="nlp", name="nlp")
    GroupMappingRule.objects.create(pattern="ml-*", grant="team_member", team=nlp)
    ann = OidcBackend().get_or_create_user(_claims())
    assert (ann.username, ann.email, ann.has_usable_password()) == ("ann", "ann@example.com", False)
    assert DirectoryAccount.objects.get(user=ann).oidc_subject == "sub-ann"
    assert Membership.objects.get(user=ann, team=nlp).role == Role.MEMBER
    again = OidcBackend().get_or_create_user(_claims(groups=[]))  # found by subject; the group is gone
    assert again.pk == ann.pk and not Membership.objects.filter(user=ann).exists()
    assert list(DirectoryGroup.objects.values_list("display_name", flat=True)) == ["ml-nlp"]


def test_a_local_account_of_the_same_name_is_never_taken_over() -> None:
    local = User.objects.create_user("ann", password="local-password")
    Profile.objects.create(user=local, is_org_admin=True)
    person = OidcBackend().get_or_create_user(_claims())
    assert person.pk != local.pk and person.username == "ann-2"
    assert not Profile.objects.filter(user=person, is_org_admin=True).exists()


def test_a_person_provisioned_by_scim_is_linked_at_their_first_sign_in() -> None:
    scim = User.objects.create_user("ann")
    DirectoryAccount.objects.create(user=scim, external_id="ext-1")
    assert OidcBackend().get_or_create_user(_claims()).pk == scim.pk
    assert DirectoryAccount.objects.get(user=scim).oidc_subject == "sub-ann"


def test_a_deactivated_person_is_refused() -> None:
    ann = OidcBackend().get_or_create_user(_claims())
    User.objects.filter(pk=ann.pk).update(is_active=False)
    with pytest.raises(OidcError) as caught:
        OidcBackend().get_or_create_user(_claims())
    assert caught.value.code == "account_inactive"
    assert OidcBackend().get_user(ann.pk) is None  # a session of theirs ends at the next request


def test_odd_group_claims_are_read_safely() -> None:
    ann = OidcBackend().get_or_create_user(_claims(groups="solo"))
    assert list(ann.directory_groups.values_list("display_name", flat=True)) == ["solo"]
    OidcBackend().get_or_create_user(_claims(groups=[1, None, "x" * 300, " ok "]))
    assert list(ann.directory_groups.values_list("display_name", flat=True)) == ["ok"]


def test_the_backend_never_answers_a_password_sign_in() -> None:
    User.objects.create_user("ann", password="pw")
    assert OidcBackend().authenticate(None, username="ann", password="pw") is None


# --- the callback's refusals ---------------------------------------------------------------------


def _waiting(client: Client, state: str = "st-1", added_on: float | None = None) -> None:
    session = client.session
    session["oidc_states"] = {state: {"nonce": "n-1", "code_verifier": "v" * 64, "added_on": added_on or time.time()}}
    session.save()


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("code=c", "state_missing"),
        ("code=c&state=never-sent", "state_mismatch"),
        ("error=access_denied&state=st-1", "access_denied"),
        ("error=server_error&state=st-1", "provider_error"),
        ("state=st-1", "provider_error"),  # no code
    ],
)
def test_a_refused_callback_says_why_and_leaves_nobody_signed_in(query: str, code: str) -> None:
    client = Client()
    client.force_login(User.objects.create_user("someone"))
    _waiting(client)
    response = client.get(f"/api/v1/auth/oidc/callback?{query}")
    assert (response.status_code, response["Location"]) == (302, f"/login?error={code}")
    assert "_auth_user_id" not in client.session


def test_a_state_is_used_once_even_when_its_sign_in_fails() -> None:
    client = Client()
    _waiting(client)
    with mock.patch.object(OidcBackend, "sign_in", side_effect=OidcError("token_refused", "invalid_grant")):
        assert client.get("/api/v1/auth/oidc/callback?code=c&state=st-1")["Location"] == "/login?error=token_refused"
    assert client.get("/api/v1/auth/oidc/callback?code=c&state=st-1")["Location"] == "/login?error=state_mismatch"


def test_a_sign_in_started_too_long_ago_is_refused() -> None:
    client = Client()
    _waiting(client, added_on=time.time() - 3600)
    assert client.get("/api/v1/auth/oidc/callback?code=c&state=st-1")["Location"] == "/login?error=state_mismatch"


# --- the refresh ---------------------------------------------------------------------------------


def _oidc_session(client: Client, user: Any, *, due: bool) -> None:
    client.force_login(user, backend="phantomhub.accounts.oidc.OidcBackend")
    session = client.session
    session[SUBJECT], session[REFRESH_TOKEN] = "sub-ann", "rt-1"
    session[REFRESH_AT] = time.time() - 1 if due else time.time() + 900
    session.save()


def test_a_refresh_the_provider_refuses_ends_the_session_with_401() -> None:
    client, ann = Client(), User.objects.create_user("ann")
    _oidc_session(client, ann, due=True)
    with mock.patch.object(OidcBackend, "refresh", side_effect=OidcError("token_refused", "invalid_grant")) as refresh:
        response = client.get("/api/v1/portal/runs")
        assert refresh.call_args.kwargs == {"refresh_token": "rt-1", "subject": "sub-ann"}
    assert response.status_code == 401 and response.json()["error"]["code"] == "session_ended"
    assert client.get("/api/v1/portal/session").json()["authenticated"] is False


def test_a_session_not_due_is_not_refreshed() -> None:
    client, ann = Client(), User.objects.create_user("ann")
    _oidc_session(client, ann, due=False)
    with mock.patch.object(OidcBackend, "refresh") as refresh:
        assert client.get("/api/v1/portal/session").json()["authenticated"] is True
    refresh.assert_not_called()


def test_a_session_without_refresh_token_ends_at_its_refresh() -> None:
    client, ann = Client(), User.objects.create_user("ann")
    _oidc_session(client, ann, due=True)
    session = client.session
    session[REFRESH_TOKEN] = None
    session.save()
    assert client.get("/api/v1/portal/runs").status_code == 401


# --- password sign-in off, the break-glass link ---------------------------------------------------


def test_the_session_api_names_the_sign_in_methods() -> None:
    with override_settings(OIDC_LABEL="Sign in with Okta", LOCAL_PASSWORDS=False):
        methods = Client().get("/api/v1/portal/session").json()["sign_in"]
    assert methods == {"oidc": {"label": "Sign in with Okta", "url": "/api/v1/auth/oidc/start"}, "local_passwords": False}
    with override_settings(OIDC_ISSUER=None):
        assert Client().get("/api/v1/portal/session").json()["sign_in"] == {"oidc": None, "local_passwords": True}


@override_settings(LOCAL_PASSWORDS=False)
def test_password_sign_in_is_refused_when_off_portal_and_admin_alike() -> None:
    User.objects.create_superuser("root", password="root-password-1234")
    credentials = {"username": "root", "password": "root-password-1234"}
    response = Client().post("/api/v1/portal/session", credentials, content_type="application/json")
    assert response.status_code == 403 and response.json()["error"]["code"] == "local_passwords_off"
    admin = Client().post("/admin/login/", credentials)
    assert admin.status_code == 200 and b"Password sign-in is switched off" in admin.content
    assert "_auth_user_id" not in admin.client.session


def _token(link: str) -> str:
    return parse_qs(urlsplit(link).query)["token"][0]


def _admin(name: str = "root") -> Any:
    user = User.objects.create_user(name)
    Profile.objects.create(user=user, is_org_admin=True)
    return user


def test_the_break_glass_link_signs_an_org_admin_in_once(capsys: pytest.CaptureFixture[str]) -> None:
    _admin()
    call_command("breakglass", "root")
    link = capsys.readouterr().out.strip()
    path = link.split("://", 1)[1].split("/", 1)[1]
    client = Client()
    assert client.get(f"/{path}")["Location"] == "/"
    assert client.get("/api/v1/portal/session").json()["user"]["username"] == "root"
    assert Client().get(f"/{path}")["Location"] == "/login?error=breakglass_invalid"


def test_the_break_glass_link_is_refused_for_anyone_but_an_active_org_admin() -> None:
    User.objects.create_user("ann")
    with pytest.raises(CommandError, match="not an organization admin"):
        call_command("breakglass", "ann")
    with pytest.raises(CommandError, match="no person"):
        call_command("breakglass", "nobody")
    root = _admin()
    token = _token(breakglass.link_create("root"))
    User.objects.filter(pk=root.pk).update(is_active=False)
    with pytest.raises(breakglass.LinkRefused, match="deactivated"):
        breakglass.link_use(token)


def test_the_break_glass_link_expires() -> None:
    _admin()
    token = _token(breakglass.link_create("root"))
    later = time.time() + breakglass.LINK_MAX_AGE_S + 5
    with mock.patch.object(signing.time, "time", return_value=later), pytest.raises(breakglass.LinkRefused, match="older than"):
        breakglass.link_use(token)
    with pytest.raises(breakglass.LinkRefused, match="not one this service made"):
        breakglass.link_use(token[:-2] + "xx")


def test_oidccheck_says_what_the_provider_publishes_or_why_it_cannot(idp: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CommandError, match="no 'keys' list"):  # the stand-in serves discovery at every path
        call_command("oidccheck")
    _Discovery.document = {**_Discovery.document, "keys": [{"kid": "k1", "kty": "RSA"}]}
    oidc_provider.forget()
    call_command("oidccheck")
    out = capsys.readouterr().out
    assert f"token                 {idp}/token" in out and "signing keys          1 (k1)" in out
    oidc_provider.forget()
    with override_settings(OIDC_ISSUER="http://127.0.0.1:1"), pytest.raises(CommandError, match="could not connect"):
        call_command("oidccheck")


def test_a_single_sign_on_session_expires_counted_from_its_sign_in_not_its_refreshes() -> None:
    from django.contrib.auth.models import AnonymousUser
    from django.contrib.sessions.backends.db import SessionStore
    from django.test import RequestFactory

    from phantomhub.accounts.oidc import SignedIn
    from phantomhub.accounts.oidc_session import _keep, session_start

    request = RequestFactory().get("/")
    request.session, request.user = SessionStore(), AnonymousUser()
    ann = User.objects.create_user("ann")
    with override_settings(SESSION_COOKIE_AGE=3600):
        session_start(request, SignedIn(ann, "sub-ann", "id-token", "rt-1"))
        expiry = request.session.get_expiry_date()
        assert abs((expiry - timezone.now()).total_seconds() - 3600) < 5
        with mock.patch.object(timezone, "now", return_value=timezone.now() + timedelta(minutes=30)):
            _keep(request, SignedIn(ann, "sub-ann", "id-token-2", "rt-2"))  # a refresh, half an hour later
            assert request.session.get_expiry_date() == expiry
    assert (request.session[REFRESH_TOKEN], request.session[SUBJECT]) == ("rt-2", "sub-ann")
