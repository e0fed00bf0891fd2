"""The incremental state moves out of RunAnalysis into RunAnalysisState, in a compact form.

Old states (one orjson document each) are dropped, not converted: a run without a state is
analysed from scratch on its next change, which gives the same result. On PostgreSQL the large
columns are compressed with lz4 where the server supports it (much cheaper to write than the
default pglz, and these are rewritten by every analysis of a live run).
"""

import django.db.models.deletion
from django.db import migrations, models, transaction

_LZ4_COLUMNS = (
    ("waste_runanalysisstate", "ranks"),
    ("waste_runanalysisstate", "windows"),
    ("waste_runanalysis", "result"),
)


def _drop_old_states(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("waste", "RunAnalysis").objects.update(state=None, rank_rows={}, rank_last_step={})


def _lz4(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, column in _LZ4_COLUMNS:
        try:
            with transaction.atomic(using=schema_editor.connection.alias):
                schema_editor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION lz4")
        except Exception:  # a server built without lz4 keeps its default compression
            pass


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0005_run_client_id"),
        ("waste", "0008_analysis_debounce_30s"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunAnalysisState",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="analysis_state",
                        serialize=False,
                        to="telemetry.run",
                    ),
                ),
                ("header", models.BinaryField()),
                ("ranks", models.BinaryField()),
                ("windows", models.BinaryField()),
            ],
        ),
        migrations.RunPython(_drop_old_states, migrations.RunPython.noop),
        migrations.RunPython(_lz4, migrations.RunPython.noop),
    ]
