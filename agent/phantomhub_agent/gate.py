"""``phantomhub-agent gate``: fail a CI job when a run regresses beyond a budget in dollars.

    phantomhub-agent gate --server URL --token T --project P --run RUN_ID --max-usd-per-month 500 [--json]

It reads the run's comparison with its project baseline from the server (the run page's
``baseline``, GET /api/v1/portal/runs/{id}: the rolling median of the project's comparable
finished runs on the same GPU model, docs/waste-model.md "Baselines and regressions"), waits for
the run's analysis to be complete, prints a table (metric, baseline, this run, Δ, $/month) and
exits

- 0 when the step-time difference costs at most the budget a month (or the run got faster);
- 1 when it costs more: the run regressed beyond the budget;
- 2 on a usage or server error, a run still not analysed after ``--wait`` seconds, or a run with
  no baseline (``--allow-no-baseline`` makes that 0).

RUN_ID is the id the agent gave the run (``run.id``), or the server's; any other text is turned
into a run id as the agent turns PHANTOMHUB_RUN_ID into one (``--run ci-1234`` names the run a job
started with PHANTOMHUB_RUN_ID=ci-1234).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ._identity import normalize_run_id
from ._transport import NetworkError, Transport

PASS, FAIL, ERROR = 0, 1, 2
POLL_S = 5.0


class GateError(Exception):
    """A usage or server error: the message is printed, and the gate exits 2."""


@dataclass(frozen=True)
class Verdict:
    code: int
    text: str


def fetch_comparison(transport: Transport, run_id: str) -> dict[str, Any]:
    """The run page of the run: its project and its comparison with the baseline."""
    try:
        response = transport.request("GET", f"/api/v1/portal/runs/{run_id}")
    except NetworkError as exc:
        raise GateError(f"the server did not answer: {exc}") from exc
    if response.status == 404:
        raise GateError(f"run {run_id} not found (or not visible to this token)")
    if response.status in (401, 403):
        raise GateError(f"the token was refused ({response.status}: {response.error_text()})")
    if response.status != 200:
        raise GateError(f"the server answered {response.status}: {response.error_text()}")
    body = response.json()
    if not isinstance(body, dict) or not isinstance(body.get("run"), dict) or "baseline" not in body:
        raise GateError("the server's answer has no baseline comparison (a PhantomHub server older than the gate?)")
    return body


def wait_for_comparison(
    transport: Transport,
    run_id: str,
    *,
    wait_s: float,
    out: IO[str],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Polls until the run has ended and its analysis has seen everything it sent."""
    deadline = clock() + wait_s
    said = False
    while True:
        body = fetch_comparison(transport, run_id)
        baseline = body["baseline"] or {}
        ended = body["run"].get("status") != "running"
        if ended and baseline.get("complete") and baseline.get("status") != "pending":
            return body
        if clock() >= deadline:
            state = "still running" if not ended else "not fully analysed yet"
            raise GateError(f"run {run_id} is {state} after {wait_s:.0f} s (--wait)")
        if not said:
            out.write(f"waiting for the analysis of run {run_id} (up to {wait_s:.0f} s)…\n")
            said = True
        sleep(min(POLL_S, max(0.0, deadline - clock())))


def _ms(value: Any) -> str:
    return "–" if not isinstance(value, (int, float)) else f"{value:,.2f} ms"


def _share(value: Any) -> str:
    return "" if not isinstance(value, (int, float)) else f" ({value:.0%})"


