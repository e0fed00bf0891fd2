"""Guessing passwords: after PHANTOMHUB_SIGN_IN_FAILURE_LIMIT wrong ones for a username from one
address, that pair gets 429 with Retry-After until the cool-off ends; real users who mistype a
few times are not bothered, and nobody can lock another person out from elsewhere."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

pytestmark = [pytest.mark.django_db, pytest.mark.backends]
SESSION = "/api/v1/portal/session"
LIMIT: int = settings.AXES_FAILURE_LIMIT
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
