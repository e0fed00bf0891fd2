import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import phantomhub.telemetry.partitions


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_node_tokens"),
        ("telemetry", "0005_run_client_id"),
    ]

    operations = [
        migrations.CreateModel(
            name="ProjectRetention",
            fields=[
                (
                    "project",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="raw_retention",
                        serialize=False,
                        to="accounts.project",
                    ),
                ),
                (
                    "raw_retention_days",
                    models.PositiveIntegerField(
                        validators=[
                            django.core.validators.MinValueValidator(1),
                            django.core.validators.MaxValueValidator(36500),
                        ]
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="RunArchive",
            fields=[
                (
                    "run",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="archive",
                        serialize=False,
                        to="telemetry.run",
                    ),
                ),
                ("ingest_seq", models.BigIntegerField()),
                ("step_rows", models.BigIntegerField()),
                ("sample_rows", models.BigIntegerField()),
                ("steps_bytes", models.BigIntegerField()),
                ("samples_bytes", models.BigIntegerField()),
                ("steps_path", models.CharField(max_length=1024)),
                ("samples_path", models.CharField(max_length=1024)),
                ("archived_at", models.DateTimeField()),
                ("pruned_at", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        # Runs stored before partitioning are week 0: their rows stay in the legacy partition.
        migrations.AddField(
            model_name="run",
            name="storage_week",
            field=models.IntegerField(default=0, editable=False),
        ),
        migrations.AlterField(
            model_name="run",
            name="storage_week",
            field=models.IntegerField(default=phantomhub.telemetry.partitions.week_now, editable=False),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["storage_week"], name="run_storage_week"),
        ),
    ]
