# Model version 4 (docs/waste-model.md, "Jobs: rework, restarts and checkpoints"): a job's lost
# work as idle labels (rework, restart), priced per run (RunAnalysis.lost) and per day (lost_usd);
# every stored analysis is queued for recomputation, and the sweep redoes them from raw telemetry
# (their stored states, of version 3, are refused and rebuilt).

from decimal import Decimal
from django.db import migrations, models


def requeue(apps, schema_editor):
    apps.get_model("waste", "RunAnalysis").objects.update(analysed_seq=-1)


class Migration(migrations.Migration):

    dependencies = [
        ('waste', '0010_rank_figures_apart'),
    ]
    # Before the portal's read views exist on a fresh database: SQLite adds a column by rebuilding
    # the table, which a view reading it refuses (on an existing database the views step aside
    # while migrations run: phantomhub/portal/readviews.py).
    run_before = [('portal', '0002_closed_months_frozen')]

    operations = [
        migrations.AddField(
            model_name='projectday',
            name='lost_usd',
            field=models.DecimalField(decimal_places=2, default=Decimal('0'), max_digits=16),
        ),
        migrations.AddField(
            model_name='runanalysis',
            name='lost',
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='runday',
            name='lost_usd',
            field=models.DecimalField(decimal_places=2, default=Decimal('0'), max_digits=16),
        ),
        migrations.RunPython(requeue, migrations.RunPython.noop),
    ]