def _pct(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    if value == 0 or abs(value) >= 0.001:
        return f"{value:.1%}"
    return "<0.1%" if value > 0 else ">-0.1%"  # never a bare 0.0% for a small non-zero


def _signed_usd(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "–"
    sign = "+" if value >= 0 else "-"
    return f"{sign}${abs(value):,.2f}"


def _delta(metric: dict[str, Any]) -> str:
    d, pct = metric.get("delta"), metric.get("delta_pct")
    if not isinstance(d, (int, float)):
        return "–"
    if metric.get("unit") == "ms":
        text = f"{d:+,.2f} ms"
    else:
        text = f"{d * 100:+.1f} pts" if d == 0 or abs(d) >= 0.001 else ("<+0.1 pts" if d > 0 else ">-0.1 pts")
    if not isinstance(pct, (int, float)):
        return text
    return text + (f" ({pct:+.0%})" if abs(pct) >= 0.01 or pct == 0 else f" ({pct:+.1%})")  # never a bare -0%


def table(metrics: Sequence[dict[str, Any]]) -> str:
    """metric | baseline | this run | Δ | $/month, aligned for a terminal or a CI log."""
    rows = [("metric", "baseline", "this run", "Δ", "$/month")]
    for m in metrics:
        if m.get("unit") == "ms":
            base = _ms(m.get("baseline")) + _share(m.get("baseline_share"))
            run = _ms(m.get("run")) + _share(m.get("run_share"))
        else:
            base, run = _pct(m.get("baseline")), _pct(m.get("run"))
        rows.append((str(m.get("label", m.get("metric"))), base, run, _delta(m), _signed_usd(m.get("delta_usd_per_month"))))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def judge(baseline: dict[str, Any], max_usd_per_month: float, allow_no_baseline: bool) -> Verdict:
    if baseline.get("status") != "compared":
        reason = baseline.get("reason") or "no baseline"
        code = PASS if allow_no_baseline else ERROR
        return Verdict(code, f"NO BASELINE: {reason}" + (" (--allow-no-baseline: passing)" if allow_no_baseline else ""))
    usd = baseline.get("delta_usd_per_month")
    summary = baseline.get("summary") or ""
    if not isinstance(usd, (int, float)):
        return Verdict(ERROR, f"UNPRICED: {summary or 'the project has no priced GPU-hours in the last 30 days'}")
    if usd > max_usd_per_month:
        return Verdict(FAIL, f"FAIL: {summary}, over the budget of ${max_usd_per_month:,.2f}/month")
    return Verdict(PASS, f"PASS: {summary}, within the budget of ${max_usd_per_month:,.2f}/month")


def report(body: dict[str, Any], verdict: Verdict) -> str:
    run, baseline = body["run"], body["baseline"]
    name = run.get("name") or run.get("id")
    parts = [f"run {name} ({run.get('id')}) · project {run.get('project')} · {baseline.get('gpu_key') or '?'}"]
    if baseline.get("status") == "compared":
        n = len(baseline.get("baseline_runs") or [])
        vol = baseline.get("volume") or {}
        price = vol.get("usd_per_gpu_hour_30d")
        parts.append(
            f"baseline: median of {n} comparable finished run{'' if n == 1 else 's'} (step within ±"
            f"{baseline.get('tolerance', 0.1):.0%} of FLOPs/tokens/samples per step)"
        )
        parts.append(
            f"priced at the project's last {vol.get('days', 30)} days: {vol.get('project_gpu_hours_30d', 0):,.2f} GPU-h"
            + (f" at ${price:,.2f}/GPU-h" if isinstance(price, (int, float)) else "")
        )
        parts.append("")
        parts.append(table(baseline.get("metrics") or []))
        parts.append("")
    parts.append(verdict.text)
    return "\n".join(parts) + "\n"


def run_gate(
    *,
    server: str,
    token: str,
    run_id: str,
    project: str | None,
    max_usd_per_month: float,
    as_json: bool,
    wait_s: float,
    allow_no_baseline: bool,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    run_id = normalize_run_id(run_id)  # "exp-42" names the run the agent derived from it
    transport = Transport(server, token, timeout_s=30.0)
    try:
        body = wait_for_comparison(transport, run_id, wait_s=wait_s, out=err, sleep=sleep)
        if project and body["run"].get("project") != project:
            raise GateError(f"run {run_id} belongs to project {body['run'].get('project')!r}, not {project!r}")
    except GateError as exc:
        err.write(f"gate: {exc}\n")
        return ERROR
    finally:
        transport.close()
    verdict = judge(body["baseline"], max_usd_per_month, allow_no_baseline)
    if as_json:
        doc = {
            "verdict": {PASS: "pass", FAIL: "fail", ERROR: "error"}[verdict.code],
            "exit_code": verdict.code,
            "message": verdict.text,
            "max_usd_per_month": max_usd_per_month,
            "delta_usd_per_month": body["baseline"].get("delta_usd_per_month"),
            "run": {k: body["run"].get(k) for k in ("id", "name", "project", "team", "status")},
            "baseline": body["baseline"],
        }
        out.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.write(report(body, verdict))
    return verdict.code


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``gate`` subcommand's arguments (cli.py)."""
    p: argparse.ArgumentParser = sub.add_parser("gate", help="fail when a run regresses beyond a budget in $/month")
    p.add_argument("--server", default=None, help="server URL (default: PHANTOMHUB_SERVER)")
    p.add_argument("--token", default=None, help="project or personal token (default: PHANTOMHUB_TOKEN)")
    p.add_argument("--project", default=None, help="the run's project slug, checked (default: PHANTOMHUB_PROJECT)")
    p.add_argument("--run", default=None, help="the run id (default: PHANTOMHUB_RUN_ID)")
    p.add_argument("--max-usd-per-month", type=float, required=True, help="the budget: fail above this many $/month")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of a table")
    p.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the run's analysis (default 600)")
    p.add_argument("--allow-no-baseline", action="store_true", help="pass (exit 0) when the run has no baseline")
    return p


def main_gate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    server = args.server or os.environ.get("PHANTOMHUB_SERVER")
    token = args.token or os.environ.get("PHANTOMHUB_TOKEN")
    run_id = args.run or os.environ.get("PHANTOMHUB_RUN_ID")
    project = args.project or os.environ.get("PHANTOMHUB_PROJECT")
    missing = [name for name, value in (("--server", server), ("--token", token), ("--run", run_id)) if not value]
    if missing:
        sys.stderr.write(f"gate: missing {', '.join(missing)} (or PHANTOMHUB_SERVER / _TOKEN / _RUN_ID)\n")
        return ERROR
    if args.max_usd_per_month < 0 or args.wait < 0:
        sys.stderr.write("gate: --max-usd-per-month and --wait must not be negative\n")
        return ERROR
    assert server and token and run_id
    try:
        return run_gate(
            server=server.rstrip("/"), token=token, run_id=run_id, project=project,
            max_usd_per_month=args.max_usd_per_month, as_json=args.json, wait_s=args.wait,
            allow_no_baseline=args.allow_no_baseline,
        )  # fmt: skip
    except ValueError as exc:  # not an http(s) URL
        sys.stderr.write(f"gate: {exc}\n")
        return ERROR
