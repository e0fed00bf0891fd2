"""Guessing passwords: after PHANTOMHUB_SIGN_IN_FAILURE_LIMIT wrong ones for a username from one
address, that pair gets 429 with Retry-After until the cool-off ends; real users who mistype a
few times are not bothered, and nobody can lock another person out from elsewhere. One password
tried over many usernames from one address is stopped too: after
PHANTOMHUB_SIGN_IN_ADDRESS_FAILURE_LIMIT failures (any usernames) that address gets 429."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
SESSION = "/api/v1/portal/session"
LIMIT: int = settings.AXES_FAILURE_LIMIT
ADDRESS_LIMIT: int = settings.SIGN_IN_ADDRESS_FAILURE_LIMIT
COOL_OFF_S = int(settings.AXES_COOLOFF_TIME.total_seconds())


@pytest.fixture
def ada(db: None) -> User:
    return User.objects.create_user("ada", password="right-password")


def _sign_in(client: APIClient, password: str, username: str = "ada", **extra: Any) -> Any:
    return client.post(SESSION, {"username": username, "password": password}, format="json", **extra)


def test_the_limit_is_generous_for_people_and_firm_for_guessing() -> None:
    assert 5 <= LIMIT <= 20 and 300 <= COOL_OFF_S <= 3600


def test_repeated_wrong_passwords_get_429_with_retry_after_and_even_the_right_one_waits(ada: User) -> None:
    client = APIClient()
    for _ in range(LIMIT - 1):
        assert _sign_in(client, "guess").status_code == 400
    locked = _sign_in(client, "guess")
    assert locked.status_code == 429
    assert locked.json()["error"]["code"] == "throttled"
    assert COOL_OFF_S - 5 <= int(locked["Retry-After"]) <= COOL_OFF_S
    again = _sign_in(client, "right-password")
    assert again.status_code == 429 and int(again["Retry-After"]) <= COOL_OFF_S
    assert client.get("/api/v1/portal/runs").status_code == 401  # not signed in


def test_the_lockout_ends_after_the_cool_off_and_retrying_does_not_extend_it(ada: User) -> None:
    client = APIClient()
    for _ in range(LIMIT):
        _sign_in(client, "guess")
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(seconds=COOL_OFF_S - 60))
    for _ in range(3):
        retry = _sign_in(client, "guess")
        assert retry.status_code == 429 and 55 <= int(retry["Retry-After"]) <= 60
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(seconds=61))
    assert _sign_in(client, "right-password").status_code == 200


def test_a_person_who_mistypes_a_few_times_signs_in_and_starts_afresh(ada: User) -> None:
    client = APIClient()
    for _ in range(LIMIT - 1):
        _sign_in(client, "typo")
    assert _sign_in(client, "right-password").status_code == 200
    client.delete(SESSION)
    for _ in range(LIMIT - 1):
        assert _sign_in(client, "typo").status_code == 400  # the success reset the count
    assert _sign_in(client, "right-password").status_code == 200


def test_a_guesser_cannot_lock_the_user_out_from_elsewhere_nor_other_users(ada: User) -> None:
    User.objects.create_user("bob", password="bobs-password")
    attacker = APIClient(REMOTE_ADDR="203.0.113.9")
    for _ in range(LIMIT):
        _sign_in(attacker, "guess")
    assert _sign_in(attacker, "right-password").status_code == 429
    assert _sign_in(APIClient(REMOTE_ADDR="198.51.100.7"), "right-password").status_code == 200
    assert _sign_in(attacker, "bobs-password", username="bob").status_code == 200


def test_the_admin_sign_in_is_locked_out_too(ada: User) -> None:
    client = Client()
    for _ in range(LIMIT - 1):
        assert client.post("/admin/login/", {"username": "ada", "password": "guess"}).status_code == 200  # the form again
    locked = client.post("/admin/login/", {"username": "ada", "password": "guess"})
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert _sign_in(APIClient(), "right-password").status_code == 429  # one count for both doors


def test_the_address_limit_is_above_a_few_people_mistyping_and_far_below_a_spray() -> None:
    assert 3 * LIMIT <= ADDRESS_LIMIT <= 100


def _spray(client: APIClient, n: int, password: str = "Summer2026!") -> list[int]:
    return [_sign_in(client, password, username=f"user{i}").status_code for i in range(n)]


def test_one_password_over_many_usernames_from_one_address_gets_429_with_retry_after(ada: User) -> None:
    sprayer = APIClient(REMOTE_ADDR="203.0.113.9")
    assert _spray(sprayer, ADDRESS_LIMIT) == [400] * ADDRESS_LIMIT  # no username reached its own limit
    refused = _sign_in(sprayer, "Summer2026!", username="user-next")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "throttled" and "from this address" in error["message"]
    assert COOL_OFF_S - 5 <= int(refused["Retry-After"]) <= COOL_OFF_S
    # Every username, the right password too: the address is stopped, not one account.
    assert _sign_in(sprayer, "right-password").status_code == 429
    assert _sign_in(APIClient(REMOTE_ADDR="198.51.100.7"), "right-password").status_code == 200  # elsewhere: fine
    # Refused attempts are not recorded: the count stays where it was, so waiting ends it.
    assert (
        sum(AccessAttempt.objects.filter(ip_address="203.0.113.9").values_list("failures_since_start", flat=True))
        == ADDRESS_LIMIT
    )


def test_the_address_limit_ends_once_its_failures_are_older_than_the_cool_off(ada: User) -> None:
    sprayer = APIClient(REMOTE_ADDR="203.0.113.9")
    _spray(sprayer, ADDRESS_LIMIT)
    attempts = AccessAttempt.objects.filter(ip_address="203.0.113.9")
    attempts.update(attempt_time=timezone.now() - timedelta(seconds=COOL_OFF_S - 30))
    retry = _sign_in(sprayer, "guess", username="someone")
    assert retry.status_code == 429 and 25 <= int(retry["Retry-After"]) <= 30
    attempts.update(attempt_time=timezone.now() - timedelta(seconds=COOL_OFF_S + 1))
    assert _sign_in(sprayer, "right-password").status_code == 200


def test_the_address_limit_counts_failures_not_usernames(ada: User) -> None:
    client = APIClient(REMOTE_ADDR="203.0.113.9")
    for name in ("ada", "bob", "eve"):  # three people mistyping just under their own limit
        for _ in range(LIMIT - 1):
            assert _sign_in(client, "typo", username=name).status_code == 400
    expected = 200 if 3 * (LIMIT - 1) < ADDRESS_LIMIT else 429
    assert _sign_in(client, "right-password").status_code == expected


def test_the_admin_sign_in_is_under_the_address_limit_too(ada: User) -> None:
    _spray(APIClient(REMOTE_ADDR="203.0.113.9"), ADDRESS_LIMIT)
    admin = Client(REMOTE_ADDR="203.0.113.9").post("/admin/login/", {"username": "ada", "password": "right-password"})
    assert admin.status_code == 429 and int(admin["Retry-After"]) > 0


def test_sessions_still_name_the_backend_that_signed_the_person_in(ada: User) -> None:
    # The address limit's backend signs nobody in: a session must not come to name it.
    client = APIClient()
    assert _sign_in(client, "right-password").status_code == 200
    assert client.get(SESSION).json()["authenticated"] is True
    forced = APIClient()
    forced.force_login(ada)  # the first backend with get_user
    assert forced.get(SESSION).json()["authenticated"] is True


def _via_proxy(forwarded_for: str) -> APIClient:
    return APIClient(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR=forwarded_for)


def test_behind_a_trusted_proxy_the_address_is_the_client_s_not_the_proxy_s(ada: User) -> None:
    with override_settings(TRUSTED_PROXIES=["10.0.0.0/8"]):
        # The sprayer's own X-Forwarded-For entry is ignored: the proxy appended the real one.
        sprayer = _via_proxy("6.6.6.6, 198.51.100.7")
        _spray(sprayer, ADDRESS_LIMIT)
        assert _sign_in(sprayer, "right-password").status_code == 429
        assert _sign_in(_via_proxy("198.51.100.7"), "right-password").status_code == 429
        # Everyone else behind the same proxy signs in.
        assert _sign_in(_via_proxy("203.0.113.5"), "right-password").status_code == 200
        assert _sign_in(_via_proxy("203.0.113.6, 10.0.0.9"), "right-password").status_code == 200  # two proxies
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"198.51.100.7"}


def test_x_forwarded_for_from_anyone_else_is_not_believed(ada: User) -> None:
    with override_settings(TRUSTED_PROXIES=["10.0.0.0/8"]):
        for i in range(ADDRESS_LIMIT):  # a new made-up address each time, straight to the server
            client = APIClient(REMOTE_ADDR="198.51.100.7", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}")
            _sign_in(client, "Summer2026!", username=f"user{i}")
        assert _sign_in(APIClient(REMOTE_ADDR="198.51.100.7"), "right-password").status_code == 429
    with override_settings(TRUSTED_PROXIES=[]):  # no proxies: the header means nothing
        client = APIClient(REMOTE_ADDR="198.51.100.8", HTTP_X_FORWARDED_FOR="203.0.113.5")
        _sign_in(client, "guess")
    assert AccessAttempt.objects.filter(ip_address="198.51.100.8").exists()
