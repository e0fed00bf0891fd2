"""Single sign-on's settings from PHANTOMHUB_* variables: a bad or missing value stops start-up
naming the variable (phantomhub/settings.py, docs/identity.md "Configuration")."""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path
from typing import Any

import pytest

from phantomhub.env import ConfigError

ROOT = Path(__file__).resolve().parents[2]
BASE = {"PHANTOMHUB_SECRET_KEY": "oidc-settings-" + "k" * 50, "PHANTOMHUB_DATABASE_URL": "postgres://u@127.0.0.1:5432/db"}
OIDC = {"PHANTOMHUB_OIDC_ISSUER": "https://login.example.com/realms/acme/", "PHANTOMHUB_OIDC_CLIENT_ID": "phantomhub"}


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    for name, value in {**BASE, **env}.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(ROOT / "phantomhub" / "settings.py"))


def test_the_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret = tmp_path / "oidc-secret"
    secret.write_text("from-a-file\n")
    conf = _settings(monkeypatch, **OIDC, PHANTOMHUB_OIDC_CLIENT_SECRET_FILE=str(secret), PHANTOMHUB_LOCAL_PASSWORDS="0",
                     PHANTOMHUB_SESSION_AGE_S="3600", PHANTOMHUB_OIDC_REFRESH_S="60")  # fmt: skip
    assert conf["OIDC_ISSUER"] == "https://login.example.com/realms/acme"  # no trailing slash
    assert conf["OIDC_CLIENT_SECRET"] == "from-a-file"
    assert (conf["LOCAL_PASSWORDS"], conf["SESSION_COOKIE_AGE"], conf["OIDC_REFRESH_S"]) == (False, 3600, 60)
    assert conf["OIDC_USE_PKCE"] is True and conf["OIDC_USE_NONCE"] is True
    off = _settings(monkeypatch)
    assert off["OIDC_ISSUER"] is None and off["LOCAL_PASSWORDS"] is True and off["OIDC_SCOPES"] == "openid email profile groups"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PHANTOMHUB_OIDC_ISSUER": "https://idp.example"}, "PHANTOMHUB_OIDC_CLIENT_ID"),
        ({**OIDC}, "PHANTOMHUB_OIDC_CLIENT_SECRET"),
        ({**OIDC, "PHANTOMHUB_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "PHANTOMHUB_OIDC_CLIENT_SECRET_FILE"),
        ({**OIDC, "PHANTOMHUB_OIDC_CLIENT_SECRET": "s", "PHANTOMHUB_OIDC_SCOPES": "email groups"}, "PHANTOMHUB_OIDC_SCOPES"),
        ({**OIDC, "PHANTOMHUB_OIDC_CLIENT_SECRET": "s", "PHANTOMHUB_OIDC_ISSUER": "http://idp.lan"}, "PHANTOMHUB_OIDC_ISSUER"),
        ({"PHANTOMHUB_LOCAL_PASSWORDS": "0"}, "PHANTOMHUB_LOCAL_PASSWORDS=0 needs PHANTOMHUB_OIDC_ISSUER"),
        ({"PHANTOMHUB_LOCAL_PASSWORDS": "maybe"}, "PHANTOMHUB_LOCAL_PASSWORDS"),
        ({"PHANTOMHUB_OIDC_REFRESH_S": "0"}, "PHANTOMHUB_OIDC_REFRESH_S"),
        ({"PHANTOMHUB_SESSION_AGE_S": "a day"}, "PHANTOMHUB_SESSION_AGE_S"),
    ],
)
def test_a_bad_value_stops_start_up_naming_the_variable(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        _settings(monkeypatch, **env)


def test_an_http_issuer_is_allowed_on_a_loopback_address_or_when_debugging(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = {"PHANTOMHUB_OIDC_CLIENT_ID": "c", "PHANTOMHUB_OIDC_CLIENT_SECRET": "s"}
    assert _settings(monkeypatch, **secret, PHANTOMHUB_OIDC_ISSUER="http://127.0.0.1:9000")["OIDC_ISSUER"]
    assert _settings(monkeypatch, **secret, PHANTOMHUB_OIDC_ISSUER="http://keycloak:8080/realms/x", PHANTOMHUB_DEBUG="1")
