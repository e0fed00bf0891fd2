# The waste model's chart windows and explanations changed (model_version 2): queue every stored
# analysis for recomputation; the sweep redoes them from raw telemetry.

from django.db import migrations


def requeue(apps, schema_editor):
    apps.get_model("waste", "RunAnalysis").objects.update(analysed_seq=-1)


class Migration(migrations.Migration):
    dependencies = [("waste", "0004_runday_price_entries")]
    operations = [migrations.RunPython(requeue, migrations.RunPython.noop)]
