"""The ID token's checks (accounts/oidc_tokens.py), each failing on its own: tokens signed here
with a real RSA key, as a provider signs them, then changed one claim at a time."""

from __future__ import annotations

import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from phantomhub.accounts.oidc_provider import OidcError
from phantomhub.accounts.oidc_tokens import LEEWAY_S, UnknownKey, id_token_verify

ISSUER, CLIENT, NONCE, NOW = "https://idp.example", "phantomhub", "n-0123456789", 1_790_000_000.0
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(key: Any, kid: str = "k1") -> dict[str, Any]:
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid, "alg": "RS256", "use": "sig"}


KEYS = [_jwk(KEY)]


def _claims(**over: Any) -> dict[str, Any]:
    claims = {"iss": ISSUER, "aud": CLIENT, "sub": "sub-ann", "exp": NOW + 300, "iat": NOW - 5, "nonce": NONCE}
    claims.update(over)
    return {k: v for k, v in claims.items() if v is not None}


def _token(claims: dict[str, Any], *, key: Any = KEY, kid: str = "k1", alg: str = "RS256") -> str:
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def _verify(token: str, *, nonce: str | None = NONCE, now: float = NOW) -> dict[str, Any]:
    return id_token_verify(token, keys=KEYS, issuer=ISSUER, client_id=CLIENT, nonce=nonce, now=now)


def _refusal(token: str, **kwargs: Any) -> str:
    with pytest.raises(OidcError) as caught:
        _verify(token, **kwargs)
    return caught.value.code


def test_a_good_token_gives_its_claims() -> None:
    assert _verify(_token(_claims()))["sub"] == "sub-ann"
    assert _verify(_token(_claims(aud=[CLIENT, "api"], azp=CLIENT)))["sub"] == "sub-ann"


@pytest.mark.parametrize(
    ("claims", "code"),
    [
        (_claims(iss="https://evil.example"), "wrong_issuer"),
        (_claims(iss=None), "wrong_issuer"),
        (_claims(aud="another-app"), "wrong_audience"),
        (_claims(aud=None), "wrong_audience"),
        (_claims(aud=[CLIENT, "another-app"]), "wrong_audience"),  # several audiences: azp must name us
        (_claims(aud=[CLIENT, "another-app"], azp="another-app"), "wrong_audience"),
        (_claims(azp="another-app"), "wrong_audience"),
        (_claims(exp=NOW - LEEWAY_S - 1), "token_expired"),
        (_claims(exp=None), "token_expired"),
        (_claims(exp="tomorrow"), "token_expired"),
        (_claims(iat=NOW + LEEWAY_S + 5), "token_not_yet_valid"),
        (_claims(nbf=NOW + LEEWAY_S + 5), "token_not_yet_valid"),
        (_claims(iat=None), "claims_missing"),
        (_claims(nonce=None), "nonce_mismatch"),
        (_claims(nonce="another-sign-in"), "nonce_mismatch"),
        (_claims(sub=None), "claims_missing"),
        (_claims(sub=""), "claims_missing"),
    ],
)
def test_each_check_refuses_on_its_own(claims: dict[str, Any], code: str) -> None:
    assert _refusal(_token(claims)) == code


def test_clocks_get_a_leeway() -> None:
    assert _verify(_token(_claims(exp=NOW - LEEWAY_S + 1, iat=NOW + LEEWAY_S - 1)))


def test_a_refreshed_token_needs_no_nonce_but_a_sign_in_always_does() -> None:
    assert _verify(_token(_claims(nonce=None)), nonce=None)["sub"] == "sub-ann"
    assert _refusal(_token(_claims(nonce=None)), nonce="") == "nonce_mismatch"


def test_a_signature_by_another_key_under_the_same_name_is_refused() -> None:
    assert _refusal(_token(_claims(), key=OTHER_KEY)) == "bad_signature"


def test_symmetric_and_unsigned_tokens_are_refused() -> None:
    assert _refusal(jwt.encode(_claims(), "a-client-secret-of-32-bytes-or-more", algorithm="HS256")) == "bad_signature"
    assert _refusal(jwt.encode(_claims(), None, algorithm="none")) == "bad_signature"
    assert _refusal("not a token") == "bad_signature"


def test_a_key_the_set_lacks_asks_for_the_keys_again() -> None:
    with pytest.raises(UnknownKey):
        _verify(_token(_claims(), kid="rotated"))
