"""SCIM provisioning end to end against a real PhantomHub (gunicorn): an organization admin makes
a SCIM token in Settings, the identity provider (this test, over HTTP) provisions a person and
their group, the person signs in, and one PATCH from the identity provider ends their session in
the browser. The SCIM token's bounds hold through the real server: the admin's own browser
session is refused at /scim/v2/, and a body declared over the bound is refused before it is sent."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.conftest import Server

pytestmark = [pytest.mark.e2e, pytest.mark.live_server, pytest.mark.slow]

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
PASSWORD = "e2e-scim-ann-password-1234"


def scim(server: Server, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{server.url}/scim/v2{path}",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/scim+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_identity_provider_provisions_and_deactivates_a_signed_in_person(
    server: Server, signed_in: Any, browser: Any
) -> None:
    page = signed_in
    page.goto("/settings?tab=tokens")
    page.get_by_text("SCIM (identity provider)").click()
    page.get_by_label("Name").fill("e2e identity provider")
    page.get_by_role("button", name="Create token").click()
    token = page.locator(".token-value").inner_text().strip()
    assert token.startswith("phk_")
    page.get_by_role("table", name="API tokens").get_by_role("cell", name="e2e identity provider").wait_for()

    status, ann = scim(server, token, "POST", "/Users", {"schemas": [USER], "userName": "e2e-scim-ann", "active": True})
    assert status == 201, ann
    status, group = scim(
        server, token, "POST", "/Groups", {"schemas": [GROUP], "displayName": "e2e-people", "members": [{"value": ann["id"]}]}
    )
    assert status == 201 and [m["value"] for m in group["members"]] == [ann["id"]]
    # A directory person signs in through the identity provider; this server has no OIDC, so give
    # ann a password to sign in with, which stands in for that session.
    set_password = (
        "from django.contrib.auth.models import User; "
        f"u = User.objects.get(username='e2e-scim-ann'); u.set_password({PASSWORD!r}); u.save()"
    )
    server.manage("shell", "-c", set_password)
    context = browser.new_context(base_url=server.url)
    try:
        own = context.new_page()
        own.goto("/login")
        own.get_by_label("Username").fill("e2e-scim-ann")
        own.get_by_label("Password").fill(PASSWORD)
        own.get_by_role("button", name="Sign in").click()
        own.get_by_role("heading", name="Overview").wait_for()

        status, after = scim(
            server,
            token,
            "PATCH",
            f"/Users/{ann['id']}",
            {"schemas": [PATCH_OP], "Operations": [{"op": "replace", "value": {"active": False}}]},
        )
        assert status == 200 and after["active"] is False

        own.reload()
        own.get_by_label("Username").wait_for()  # signed out: the sign-in form again
        session = own.request.get(f"{server.url}/api/v1/portal/session").json()
        assert session["authenticated"] is False
    finally:
        context.close()

    # The admin's own browser session does not reach SCIM: it is machine to machine.
    refused = page.request.get(f"{server.url}/scim/v2/Users")
    assert refused.status == 403 and refused.json()["schemas"] == ["urn:ietf:params:scim:api:messages:2.0:Error"]
    # A body declared over the bound (1 MiB) gets 413 before it is sent: the server answers after
    # the headers alone.
    address = urlsplit(server.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    connection.putrequest("POST", "/scim/v2/Users")
    connection.putheader("Authorization", f"Bearer {token}")
    connection.putheader("Content-Type", "application/scim+json")
    connection.putheader("Content-Length", str(4 * 1024 * 1024))
    connection.endheaders()
    answer = connection.getresponse()
    assert answer.status == 413 and json.loads(answer.read())["status"] == "413"
    connection.close()
