"""The identity provider as PhantomHub reaches it: its discovery document and its signing keys,
each fetched through the egress policy and kept for the life of the process
(docs/identity.md, "Single sign-on (OIDC)").

The issuer (PHANTOMHUB_OIDC_ISSUER) is configured by the operator, so its host may be internal;
every endpoint the discovery document names must be on that host or one the operator listed in
PHANTOMHUB_EGRESS_ALLOW_HOSTS (providers such as Google serve tokens and keys from other hosts).
A failed fetch is not cached: the next sign-in tries again, and until one succeeds every sign-in
is refused with a clear message.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from phantomhub import egress

log = logging.getLogger(__name__)

# Discovery documents and key sets are small; a token answer carries three tokens.
MAX_DOCUMENT_BYTES = 256 * 1024


class OidcError(Exception):
    """A single sign-on step refused: `code` is what the sign-in page shows a sentence for
    (frontend/src/pages/SignIn.tsx), `detail` what the log says."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class Discovery:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    end_session_endpoint: str | None


_lock = threading.Lock()
_discovery: Discovery | None = None
_keys: list[dict[str, Any]] | None = None


def issuer_host() -> str:
    return egress.url_host(settings.OIDC_ISSUER or "")


def fetch_json(url: str, *, what: str, headers: dict[str, str] | None = None) -> Any:
    """GET a JSON document from the provider through egress, or OidcError(provider_unavailable)."""
    reply = egress.get(
        url, headers={"Accept": "application/json", **(headers or {})}, timeout_s=settings.OIDC_TIMEOUT_S,
        max_bytes=MAX_DOCUMENT_BYTES, trusted_hosts=[issuer_host()],
    )  # fmt: skip
    return reply_json(reply, what=what)


def reply_json(reply: egress.Reply, *, what: str) -> Any:
    if reply.status_code is None:
        raise OidcError("provider_unavailable", f"{what}: {reply.reason}")
    if reply.truncated:
        raise OidcError("provider_unavailable", f"{what}: the answer is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        data = json.loads(reply.body)
    except ValueError:
        raise OidcError("provider_unavailable", f"{what}: HTTP {reply.status_code}, not JSON") from None
    if not 200 <= reply.status_code < 300 and not (isinstance(data, dict) and "error" in data):
        raise OidcError("provider_unavailable", f"{what}: HTTP {reply.status_code}")
    return data


def _endpoint(doc: dict[str, Any], name: str, *, required: bool, hosts: set[str]) -> str | None:
    value = doc.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https") or not urlsplit(value).netloc:
        raise OidcError("provider_unavailable", f"discovery: {name} is missing or not an http(s) URL")
    host = egress.url_host(value)
    if host not in hosts:
        why = f"discovery: {name} is on {host!r}, neither the issuer's host nor in PHANTOMHUB_EGRESS_ALLOW_HOSTS"
        raise OidcError("provider_unavailable", why)
    return value


def discovery_parse(doc: Any, *, issuer: str, allowed_hosts: list[str]) -> Discovery:
    """The endpoints of a discovery document, checked: its issuer must be exactly the configured
    one (OpenID Connect Discovery 1.0, section 4.3), or someone else's provider is answering; and
    every endpoint must be on the issuer's host or one of `allowed_hosts` (the operator's
    PHANTOMHUB_EGRESS_ALLOW_HOSTS), so that a changed document cannot send the client secret, or
    the browser, anywhere else."""
    if not isinstance(doc, dict):
        raise OidcError("provider_unavailable", "discovery: not a JSON object")
    if doc.get("issuer") != issuer:
        raise OidcError("provider_unavailable", f"discovery: its issuer {doc.get('issuer')!r} is not {issuer!r}")
    hosts = {egress.url_host(issuer), *(h.lower().strip("[]") for h in allowed_hosts)}
    authorization = _endpoint(doc, "authorization_endpoint", required=True, hosts=hosts)
    token = _endpoint(doc, "token_endpoint", required=True, hosts=hosts)
    jwks = _endpoint(doc, "jwks_uri", required=True, hosts=hosts)
    assert authorization and token and jwks  # required=True
    return Discovery(
        issuer=issuer,
        authorization_endpoint=authorization,
        token_endpoint=token,
        jwks_uri=jwks,
        userinfo_endpoint=_endpoint(doc, "userinfo_endpoint", required=False, hosts=hosts),
        end_session_endpoint=_endpoint(doc, "end_session_endpoint", required=False, hosts=hosts),
    )


def provider() -> Discovery:
    """The configured provider's endpoints, fetched at the first sign-in of the process."""
    global _discovery
    issuer = settings.OIDC_ISSUER
    if not issuer:
        raise OidcError("oidc_off", "single sign-on is not configured (PHANTOMHUB_OIDC_ISSUER)")
    with _lock:
        if _discovery is not None and _discovery.issuer == issuer:
            return _discovery
    doc = fetch_json(f"{issuer}/.well-known/openid-configuration", what="discovery")
    found = discovery_parse(doc, issuer=issuer, allowed_hosts=settings.EGRESS_ALLOW_HOSTS)
    with _lock:
        _discovery = found
    log.info("OIDC provider %s discovered", issuer)
    return found


def signing_keys(*, refetch: bool = False) -> list[dict[str, Any]]:
    """The provider's public keys (its JWKS), fetched once and again when a token names a key
    the cached set lacks (the provider rotated its keys)."""
    global _keys
    with _lock:
        if _keys is not None and not refetch:
            return _keys
    doc = fetch_json(provider().jwks_uri, what="signing keys")
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise OidcError("provider_unavailable", "signing keys: no 'keys' list")
    keys = [k for k in doc["keys"] if isinstance(k, dict)]
    with _lock:
        _keys = keys
    return keys


def forget() -> None:
    """Drop what was fetched (tests; a changed configuration)."""
    global _discovery, _keys
    with _lock:
        _discovery, _keys = None, None
