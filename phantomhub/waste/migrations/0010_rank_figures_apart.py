"""The per-rank figures move out of RunAnalysis.result into a column of their own.

Analyses stored before keep them in `result` and are served from there
(waste/selectors.py rank_figures_of) until their next analysis writes the new column. On
PostgreSQL the column is compressed with lz4 where the server supports it, as the result is.
"""

from django.db import migrations, models, transaction


def _lz4(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("ALTER TABLE waste_runanalysis ALTER COLUMN rank_figures SET COMPRESSION lz4")
    except Exception:  # a server built without lz4 keeps its default compression
        pass


class Migration(migrations.Migration):
    dependencies = [("waste", "0009_analysis_state_apart")]

    operations = [
        migrations.AddField(model_name="runanalysis", name="rank_figures", field=models.BinaryField(null=True)),
        migrations.RunPython(_lz4, migrations.RunPython.noop),
    ]
