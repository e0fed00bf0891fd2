"""`manage.py seeddemo`: the demo organization, so every page shows computed figures at once.

Idempotent: a second run only fills in what is missing. It creates six teams and eighteen
projects, a few hundred generated runs over the last 90 days posted through the real HTTP ingest
API (a local server is started for the purpose), short real CPU PyTorch training runs through the
agent when torch and the agent are installed, then analyses everything and prints the sign-in.

The local server holds at most four database connections and closes them when it stops, so a
seeding on a shared PostgreSQL leaves none behind; a 429 or 5xx answer is retried as the API says
(phantomhub/demo/post.py), not the end of the seeding.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from phantomhub.accounts.models import ApiToken, Membership, Profile, Role
from phantomhub.accounts.services import project_get_or_create, project_token_create, team_get_or_create, token_digest
from phantomhub.demo.fleet import ORG, fleet_runs, job_runs
from phantomhub.demo.post import local_server, post_all
from phantomhub.telemetry.models import Run
from phantomhub.waste.sweeps import analysis_sweep

DEMO_USER, DEMO_PASSWORD = "demo", "phantomhub-demo"
PEOPLE = [  # username, organization flags, team memberships
    ("finance", {"is_finance": True}, []),
    ("nlp-lead", {}, [("nlp", Role.ADMIN)]),
    ("vision-dev", {}, [("vision", Role.MEMBER)]),
]


class Command(BaseCommand):
    help = "Seed the demo organization (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=300, help="generated fleet runs (default 300)")
        parser.add_argument("--skip-training", action="store_true", help="skip the real CPU training runs")

    def handle(self, *args: Any, **options: Any) -> None:
        say = self.stdout.write
        quickstart = project_get_or_create(team=team_get_or_create(slug="demo", name="Demo team"), slug="quickstart")
        token_file = settings.VAR_DIR / "demo-token"
        saved = token_file.read_text().strip() if token_file.exists() else ""
        if not ApiToken.objects.filter(digest=token_digest(saved), revoked_at__isnull=True).exists():
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(project_token_create(project=quickstart, name="demo").raw + "\n")
            token_file.chmod(0o600)
        self._people()
        generated = [*fleet_runs(runs=options["runs"]), *job_runs()]  # a job's attempts in the order they ran
        fleet = [run for run in generated if not Run.objects.filter(pk=run.body["id"]).exists()]
        if fleet:
            say(f"demo: posting {len(fleet)} generated runs through the ingest API…")
            tokens = self._tokens()
            with local_server() as address:
                rows = post_all(fleet, lambda run: tokens[run.project], address, say)
            say(f"demo: {rows:,} step rows stored")
        if not options["skip_training"]:
            from phantomhub.demo.training import training_runs_seed

            training_runs_seed(quickstart, say)
        from phantomhub.demo.nodes import nodes_seed  # GPU nodes, their collectors' view (the Fleet page)

        with local_server() as address:
            nodes_seed(address, say)
        say("demo: analysing…")
        analysed = 0
        while True:
            result = analysis_sweep(inline=True)
            analysed += result.analysed
            if not result.analysed:
                break
            say(f"  analysed {analysed} runs…")
        from phantomhub.demo.budgets import budgets_seed  # sized from the analysed spend

        budgets_seed(say)
        say(f"demo ready: sign in as {DEMO_USER} / {DEMO_PASSWORD} (also finance, nlp-lead, vision-dev with the same password)")
        say(f"demo ingest token for demo/quickstart: {token_file}")

    def _people(self) -> None:
        users = get_user_model()
        teams = {team: team_get_or_create(slug=team, name=team.capitalize()) for team, _ in ORG}
        if not users.objects.filter(username=DEMO_USER).exists():
            demo = users.objects.create_user(DEMO_USER, password=DEMO_PASSWORD, is_staff=True, is_superuser=True)
            Profile.objects.create(user=demo, is_org_admin=True)
        for name, flags, memberships in PEOPLE:
            if users.objects.filter(username=name).exists():
                continue
            user = users.objects.create_user(name, password=DEMO_PASSWORD)
            Profile.objects.create(user=user, **flags)
            for team, role in memberships:
                Membership.objects.create(user=user, team=teams[team], role=role)

    def _tokens(self) -> dict[str, str]:
        """A fresh ingest token per fleet project (only its digest is stored, as always)."""
        tokens = {}
        for team_slug, projects in ORG:
            team = team_get_or_create(slug=team_slug, name=team_slug.capitalize())
            for project_slug, *_ in projects:
                project = project_get_or_create(team=team, slug=project_slug, name=project_slug.replace("-", " ").title())
                tokens[project_slug] = project_token_create(project=project, name="demo fleet").raw
        return tokens
