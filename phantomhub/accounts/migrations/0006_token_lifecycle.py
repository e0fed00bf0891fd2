"""Token lifecycle (docs/identity.md, "Tokens"): owner, expiry, the address of the last use,
rotation with an overlap; tokens made without a name are called "unnamed"."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def name_the_unnamed(apps, schema_editor):
    apps.get_model("accounts", "ApiToken").objects.filter(name="").update(name="unnamed")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_directory"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="api_tokens_created",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="last_used_address",
            field=models.GenericIPAddressField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="overlap_ends_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="replaced_by",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="replaces",
                to="accounts.apitoken",
            ),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="name",
            field=models.CharField(default="unnamed", max_length=200),
        ),
        migrations.RunPython(name_the_unnamed, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="apitoken",
            constraint=models.CheckConstraint(
                condition=models.Q(("replaced_by__isnull", True), ("overlap_ends_at__isnull", False), _connector="OR"),
                name="apitoken_rotation_has_an_end",
            ),
        ),
    ]
