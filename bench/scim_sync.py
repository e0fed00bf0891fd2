"""What a SCIM push of many members into a mapped group costs: one PATCH adding N people to a
group the group mapping gives a team, through the real URL conf and PostgreSQL, each person synced
(accounts/directory.py user_sync) in the request's transaction; and the same PATCH for a group no
rule matches (nobody's access can change, so nobody is synced).

    .venv/bin/python bench/scim_sync.py [--people 200,1000] [--database-url postgres://postgres@127.0.0.1:5432/ph_bench_scim]

Prints the request's wall time and the time per person, and writes bench/results/scim_sync.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import brokerless_django  # noqa: E402

USERS = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", default="200,1000", help="group sizes to push (default 200,1000)")
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/ph_bench_scim")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scim_sync.json"))
    args = parser.parse_args()
    brokerless_django(args.database_url)
    from django.test import Client

    from phantomhub.accounts.models import GroupMappingRule, Membership, Team
    from phantomhub.accounts.services import scim_token_create

    token = scim_token_create(name="bench").raw
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_HOST": "localhost"}

    def send(method: str, path: str, body: object) -> dict:
        response = getattr(client, method)("/scim/v2" + path, json.dumps(body), content_type="application/scim+json", **headers)
        assert response.status_code in (200, 201), response.content[:500]
        return response.json() if response.content else {}

    team = Team.objects.create(slug="bench", name="bench")
    GroupMappingRule.objects.create(pattern="mapped-*", grant="team_member", team=team)
    results = []
    for size in [int(n) for n in args.people.split(",") if n]:
        ids = [
            send("post", "/Users", {"schemas": [USERS], "userName": f"p{size}-{i}", "active": True})["id"] for i in range(size)
        ]
        for name, mapped in ((f"mapped-{size}", True), (f"unmapped-{size}", False)):
            group = send("post", "/Groups", {"schemas": [GROUP], "displayName": name})
            body = {"schemas": [PATCH], "Operations": [{"op": "add", "path": "members", "value": [{"value": i} for i in ids]}]}
            started = time.perf_counter()
            send("patch", f"/Groups/{group['id']}", body)
            wall = time.perf_counter() - started
            joined = Membership.objects.filter(team=team, user__username__startswith=f"p{size}-").count()
            assert joined == size or not mapped, joined  # a mapped push makes every member join
            row = {"people": size, "group": "mapped" if mapped else "unmapped", "wall_s": round(wall, 3),
                   "ms_per_person": round(wall * 1000 / size, 2), "memberships": joined}  # fmt: skip
            results.append(row)
            print(f"{size:6d} people into a {row['group']:8s} group: {wall:7.2f} s ({row['ms_per_person']:.2f} ms a person)")
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
