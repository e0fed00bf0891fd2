"""Checking an ID token in full (OpenID Connect Core 1.0, section 3.1.3.7), with no network.

mozilla-django-oidc checks the signature and the nonce only; a token signed by the right
provider for another of its applications, or one that expired, would pass. Here every check has
its own refusal code, which the sign-in page turns into a sentence and the log keeps:

| check | refused as |
|---|---|
| a JWS signed with an asymmetric algorithm by a key of the provider's set | `bad_signature` |
| `iss` is the configured issuer | `wrong_issuer` |
| `aud` names our client id; with several audiences, `azp` is our client id | `wrong_audience` |
| `exp` is in the future, `iat` (and `nbf`) not in the future (LEEWAY_S for clocks) | `token_expired`, `token_not_yet_valid` |
| `nonce` equals the one this browser's sign-in sent (present!) | `nonce_mismatch` |
| `sub` is a non-empty string | `claims_missing` |
"""

from __future__ import annotations

import hmac
import json
from typing import Any

import jwt

from phantomhub.accounts.oidc_provider import OidcError

LEEWAY_S = 60
# Asymmetric only: HS256 would take the client secret as the key, and "none" no key at all.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class UnknownKey(Exception):
    """The token names a key the set lacks: fetch the provider's keys again and retry once."""


def _key(header: dict[str, Any], keys: list[dict[str, Any]]) -> Any:
    kid, alg = header.get("kid"), header.get("alg")
    for jwk in keys:
        if kid is not None and jwk.get("kid") != kid:
            continue
        if jwk.get("alg") not in (None, alg) or jwk.get("use") not in (None, "sig"):
            continue
        try:
            return jwt.PyJWK(jwk, algorithm=alg).key
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
    raise UnknownKey(f"no key {kid!r} for {alg}")


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        code = "token_expired" if name == "exp" else "claims_missing"
        raise OidcError(code, f"the ID token has no numeric {name}")
    return float(value)


def id_token_verify(
    token: str,
    *,
    keys: list[dict[str, Any]],
    issuer: str,
    client_id: str,
    nonce: str | None,
    now: float,
    leeway_s: float = LEEWAY_S,
) -> dict[str, Any]:
    """The ID token's claims once every check passes; OidcError naming the first that fails.
    `nonce` is the one this sign-in sent (required in the token then); None for a token from a
    refresh, which carries none of its own (OpenID Connect Core 1.0, section 12.2)."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise OidcError("bad_signature", "the ID token is not a JWS") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise OidcError("bad_signature", f"the ID token is signed with {alg!r}, not an asymmetric algorithm")
    key = _key(header, keys)
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key,
            algorithms=[alg],
            options={"verify_aud": False, "verify_iss": False, "verify_exp": False, "verify_iat": False, "verify_nbf": False},
        )
    except jwt.PyJWTError as exc:
        raise OidcError("bad_signature", f"the ID token's signature does not verify ({type(exc).__name__})") from None
    if claims.get("iss") != issuer:
        raise OidcError("wrong_issuer", f"the ID token's issuer is {str(claims.get('iss'))[:200]!r}, not {issuer!r}")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    if client_id not in audiences:
        raise OidcError("wrong_audience", f"the ID token is for {json.dumps(audience)[:200]}, not {client_id!r}")
    azp = claims.get("azp")
    if (len(audiences) > 1 or azp is not None) and azp != client_id:
        raise OidcError("wrong_audience", f"the ID token's authorized party is {str(azp)[:200]!r}, not {client_id!r}")
    if now >= _number(claims, "exp") + leeway_s:
        raise OidcError("token_expired", f"the ID token expired at {claims['exp']} (now {int(now)})")
    if _number(claims, "iat") > now + leeway_s:
        raise OidcError("token_not_yet_valid", f"the ID token was issued at {claims['iat']}, in the future (now {int(now)})")
    if "nbf" in claims and _number(claims, "nbf") > now + leeway_s:
        raise OidcError("token_not_yet_valid", f"the ID token is not valid before {claims['nbf']} (now {int(now)})")
    if nonce is not None:
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), nonce.encode()):
            raise OidcError(
                "nonce_mismatch",
                "the ID token's nonce is missing" if sent is None else "the ID token's nonce is not this sign-in's",
            )
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > 255:
        raise OidcError("claims_missing", "the ID token has no usable sub")
    return claims
