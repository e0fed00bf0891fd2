"""The audit log is append-only (docs/audit.md): on PostgreSQL a trigger refuses every UPDATE of an
entry, and every DELETE but the retention purge's, which first sets
`SET LOCAL phantomhub.audit_purge = 'on'` in its transaction (phantomhub/audit/services.py).
SQLite, the embedded default, has no such guard: there the service's code path alone keeps it.

TRUNCATE is not refused: it is the database owner's tool (and how the test suite empties its
database); whoever owns the database can drop the trigger as well, so the guard protects entries
from the service, not from the database's owner.
"""

from django.db import migrations

GUARD = """
CREATE OR REPLACE FUNCTION audit_entry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('phantomhub.audit_purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'the audit log is append-only: % of entry % refused', TG_OP, OLD.id
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'only the retention purge deletes entries (docs/audit.md)';
END
$$;
CREATE TRIGGER audit_entry_append_only BEFORE UPDATE OR DELETE ON audit_auditentry
    FOR EACH ROW EXECUTE FUNCTION audit_entry_append_only();
"""
UNGUARD = """
DROP TRIGGER IF EXISTS audit_entry_append_only ON audit_auditentry;
DROP FUNCTION IF EXISTS audit_entry_append_only();
"""


def _on_postgresql(sql: str):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)  # no parameters: the % are plpgsql's

    return run


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [migrations.RunPython(_on_postgresql(GUARD), _on_postgresql(UNGUARD), elidable=False)]
