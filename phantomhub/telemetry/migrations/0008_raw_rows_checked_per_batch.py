"""Raw rows no longer carry a foreign-key constraint to their run on PostgreSQL.

The constraint was checked row by row at every commit: a deferred trigger event and an index
lookup of the run per stored row, about 40% of PostgreSQL's CPU for a 400-row step batch (measured
by bench/pg_copy.py, in the history up to a2b9cb0; docs/design-notes.md). Ingest now checks the
run once per batch instead, in the statement that updates the run under its row lock in the same
transaction as the rows (services._after_ingest: no run, no rows). Runs are never deleted by
PhantomHub (retention drops raw partitions and prunes rows, never runs), so nothing else wrote
rows the constraint guarded against. The model keeps its relation (db_constraint=False). SQLite
keeps its constraint: its tables are not rebuilt for this.
"""

import django.db.models.deletion
from django.db import migrations, models

TABLES = ("telemetry_step", "telemetry_systemsample")


def _drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {table}_run_id_fk")


def _restore(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(
                f"ALTER TABLE {table} ADD CONSTRAINT {table}_run_id_fk FOREIGN KEY (run_id) "
                "REFERENCES telemetry_run (id) DEFERRABLE INITIALLY DEFERRED"
            )


def _run_field() -> models.ForeignKey:
    return models.ForeignKey(
        db_constraint=False,
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="telemetry.run",
    )


class Migration(migrations.Migration):
    dependencies = [("telemetry", "0007_partition_raw_tables")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_drop, _restore)],
            state_operations=[
                migrations.AlterField(model_name="step", name="run", field=_run_field()),
                migrations.AlterField(model_name="systemsample", name="run", field=_run_field()),
            ],
        )
    ]
