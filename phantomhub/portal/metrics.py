"""`GET /metrics`: Prometheus text exposition of the service's health, from the database.

Read from the database (not kept in process memory), so every gunicorn worker answers the same
and nothing resets when a worker restarts. All queries are over small tables (runs, ranks,
analyses, rollup markers); none touches raw steps.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Count, F, Min, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from phantomhub.fleet.models import Node
from phantomhub.fleet.selectors import collector_dropped
from phantomhub.telemetry.models import Run, RunRank, RunStatus
from phantomhub.waste.models import RollupPending, RunAnalysis

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _metric(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {value:.17g}" for labels, value in samples]
    return lines


# A counter past this is no count an agent could have made; one such stored value must not turn
# every scrape into a 500 (a 400-digit integer has no float to print).
_COUNTER_MAX = 2**53


def _counter(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _COUNTER_MAX:
        return 0
    return value


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _node_dropped() -> list[tuple[str, float]]:
    rows = Node.objects.exclude(counters={}).order_by("hostname").values_list("hostname", "counters")
    return [(f'{{node="{_label(host)}"}}', min(collector_dropped(c), _COUNTER_MAX)) for host, c in rows]


def metrics_text() -> str:
    by_status = dict(Run.objects.values_list("status").annotate(n=Count("id")))
    dirty = Run.objects.filter(Q(analysis__isnull=True) | Q(analysis__analysed_seq__lt=F("ingest_seq")))
    oldest_seen = dirty.aggregate(t=Min("last_seen_at"))["t"]
    lag_s = (timezone.now() - oldest_seen).total_seconds() if oldest_seen else 0.0
    ranks = RunRank.objects.aggregate(rows=Sum("step_rows"))
    dropped = 0
    for counters in RunRank.objects.exclude(counters={}).values_list("counters", flat=True):
        dropped += _counter(counters.get("dropped_steps") if isinstance(counters, dict) else None)
    money = RunAnalysis.objects.aggregate(cost=Sum("cost_usd"), recoverable=Sum("recoverable_usd"))
    lines: list[str] = []
    lines += _metric(
        "phantomhub_runs",
        "gauge",
        "Runs by status.",
        ((f'{{status="{status}"}}', by_status.get(status, 0)) for status in RunStatus.values),
    )
    lines += _metric("phantomhub_runs_dirty", "gauge", "Runs whose analysis is missing or older than their telemetry.",
                     [("", dirty.count())])  # fmt: skip
    lines += _metric("phantomhub_analysis_lag_seconds", "gauge",
                     "Since the last telemetry of the longest-waiting dirty run (0 when none).",
                     [("", lag_s)])  # fmt: skip
    failed = RunAnalysis.objects.filter(failed_seq=F("run__ingest_seq")).exclude(error="").count()
    lines += _metric("phantomhub_analysis_failed_runs", "gauge",
                     "Runs whose analysis of their current telemetry failed (see the run's analysis error).",
                     [("", failed)])  # fmt: skip
    lines += _metric("phantomhub_rollup_days_pending", "gauge", "Days whose daily rollups wait for the sweep.",
                     [("", RollupPending.objects.count())])  # fmt: skip
    lines += _metric("phantomhub_step_rows_total", "counter", "Step rows stored.", [("", ranks["rows"] or 0)])
    lines += _metric("phantomhub_agent_dropped_steps_total", "counter", "Steps agents reported dropping.", [("", dropped)])
    lines += _metric("phantomhub_node_collector_dropped_total", "counter",
                     "Requests a node collector reported dropping (its latest counters).", _node_dropped())  # fmt: skip
    lines += _metric("phantomhub_cost_usd", "gauge", "Cost of all analysed runs, USD.", [("", float(money["cost"] or 0))])
    lines += _metric("phantomhub_recoverable_usd", "gauge", "Recoverable spend of all analysed runs, USD.",
                     [("", float(money["recoverable"] or 0))])  # fmt: skip
    return "\n".join(lines) + "\n"


def _bearer(request: HttpRequest) -> str:
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    return credentials.strip() if scheme == "Bearer" else ""


def _refusal(message: str, status: int) -> HttpResponse:
    response = HttpResponse(message, status=status, content_type=CONTENT_TYPE)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


def metrics(request: HttpRequest) -> HttpResponse:
    """The exposition, behind the metrics token; open without one only when settings.METRICS_PUBLIC."""
    token: str | None = settings.METRICS_TOKEN
    if token:
        if not hmac.compare_digest(_bearer(request).encode(), token.encode()):
            return _refusal("metrics need 'Authorization: Bearer <PHANTOMHUB_METRICS_TOKEN>'\n", 401)
    elif not settings.METRICS_PUBLIC:
        # Org-wide spend is no public figure: closed until a token is set or it is opened on purpose.
        return _refusal("metrics are closed: set PHANTOMHUB_METRICS_TOKEN (then scrape with that bearer token) "
                        "or PHANTOMHUB_METRICS_PUBLIC=1\n", 403)  # fmt: skip
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE)
