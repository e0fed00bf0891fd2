"""Entries are append-only: on PostgreSQL the guard trigger refuses every UPDATE and DELETE by
the service except the retention purge's; the purge keeps PHANTOMHUB_AUDIT_RETENTION_DAYS
(docs/audit.md, "Append-only" and "Retention"). Also run on SQLite (`backends`), where the
purge's code path is the same without the guard."""

from __future__ import annotations

import os
import runpy
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from phantomhub.accounts.models import Team
from phantomhub.audit import services
from phantomhub.audit.context import acting
from phantomhub.audit.models import AuditEntry
from phantomhub.env import ConfigError
from tests.audit.conftest import mark

pytestmark = [pytest.mark.django_db, pytest.mark.backends]


def _entry(age_days: float) -> AuditEntry:
    return AuditEntry.objects.create(
        content_type=ContentType.objects.get_for_model(Team),
        object_pk="1",
        object_repr="old",
        action=AuditEntry.Action.UPDATE,
        kind="team",
        timestamp=timezone.now() - timedelta(days=age_days),
    )


@pytest.fixture
def postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the guard trigger is PostgreSQL's; SQLite keeps the rule by its code path alone")


def test_an_update_or_delete_by_the_service_is_refused(postgresql: None) -> None:
    entry = _entry(0)
    for attempt in (
        lambda: AuditEntry.objects.filter(pk=entry.pk).update(actor_label="someone else"),
        lambda: AuditEntry.objects.filter(pk=entry.pk).delete(),
        lambda: entry.save(),  # an UPDATE of the whole row
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    assert AuditEntry.objects.get(pk=entry.pk).actor_label == "system"


def test_the_purge_flag_lets_only_deletes_through(postgresql: None) -> None:
    entry = _entry(0)

    def flagged(write: Any) -> None:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(services.PURGE_FLAG_SQL)
            write()

    with pytest.raises(DatabaseError, match="append-only"):
        flagged(lambda: AuditEntry.objects.filter(pk=entry.pk).update(object_repr="rewritten"))
    flagged(lambda: AuditEntry.objects.filter(pk=entry.pk).delete())
    assert not AuditEntry.objects.filter(pk=entry.pk).exists()


def test_after_a_purge_the_rest_of_its_transaction_is_guarded_again(postgresql: None, settings: Any) -> None:
    """The purge inside another transaction (here the test's own) leaves no flag behind it."""
    settings.AUDIT_RETENTION_DAYS = 30
    _entry(40)
    kept = _entry(0)
    assert services.audit_purge() == 1
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(pk=kept.pk).delete()


def test_deleting_a_person_leaves_their_entries_as_they_were(db: None) -> None:
    start = mark()
    person = User.objects.create_user("leaver")
    with acting("leaver", person=person, address="192.0.2.9"):
        Team.objects.create(slug="left-behind", name="x")
    person_id = person.pk
    person.delete()  # no cascade into the log, no SET NULL (an UPDATE the guard would refuse)
    entry = AuditEntry.objects.get(id__gt=start, kind="team")
    assert (entry.actor_id, entry.actor_label, entry.remote_addr) == (person_id, "leaver", "192.0.2.9")


def test_retention_purges_what_is_older_and_keeps_the_rest(settings: Any) -> None:
    settings.AUDIT_RETENTION_DAYS = 30
    old, edge, recent = _entry(31), _entry(29.9), _entry(1)
    assert services.audit_purge() == 1
    assert set(AuditEntry.objects.filter(pk__in=[old.pk, edge.pk, recent.pk]).values_list("pk", flat=True)) == {
        edge.pk,
        recent.pk,
    }
    assert services.audit_purge() == 0  # idempotent: beat may send it twice


def test_the_purge_works_through_chunks(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.AUDIT_RETENTION_DAYS = 400
    monkeypatch.setattr(services, "PURGE_CHUNK", 3)
    for _ in range(7):
        _entry(401)
    kept = _entry(399)
    assert services.audit_purge() == 7
    assert list(AuditEntry.objects.filter(kind="team", object_repr="old").values_list("pk", flat=True)) == [kept.pk]


def _settings_with(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> dict[str, Any]:
    """phantomhub/settings.py as a process started with only these PHANTOMHUB_* variables reads it."""
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    base = {"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_VAR_DIR": str(tmp_path), "PHANTOMHUB_DATABASE_URL": "postgres://u@127.0.0.1/db"}
    for name, value in {**base, **env}.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(Path(__file__).resolve().parents[2] / "phantomhub" / "settings.py"))


def test_the_retention_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _settings_with(monkeypatch, tmp_path)["AUDIT_RETENTION_DAYS"] == 400
    assert _settings_with(monkeypatch, tmp_path, PHANTOMHUB_AUDIT_RETENTION_DAYS="30")["AUDIT_RETENTION_DAYS"] == 30
    for bad in ("29", "a year", "-1"):
        with pytest.raises(ConfigError, match="PHANTOMHUB_AUDIT_RETENTION_DAYS"):
            _settings_with(monkeypatch, tmp_path, PHANTOMHUB_AUDIT_RETENTION_DAYS=bad)
