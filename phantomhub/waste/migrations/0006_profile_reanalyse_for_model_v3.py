# Recoverable dollars became evidence-based counterfactuals (model_version 3): each analysis keeps
# the run's step profile for its peers, and every stored analysis is queued for recomputation;
# the sweep redoes them from raw telemetry.

from django.db import migrations, models


def requeue(apps, schema_editor):
    apps.get_model("waste", "RunAnalysis").objects.update(analysed_seq=-1)


class Migration(migrations.Migration):
    dependencies = [("waste", "0005_reanalyse_for_model_v2")]
    operations = [
        migrations.AddField(model_name="runanalysis", name="profile", field=models.JSONField(blank=True, null=True)),
        migrations.RunPython(requeue, migrations.RunPython.noop),
    ]
