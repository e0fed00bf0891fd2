# The job's lost work (waste.models RunDay.lost_usd, ProjectDay.lost_usd; waste migration 0011)
# in closed months' frozen copies and in the views pages read. A month closed before this
# migration keeps its frozen days as they were copied: lost_usd 0 (docs/portal-api.md, Finance).

from decimal import Decimal

from django.db import migrations, models

# The views as migration 0002 made them, and as they are from here (phantomhub/portal/readviews.py
# recreates them after every migrate; these copies are the migration's own, frozen with it).
_OPEN = "NOT EXISTS (SELECT 1 FROM portal_closedmonth c WHERE l.day >= c.month AND l.day <= c.last_day)"


def _views(run_columns: str, project_columns: str) -> list[str]:
    return [
        f"CREATE VIEW portal_rundayread AS SELECT l.id AS id, {run_columns} FROM waste_runday l WHERE {_OPEN} "
        f"UNION ALL SELECT -f.id AS id, {run_columns} FROM portal_closedrunday f",
        f"CREATE VIEW portal_projectdayread AS SELECT l.id AS id, {project_columns} FROM waste_projectday l WHERE {_OPEN} "
        f"UNION ALL SELECT -f.id AS id, {project_columns} FROM portal_closedprojectday f",
    ]


VIEWS_BEFORE = _views(
    "run_id, day, project_id, team_id, gpu_key, gpu_seconds, cost_usd, categories_usd, waste_usd, "
    "recoverable_usd, price_entry_ids, mfu_gpu_seconds, mfu_known_gpu_seconds",
    "day, project_id, team_id, runs, gpu_seconds, cost_usd, categories_usd, waste_usd, recoverable_usd, "
    "mfu_gpu_seconds, mfu_known_gpu_seconds",
)
VIEWS = _views(
    "run_id, day, project_id, team_id, gpu_key, gpu_seconds, cost_usd, categories_usd, waste_usd, "
    "recoverable_usd, lost_usd, price_entry_ids, mfu_gpu_seconds, mfu_known_gpu_seconds",
    "day, project_id, team_id, runs, gpu_seconds, cost_usd, categories_usd, waste_usd, recoverable_usd, lost_usd, "
    "mfu_gpu_seconds, mfu_known_gpu_seconds",
)
DROP = ["DROP VIEW IF EXISTS portal_rundayread", "DROP VIEW IF EXISTS portal_projectdayread"]


def _money() -> models.DecimalField:
    return models.DecimalField(decimal_places=2, default=Decimal("0"), max_digits=16)


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0003_policy_changes"),
        ("waste", "0011_lost_work_model_v4"),
    ]

    operations = [
        # The views first: SQLite adds a column by rebuilding the table, which a view reading it
        # refuses (on an existing database they have already stepped aside: readviews.py).
        migrations.RunSQL(DROP, VIEWS_BEFORE),
        migrations.AddField(model_name="closedrunday", name="lost_usd", field=_money()),
        migrations.AddField(model_name="closedprojectday", name="lost_usd", field=_money()),
        migrations.AddField(model_name="rundayread", name="lost_usd", field=_money()),
        migrations.AddField(model_name="projectdayread", name="lost_usd", field=_money()),
        migrations.RunSQL(VIEWS, DROP),
    ]
