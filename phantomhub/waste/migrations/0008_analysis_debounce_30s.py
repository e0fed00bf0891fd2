from django.db import migrations, models


class Migration(migrations.Migration):
    # The default only: an installation that already has its settings row keeps its value.
    dependencies = [
        ("waste", "0007_analysis_failures"),
    ]

    operations = [
        migrations.AlterField(
            model_name="orgsettings",
            name="analysis_debounce_s",
            field=models.PositiveIntegerField(default=30),
        ),
    ]
