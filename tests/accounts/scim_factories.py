"""SCIM helpers shared by tests/accounts/test_scim.py and the access matrix: a client that speaks
application/scim+json with a token, the RFC 7644 example bodies, and the matrix's ids and bodies."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from phantomhub.accounts.models import DirectoryAccount, DirectoryGroup
from phantomhub.accounts.scim.services import user_create
from phantomhub.accounts.scim.values import UserFields
from phantomhub.accounts.services import scim_token_create

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH_OP = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
BASE = "/scim/v2"

# RFC 7644 section 3.3: "Creating Resources", the User in the request.
RFC_CREATE_USER: dict[str, Any] = {
    "schemas": [USER],
    "userName": "bjensen",
    "externalId": "bjensen",
    "name": {"formatted": "Ms. Barbara J Jensen III", "familyName": "Jensen", "givenName": "Barbara"},
}


def rfc_put_user(scim_id: str) -> dict[str, Any]:
    """RFC 7644 section 3.5.1: "Replacing with PUT" (the id is the one PhantomHub issued)."""
    return {
        "schemas": [USER],
        "id": scim_id,
        "userName": "bjensen",
        "externalId": "bjensen",
        "name": {"formatted": "Ms. Barbara J Jensen III", "familyName": "Jensen", "givenName": "Barbara", "middleName": "Jane"},
        "roles": [],
        "emails": [{"value": "bjensen@example.com"}, {"value": "babs@jensen.org"}],
    }


def patch(*operations: dict[str, Any]) -> dict[str, Any]:
    return {"schemas": [PATCH_OP], "Operations": list(operations)}


class ScimClient:
    """Django's test client with `Authorization: Bearer <token>` and SCIM's content type."""

    def __init__(self, token: str | None = None, client: Client | None = None) -> None:
        self.client = client or Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.get(BASE + path, params or {}, **self.headers)

    def send(self, method: str, path: str, body: Any = None, **extra: Any) -> Any:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body) if body is not None else ""
        return getattr(self.client, method)(BASE + path, data, content_type="application/scim+json", **self.headers, **extra)

    def post(self, path: str, body: Any, **extra: Any) -> Any:
        return self.send("post", path, body, **extra)

    def put(self, path: str, body: Any) -> Any:
        return self.send("put", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self.send("patch", path, body)

    def delete(self, path: str) -> Any:
        return self.send("delete", path)


def scim_client() -> ScimClient:
    return ScimClient(scim_token_create(name="test idp").raw)


# --- the access matrix (tests/test_access_matrix.py) -------------------------------------------

# The SCIM endpoints and their methods: plain Django views, listed for the matrix.
SCIM_METHODS = {
    "scim-users": ["get", "post"],
    "scim-user": ["get", "put", "patch", "delete"],
    "scim-groups": ["get", "post"],
    "scim-group": ["get", "put", "patch", "delete"],
    "scim-service-provider-config": ["get"],
    "scim-resource-types": ["get"],
    "scim-resource-type": ["get"],
    "scim-schemas": ["get"],
    "scim-schema": ["get"],
}


def matrix_kwargs(name: str) -> dict[str, str]:
    """URL arguments naming a person and a group that exist."""
    if name == "scim-user":
        user = user_create(UserFields(username="matrix-person", active=True))
        return {"uuid": str(DirectoryAccount.objects.get(user=user).scim_id)}
    if name == "scim-group":
        return {"uuid": str(DirectoryGroup.objects.create(display_name="matrix-group").scim_id)}
    if name == "scim-resource-type":
        return {"uuid": "User"}
    if name == "scim-schema":
        return {"uuid": USER}
    return {}


MATRIX_BODIES: dict[tuple[str, str], Any] = {
    ("scim-users", "post"): {"schemas": [USER], "userName": "matrix-new", "active": True},
    ("scim-user", "put"): {"schemas": [USER], "userName": "matrix-person", "active": True},
    ("scim-user", "patch"): patch({"op": "replace", "path": "name.givenName", "value": "Matrix"}),
    ("scim-groups", "post"): {"schemas": [GROUP], "displayName": "matrix-new-group"},
    ("scim-group", "put"): {"schemas": [GROUP], "displayName": "matrix-group", "members": []},
    ("scim-group", "patch"): patch({"op": "replace", "path": "externalId", "value": "m-1"}),
}


def matrix_call(client: Any, method: str, path: str, name: str) -> Any:
    """One call of the matrix with SCIM's content type (the test client's session, if any, goes along)."""
    body = MATRIX_BODIES.get((name, method))
    if method == "get":
        return client.get(path)
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method)(path, data, content_type="application/scim+json")
