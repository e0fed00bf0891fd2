import { Link } from "react-router";

import type { BaselineComparison, BaselineMetric } from "../../api/types";
import { DataTable, type Column } from "../../components/DataTable";
import { Explain } from "../../components/Explain";
import { Empty } from "../../components/States";
import { Card } from "../../components/ui";
import { formatDateTime, formatGpuHours, formatMs, formatPct, formatPctPoints, formatUsd, formatUsdChange, formatUsdPerGpuHour, isNum } from "../../lib/format";
import { usePeriodLink } from "../../lib/links";

/** "+12.3%" for a relative change; "–" where there is none. */
function relChange(v: number | null): string {
  if (!isNum(v)) return "–";
  return `${v > 0 ? "+" : v < 0 ? "−" : ""}${Math.abs(v * 100).toFixed(Math.abs(v) >= 0.1 ? 0 : 1)}%`;
}

function value(m: BaselineMetric, v: number | null, share: number | null): string {
  if (m.unit === "ms") return `${formatMs(v)}${isNum(share) ? ` (${formatPct(share, 0)})` : ""}`;
  return formatPct(v, isNum(v) && Math.abs(v) < 0.01 && v !== 0 ? 3 : 1);
}

function delta(m: BaselineMetric): string {
  if (!isNum(m.delta)) return "–";
  const abs = m.unit === "ms" ? `${m.delta > 0 ? "+" : m.delta < 0 ? "−" : ""}${formatMs(Math.abs(m.delta))}` : formatPctPoints(m.delta, Math.abs(m.delta) < 0.001 ? 3 : 1);
  return isNum(m.delta_pct) ? `${abs} (${relChange(m.delta_pct)})` : abs;
}

/**
 * The run against its project baseline: the rolling median of the project's comparable finished
 * runs on the same GPU model (waste/baseline.py). Where there is none, the reason, never zeros.
 */
export function BaselineCard({ baseline }: { baseline: BaselineComparison | null | undefined }) {
  const { link } = usePeriodLink();
  if (!baseline) return null;
  if (baseline.status !== "compared") {
    return (
      <Card title="Against the project baseline" id="baseline">
        <div data-testid="baseline-none">
          <Empty title={baseline.status === "pending" ? "No baseline yet" : "No baseline for this run"}>{baseline.reason}</Empty>
        </div>
      </Card>
    );
  }
  const vol = baseline.volume;
  const step = baseline.metrics.find((m) => m.metric === "step_ms");
  const columns: Column<BaselineMetric>[] = [
    {
      key: "metric",
      header: "Figure",
      render: (m) => <span className="nowrap">{m.label}</span>,
    },
    { key: "baseline", header: "Baseline", align: "right", render: (m) => value(m, m.baseline, m.baseline_share) },
    { key: "run", header: "This run", align: "right", render: (m) => <strong>{value(m, m.run, m.run_share)}</strong> },
    { key: "delta", header: "Δ", align: "right", render: (m) => <span className={isNum(m.delta) && m.unit === "ms" ? (m.delta > 0 ? "change-bad" : m.delta < 0 ? "change-good" : "") : ""}>{delta(m)}</span> },
    {
      key: "usd",
      header: "$/month",
      align: "right",
      render: (m) =>
        isNum(m.delta_usd_per_month) ? (
          <span className="nowrap">
            {formatUsdChange(m.delta_usd_per_month)}
            <Explain label={`${m.label}: difference in dollars a month`} entry={m.explain} />
          </span>
        ) : (
          <span className="nowrap muted" title="priced through the step time">
            –<Explain label={`${m.label}: difference`} entry={m.explain} />
          </span>
        ),
    },
  ];
  return (
    <Card
      title="Against the project baseline"
      id="baseline"
      actions={
        <span className="muted small">
          median of {baseline.baseline_runs.length} comparable finished run{baseline.baseline_runs.length === 1 ? "" : "s"} on {baseline.gpu_key} · step within ±{formatPct(baseline.tolerance, 0)} of FLOPs, tokens and samples
        </span>
      }
    >
      {baseline.summary && (
        <p className={`baseline-summary ${isNum(step?.delta_usd_per_month) && step!.delta_usd_per_month! > 0 ? "change-bad" : "change-good"}`} data-testid="baseline-summary">
          <strong>{baseline.summary}</strong>
          {step && <Explain label="step time difference in dollars a month" entry={step.explain} />}
        </p>
      )}
      <DataTable caption="This run against the project baseline" columns={columns} rows={baseline.metrics} rowKey={(m) => m.metric} dense testId="baseline-table" />
      {vol && (
        <p className="muted small">
          Priced at the project's last {vol.days} days: {formatGpuHours(vol.project_gpu_hours_30d)} costing {formatUsd(vol.project_usd_30d)}
          {isNum(vol.usd_per_gpu_hour_30d) ? ` (${formatUsdPerGpuHour(vol.usd_per_gpu_hour_30d)})` : ""}. Each part's dollars are its own excess over the baseline step, so they need not add up to
          the step's. Baseline runs:{" "}
          {baseline.baseline_runs.map((r, i) => (
            <span key={r.id}>
              {i > 0 && ", "}
              <Link to={link(`/runs/${encodeURIComponent(r.id)}`)} title={formatDateTime(r.started_at)}>
                {r.name || r.id.slice(0, 8)}
              </Link>
            </span>
          ))}
          .
        </p>
      )}
    </Card>
  );
}
