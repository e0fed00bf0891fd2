import { useState, type ReactNode } from "react";
import { Link, useSearchParams } from "react-router";

import { useApi } from "../api/hooks";
import type { CompareResult, CompareSide, KeyDiff } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Explain } from "../components/Explain";
import { gpuLabel } from "../components/RunTable";
import { Async, Empty } from "../components/States";
import { Card, PageHeader, StatusBadge } from "../components/ui";
import { CATEGORIES, CATEGORY_COLOR, CATEGORY_LABEL } from "../lib/categories";
import { formatBytes, formatMs, formatNumber, formatPct, formatUsd, isNum } from "../lib/format";
import { usePeriodLink } from "../lib/links";

export const COMPARE_MIN = 2;
export const COMPARE_MAX = 4;

/** The run ids of `?runs=a,b,c`, in order, without blanks or repeats. */
export function compareIds(params: URLSearchParams): string[] {
  const out: string[] = [];
  for (const part of (params.get("runs") ?? "").split(",")) {
    const id = part.trim();
    if (id && !out.includes(id)) out.push(id);
  }
  return out;
}

/** The compare page of these runs, keeping the reader's period (?period=, as links.ts carries it). */
export function comparePath(ids: string[], period: string | null = null): string {
  const runs = `/compare?runs=${ids.map(encodeURIComponent).join(",")}`;
  return period ? `${runs}&period=${encodeURIComponent(period)}` : runs;
}

const PART_LABEL: Record<string, string> = {
  data: "Data wait",
  forward: "Forward",
  backward: "Backward",
  optimizer: "Optimizer",
  comm: "Exposed communication",
  host: "Host overhead",
};
const PART_COLOR: Record<string, string> = {
  data: CATEGORY_COLOR.data_stall,
  forward: "#2f9e6e",
  backward: "#55b88a",
  optimizer: "#8fd1ae",
  comm: CATEGORY_COLOR.comm_exposed,
  host: CATEGORY_COLOR.host_overhead,
};

interface Row {
  key: string;
  label: ReactNode;
  cells: ReactNode[];
}

function figureColumns(sides: CompareSide[], first = "Figure"): Column<Row>[] {
  return [
    { key: "label", header: first, render: (r) => <span className="nowrap">{r.label}</span> },
    ...sides.map((s, i) => ({ key: `run-${i}`, header: s.run.name || s.run.id.slice(0, 8), align: "right" as const, render: (r: Row) => r.cells[i] })),
  ];
}

function FigureTable({ caption, sides, rows, testId, first }: { caption: string; sides: CompareSide[]; rows: Row[]; testId: string; first?: string }) {
  return <DataTable caption={caption} columns={figureColumns(sides, first)} rows={rows} rowKey={(r) => r.key} dense testId={testId} />;
}

const BAR_ROW = { display: "grid", gridTemplateColumns: "minmax(90px, 160px) minmax(0, 1fr) 80px", gap: 10, alignItems: "center", marginBottom: 8 } as const;

/** Each run's step as one bar, its parts in proportion: the decomposition at a glance. */
function StepBars({ sides, parts }: { sides: CompareSide[]; parts: string[] }) {
  const longest = Math.max(0, ...sides.map((s) => s.analysis?.composition?.step_ms ?? 0));
  return (
    <div data-testid="compare-bars" style={{ marginBottom: 14 }}>
      {sides.map((s) => {
        const c = s.analysis?.composition;
        return (
          <div key={s.run.id} style={BAR_ROW}>
            <span className="nowrap small">{s.run.name || s.run.id.slice(0, 8)}</span>
            <span>
              {c && longest > 0 ? (
                <span className="catbar" style={{ height: 16, width: `${(c.step_ms / longest) * 100}%` }} role="img" aria-label={`${s.run.name}: ${formatMs(c.step_ms)} per step`}>
                  {parts.map((p) => (
                    <span key={p} title={`${PART_LABEL[p] ?? p}: ${formatMs(c.parts_ms[p])}`} style={{ width: `${((c.parts_ms[p] ?? 0) / c.step_ms) * 100}%`, background: PART_COLOR[p] }} />
                  ))}
                </span>
              ) : (
                <span className="muted small">no step time</span>
              )}
            </span>
            <span className="small" style={{ textAlign: "right", fontVariantNumeric: "tabular-nums" }}>
              {c ? formatMs(c.step_ms) : "–"}
            </span>
          </div>
        );
      })}
      <div className="small muted" style={{ display: "flex", flexWrap: "wrap", gap: 14 }}>
        {parts.map((p) => (
          <span key={p}>
            <span className="cat-dot" style={{ background: PART_COLOR[p] }} aria-hidden="true" /> {PART_LABEL[p] ?? p}
          </span>
        ))}
      </div>
    </div>
  );
}

