from django.db import migrations, models

# Ranks stored before this migration get their last step from their rows (one index lookup per
# rank: (run_id, rank, step) is the primary key of telemetry_step).
BACKFILL_LAST_STEP = """
UPDATE telemetry_runrank SET last_step = (
    SELECT MAX(s.step) FROM telemetry_step s
    WHERE s.run_id = telemetry_runrank.run_id AND s.rank = telemetry_runrank.rank
) WHERE step_rows > 0
"""


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0003_runrank_step_rows'),
    ]

    operations = [
        migrations.AddField(
            model_name='runrank',
            name='last_step',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='runrank',
            name='reused_step_rows',
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunSQL(BACKFILL_LAST_STEP, reverse_sql=migrations.RunSQL.noop),
    ]
