"""`manage.py seeddemo`: a demo organization to look at on first start (idempotent).

Creates team `demo`, project `quickstart`, an ingest token (saved to var/demo-token, since a token
is shown only once), an admin sign-in, and a few generated runs stored through the same ingest
services the API uses.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils import timezone

from phantomhub.accounts.models import ApiToken, Membership, Profile, Role
from phantomhub.accounts.services import project_get_or_create, project_token_create, team_get_or_create, token_digest
from phantomhub.pricing.catalog import gpu_resolve, peak_flops
from phantomhub.telemetry.models import Run
from phantomhub.telemetry.services import events_ingest, run_create_or_resume, steps_ingest

DEMO_USER, DEMO_PASSWORD = "demo", "phantomhub-demo"
# (name, data stall per step in ms, compute per step in ms, gpu model)
DEMO_RUNS = [
    ("healthy-baseline", 2, 180, "H100-SXM"),
    ("starved-dataloader", 120, 180, "H100-SXM"),
    ("a100-finetune", 25, 240, "A100-80GB"),
]
_NS = 1_000_000


class Command(BaseCommand):
    help = "Seed the demo organization (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        team = team_get_or_create(slug="demo", name="Demo team")
        project = project_get_or_create(team=team, slug="quickstart", name="Quickstart")
        token_file = settings.VAR_DIR / "demo-token"
        saved = token_file.read_text().strip() if token_file.exists() else ""
        if not ApiToken.objects.filter(digest=token_digest(saved), revoked_at__isnull=True).exists():
            token_file.parent.mkdir(parents=True, exist_ok=True)
            token_file.write_text(project_token_create(project=project, name="demo").raw + "\n")
            token_file.chmod(0o600)
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USER).first()
        if user is None:
            user = user_model.objects.create_user(DEMO_USER, password=DEMO_PASSWORD, is_staff=True)
            Profile.objects.create(user=user, is_org_admin=True)
            Membership.objects.create(user=user, team=team, role=Role.ADMIN)
        for index, (name, stall_ms, compute_ms, gpu) in enumerate(DEMO_RUNS):
            run_id = uuid.uuid5(uuid.NAMESPACE_URL, f"phantomhub-demo/{name}")
            if Run.objects.filter(pk=run_id).exists():
                continue
            self._seed_run(project, run_id, name, stall_ms, compute_ms, gpu, seed=index)
        self.stdout.write(f"demo ready: sign in as {DEMO_USER} / {DEMO_PASSWORD}; ingest token in {token_file}")

    def _seed_run(self, project: Any, run_id: uuid.UUID, name: str, stall_ms: int, compute_ms: int, gpu: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        spec = gpu_resolve(gpu)
        peak = (peak_flops(spec, "bf16") if spec else None) or 0.0
        start = timezone.now() - timedelta(hours=2 + seed)
        run, _ = run_create_or_resume(
            project=project,
            run_id=run_id,
            data={"name": name, "gpu_model": gpu, "gpu_count": 8, "world_size": 8, "dtype": "bf16",
                  "allocation_start": start - timedelta(minutes=3), "started_at": start, "tags": ["demo"]},
        )  # fmt: skip
        n = 600
        data = (rng.gamma(4.0, stall_ms / 4.0, n) * _NS).astype(np.int64)
        fwd = (rng.normal(compute_ms * 0.33, 2, n).clip(1) * _NS).astype(np.int64)
        bwd = fwd * 2
        opt = np.full(n, 8 * _NS, dtype=np.int64)
        host = (rng.uniform(3, 9, n) * _NS).astype(np.int64)
        dur = data + fwd + bwd + opt + host
        t0 = int(start.timestamp() * 1e9)
        t_start = t0 + np.concatenate([[0], np.cumsum(dur)[:-1]])
        for rank in range(8):
            steps = {
                "step": list(range(n)),
                "t_start_ns": t_start.tolist(),
                "dur_ns": dur.tolist(),
                "data_ns": data.tolist(),
                "forward_ns": fwd.tolist(),
                "backward_ns": bwd.tolist(),
                "optimizer_ns": opt.tolist(),
                # FLOPs the model did: about 40% of the GPU's bf16 peak during forward + backward.
                "flops": (0.4 * peak * (fwd + bwd) / 1e9).tolist(),
                "tokens": [16384] * n,
                "samples": [8] * n,
            }
            steps_ingest(run=run, rank=rank, host=f"node-{rank // 8}", steps=steps)
        end_ns = int(t_start[-1] + dur[-1])
        events_ingest(run=run, events=[{"id": "finish", "kind": "finish", "t_ns": end_ns, "status": "finished"}])