function cellOf(s: CompareSide, f: (a: NonNullable<CompareSide["analysis"]>) => ReactNode): ReactNode {
  if (!s.analysis) return <span className="muted">{s.analysis_status === "failed" ? "analysis failed" : "pending"}</span>;
  return f(s.analysis);
}

function stepRows(sides: CompareSide[], parts: string[]): Row[] {
  const ms = (v: number | null | undefined, share?: number | null) => `${formatMs(v)}${isNum(share) ? ` (${formatPct(share, 0)})` : ""}`;
  return [
    { key: "step", label: <strong>Step time</strong>, cells: sides.map((s) => cellOf(s, (a) => <strong>{ms(a.composition?.step_ms)}</strong>)) },
    ...parts.map((p) => ({ key: p, label: PART_LABEL[p] ?? p, cells: sides.map((s) => cellOf(s, (a) => ms(a.composition?.parts_ms[p], a.composition?.shares[p]))) })),
  ];
}

function moneyRows(sides: CompareSide[]): Row[] {
  return [
    ...CATEGORIES.map((c) => ({
      key: c,
      label: (
        <span>
          <span className="cat-dot" style={{ background: CATEGORY_COLOR[c] }} aria-hidden="true" /> {CATEGORY_LABEL[c]}
        </span>
      ),
      cells: sides.map((s) => cellOf(s, (a) => (a.categories[c] ? `${formatUsd(a.categories[c]!.usd)} (${formatPct(a.categories[c]!.share, 0)})` : "–"))),
    })),
    { key: "cost", label: <strong>Cost</strong>, cells: sides.map((s) => cellOf(s, (a) => <strong>{formatUsd(a.cost_usd)}</strong>)) },
    { key: "waste", label: "Waste", cells: sides.map((s) => cellOf(s, (a) => formatUsd(a.waste_usd))) },
    { key: "recoverable", label: "Recoverable", cells: sides.map((s) => cellOf(s, (a) => formatUsd(a.recoverable_usd))) },
    ...(sides.some((s) => s.analysis?.lost_usd !== undefined)
      ? [{ key: "lost", label: "Lost to failures", cells: sides.map((s) => cellOf(s, (a) => formatUsd(a.lost_usd))) }]
      : []),
    { key: "gpu_hours", label: "GPU-hours", cells: sides.map((s) => cellOf(s, (a) => formatNumber(a.gpu_hours, 2))) },
  ];
}

function efficiencyRows(sides: CompareSide[]): Row[] {
  const pct = (v: number | null | undefined) => formatPct(v, isNum(v) && v !== 0 && Math.abs(v) < 0.01 ? 3 : 1);
  return [
    { key: "mfu", label: "MFU (billed time)", cells: sides.map((s) => cellOf(s, (a) => pct(a.mfu))) },
    { key: "mfu_step", label: "MFU over step time", cells: sides.map((s) => cellOf(s, (a) => pct(a.mfu_step_time))) },
    { key: "target", label: "Target MFU", cells: sides.map((s) => cellOf(s, (a) => formatPct(a.target_mfu, 0))) },
    { key: "peak", label: "Peak memory", cells: sides.map((s) => cellOf(s, (a) => formatBytes(a.memory?.peak_bytes_max))) },
    { key: "frag", label: "Fragmentation", cells: sides.map((s) => cellOf(s, (a) => formatPct(a.memory?.fragmentation_mean))) },
    { key: "retries", label: "Allocator retries", cells: sides.map((s) => cellOf(s, (a) => formatNumber(a.memory?.alloc_retries_total))) },
    { key: "oom", label: "Out-of-memory errors", cells: sides.map((s) => cellOf(s, (a) => formatNumber(a.memory?.oom_count))) },
    {
      key: "stragglers",
      label: "Stragglers",
      cells: sides.map((s) =>
        cellOf(s, (a) =>
          a.stragglers.length ? `${a.stragglers.map((x) => `rank ${x.rank}`).join(", ")} · ${formatUsd(a.straggler_wait_usd)} waited` : "none",
        ),
      ),
    },
  ];
}

function shown(v: { present: boolean; value: unknown }): ReactNode {
  if (!v.present) return <span className="muted">not set</span>;
  return <code className="mono">{typeof v.value === "string" ? v.value : JSON.stringify(v.value)}</code>;
}

