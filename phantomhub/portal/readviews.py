"""The views pages read (portal.models RunDayRead, ProjectDayRead): a closed month's days from its
frozen copy, every other day from the live rollups. Plain SQL that PostgreSQL and SQLite both run.

PostgreSQL refuses to change the type of a column a view reads, so the views step aside while
migrations run: dropped before `migrate`, created again after it (portal/apps.py). A migration
that alters waste_runday or waste_projectday therefore never meets them; one that renames or
drops a column they read must change them here too."""

from __future__ import annotations

from typing import Any

from django.db import connection

RUN_COLUMNS = (
    "run_id, day, project_id, team_id, gpu_key, gpu_seconds, cost_usd, categories_usd, waste_usd, "
    "recoverable_usd, lost_usd, price_entry_ids, mfu_gpu_seconds, mfu_known_gpu_seconds"
)
PROJECT_COLUMNS = (
    "day, project_id, team_id, runs, gpu_seconds, cost_usd, categories_usd, waste_usd, recoverable_usd, lost_usd, "
    "mfu_gpu_seconds, mfu_known_gpu_seconds"
)
_OPEN = "NOT EXISTS (SELECT 1 FROM portal_closedmonth c WHERE l.day >= c.month AND l.day <= c.last_day)"


def _create(run_columns: str, project_columns: str) -> list[str]:
    return [
        f"CREATE VIEW portal_rundayread AS SELECT l.id AS id, {run_columns} FROM waste_runday l WHERE {_OPEN} "
        f"UNION ALL SELECT -f.id AS id, {run_columns} FROM portal_closedrunday f",
        f"CREATE VIEW portal_projectdayread AS SELECT l.id AS id, {project_columns} FROM waste_projectday l WHERE {_OPEN} "
        f"UNION ALL SELECT -f.id AS id, {project_columns} FROM portal_closedprojectday f",
    ]


CREATE = _create(RUN_COLUMNS, PROJECT_COLUMNS)
DROP = ["DROP VIEW IF EXISTS portal_rundayread", "DROP VIEW IF EXISTS portal_projectdayread"]
_NEEDS = {"waste_runday", "waste_projectday", "portal_closedmonth", "portal_closedrunday", "portal_closedprojectday"}
_READS = {"run": ("waste_runday", "portal_closedrunday"), "project": ("waste_projectday", "portal_closedprojectday")}


def views_drop(using: str = "default", **kwargs: Any) -> None:
    from django.db import connections

    with connections[using].cursor() as cursor:
        for sql in DROP:
            cursor.execute(sql)


def views_create(using: str = "default", **kwargs: Any) -> None:
    """Create the views again once their tables exist (after a migrate that reached them). A
    migrate that stopped short of a column they read (`migrate portal 0003`: before lost_usd)
    gets views of the columns its tables have, as its migrations made them."""
    from django.db import connections

    conn = connections[using] if using else connection
    if not set(conn.introspection.table_names()) >= _NEEDS:
        return
    with conn.cursor() as cursor:
        chosen = {}
        for kind, columns in (("run", RUN_COLUMNS), ("project", PROJECT_COLUMNS)):
            present = [{c.name for c in conn.introspection.get_table_description(cursor, t)} for t in _READS[kind]]
            chosen[kind] = ", ".join(c for c in columns.split(", ") if all(c in names for names in present))
        for sql in DROP + _create(chosen["run"], chosen["project"]):
            cursor.execute(sql)
