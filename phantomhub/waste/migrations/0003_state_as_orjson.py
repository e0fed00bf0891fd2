# The incremental state is a cache: dropping it only makes the next analysis of each run a full one.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("waste", "0002_day_waste_usd"),
    ]

    operations = [
        migrations.RemoveField(model_name="runanalysis", name="state"),
        migrations.AddField(model_name="runanalysis", name="state", field=models.BinaryField(null=True)),
    ]