function DiffTable({ title, diff, sides, testId }: { title: string; diff: KeyDiff; sides: CompareSide[]; testId: string }) {
  const rows: Row[] = diff.differences.map((d) => ({ key: d.key, label: <code className="mono">{d.key}</code>, cells: d.values.map(shown) }));
  return (
    <Card title={title} id={testId} actions={<span className="muted small">{diff.differences.length} key{diff.differences.length === 1 ? "" : "s"} differ · {diff.same} the same in all</span>}>
      {rows.length ? <FigureTable caption={title} sides={sides} rows={rows} testId={testId} first="Key" /> : <Empty title="No differences">Every key has the same value in these runs.</Empty>}
    </Card>
  );
}

function CompareView({ data }: { data: CompareResult }) {
  const { link } = usePeriodLink();
  const sides = data.runs;
  const [copied, setCopied] = useState(false);
  const copy = () => {
    void navigator.clipboard?.writeText(window.location.href).then(() => setCopied(true));
  };
  const heads: Row[] = [
    { key: "project", label: "Team / project", cells: sides.map((s) => `${s.run.team_name ?? s.run.team} / ${s.run.project_name ?? s.run.project}`) },
    { key: "gpu", label: "GPUs", cells: sides.map((s) => gpuLabel(s.run)) },
    { key: "status", label: "Status", cells: sides.map((s) => <StatusBadge status={s.run.status} />) },
    { key: "ranks", label: "Ranks", cells: sides.map((s) => formatNumber(s.run.world_size)) },
  ];
  return (
    <>
      <PageHeader
        title="Compare runs"
        subtitle={
          <span className="meta-line" data-testid="compare-runs">
            {sides.map((s) => (
              <Link key={s.run.id} to={link(`/runs/${encodeURIComponent(s.run.id)}`)}>
                {s.run.name || s.run.id.slice(0, 8)}
              </Link>
            ))}
          </span>
        }
        actions={
          <button type="button" className="btn" onClick={copy} title="This page's address: anyone who may see these runs sees the same comparison">
            {copied ? "Link copied" : "Copy link"}
          </button>
        }
      />
      <Card title="Runs" id="compare-head">
        <FigureTable caption="Runs compared" sides={sides} rows={heads} testId="compare-head" />
      </Card>
      <Card
        title={
          <>
            Step-time decomposition{" "}
            <Explain
              label="step-time decomposition"
              source={{ formula: "mean per step = Σ windows (mean per step × steps in window) / Σ steps; share = part / step time", inputs: { source: "each run's stored analysis (windowed series)" } }}
            />
          </>
        }
        id="compare-steps"
        actions={<span className="muted small">mean per step · share of the step in brackets</span>}
      >
        <StepBars sides={sides} parts={data.parts} />
        <FigureTable caption="Step-time decomposition" sides={sides} rows={stepRows(sides, data.parts)} testId="compare-steps" />
      </Card>
      <Card title="Dollars by category" id="compare-money" actions={<span className="muted small">share of the run's cost in brackets</span>}>
        <FigureTable caption="Dollars by category" sides={sides} rows={moneyRows(sides)} testId="compare-money" />
      </Card>
      <Card title="MFU, memory and stragglers" id="compare-efficiency">
        <FigureTable caption="MFU, memory and stragglers" sides={sides} rows={efficiencyRows(sides)} testId="compare-efficiency" />
      </Card>
      <DiffTable title="Configuration differences" diff={data.config} sides={sides} testId="compare-config" />
      <DiffTable title="Environment differences" diff={data.environment} sides={sides} testId="compare-environment" />
    </>
  );
}

export function ComparePage() {
  const [params] = useSearchParams();
  const { link } = usePeriodLink();
  const ids = compareIds(params);
  const ok = ids.length >= COMPARE_MIN && ids.length <= COMPARE_MAX;
  const state = useApi<CompareResult>(ok ? `compare?runs=${ids.map(encodeURIComponent).join(",")}` : null);
  if (!ok) {
    return (
      <div className="page">
        <PageHeader title="Compare runs" />
        <Card>
          <Empty title={`Pick ${COMPARE_MIN} to ${COMPARE_MAX} runs to compare`}>
            {ids.length > COMPARE_MAX ? `This link names ${ids.length} runs. ` : ""}
            Tick them in the <Link to={link("/runs")}>runs table</Link> and choose Compare.
          </Empty>
        </Card>
      </div>
    );
  }
  return (
    <div className="page">
      <Async state={state} loadingRows={8}>
        {(d) => <CompareView data={d} />}
      </Async>
    </div>
  );
}
