import { useSearchParams } from "react-router";

import { apiUrl } from "../api/client";
import { useApi } from "../api/hooks";
import { DataTable, type Column } from "../components/DataTable";
import { ParamNotice, PeriodPicker } from "../components/PeriodPicker";
import { Async, Empty } from "../components/States";
import { Card, PageHeader, ShareBar, Stat } from "../components/ui";
import { formatDate, formatDateTime, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { DEFAULT_PERIOD, parsePeriodParam, periodLabel } from "../lib/urlState";

/** The four classes every GPU-minute of a node falls in (phantomhub/fleet/classify.py). */
export const FLEET_CLASSES = ["instrumented", "busy_uninstrumented", "idle_held", "empty"] as const;
export type FleetClass = (typeof FLEET_CLASSES)[number];
export const FLEET_CLASS_LABEL: Record<FleetClass | "unknown", string> = {
  instrumented: "Instrumented",
  busy_uninstrumented: "Busy, uninstrumented",
  idle_held: "Idle-held",
  empty: "Empty",
  unknown: "Not reporting",
};
const CLASS_HELP: Record<FleetClass, string> = {
  instrumented: "a PhantomHub run holds the GPU: its own analysis prices this time",
  busy_uninstrumented: "a process computes on the GPU, but no agent measures it",
  idle_held: "a process holds the GPU's memory and does not compute",
  empty: "no process on the GPU: billed, unused",
};

export interface FleetClassFigures {
  gpu_hours: number;
  usd: number;
}

export interface FleetNodeRow {
  node: string;
  gpu_model: string;
  gpu_count: number;
  provider: string;
  region: string;
  billed_gpu_hours: number;
  coverage: number | null;
  cost_usd: number;
  instrumented_usd: number;
  busy_uninstrumented_usd: number;
  idle_held_usd: number;
  empty_usd: number;
  unknown_gpu_hours: number;
  last_seen_at: string | null;
  // The node collector's latest sender counters (null: it never reported any).
  counters: Record<string, number>;
  counters_at: string | null;
  collector_sent: number | null;
  collector_spooled: number | null;
  collector_dropped: number | null;
}

export interface FleetHolderRow {
  holder: string;
  kind: string | null;
  team: string | null;
  project: string | null;
  gpu_hours: number;
  busy_uninstrumented_usd: number;
  idle_held_usd: number;
  cost_usd: number;
  /** A sum of holders this person does not see by name: "other teams" or "unattributed". */
  aggregated?: boolean;
}

export interface IdleHeldRow {
  node: string;
  gpu_index: number;
  holder: string;
  team: string | null;
  project: string | null;
  since: string;
  held_minutes: number;
  usd_per_hour: number;
}

export interface FleetSummary {
  period: { start: string; end: string; label?: string };
  billed_gpu_hours: number;
  instrumented_gpu_hours: number;
  coverage: number | null;
  cost_usd: number;
  classes: Record<FleetClass | "unknown", FleetClassFigures>;
  nodes: FleetNodeRow[];
  holders: FleetHolderRow[];
  teams: { team: string | null; team_name: string; instrumented_usd: number; busy_uninstrumented_usd: number; idle_held_usd: number; empty_usd: number; aggregated?: boolean }[];
  /** False for people who see only their teams' holders by name (the rest are summed). */
  sees_all_teams?: boolean;
  idle_held_now: IdleHeldRow[];
  node_count: number;
  /** When a node last reported (any node); "now" is what their latest reports say. */
  last_report_at?: string | null;
}

export const FLEET_API = "/api/v1/fleet/";

/** "2 h 05 min" for a hold that started `minutes` ago. */
export function heldFor(minutes: number): string {
  if (minutes < 1) return "under a minute";
  const whole = Math.floor(minutes);
  const h = Math.floor(whole / 60);
  const m = whole % 60;
  if (h === 0) return `${m} min`;
  if (h < 48) return `${h} h ${String(m).padStart(2, "0")} min`;
  return `${Math.floor(h / 24)} days ${h % 24} h`;
}

function who(team: string | null, project: string | null): string {
  if (!team && !project) return "unattributed";
  return [team, project].filter(Boolean).join(" / ");
}

const IDLE_COLUMNS: Column<IdleHeldRow>[] = [
  { key: "node", header: "Node", render: (r) => <span className="nowrap">{r.node} · GPU {r.gpu_index}</span> },
  { key: "holder", header: "Holder", render: (r) => r.holder },
  { key: "team", header: "Team / project", render: (r) => (r.holder === OTHER_TEAMS ? OTHER_TEAMS : who(r.team, r.project)) },
  { key: "since", header: "Held for", render: (r) => <span title={`since ${formatDateTime(r.since)}`}>{heldFor(r.held_minutes)}</span> },
  { key: "usd_per_hour", header: "Burning", align: "right", render: (r) => `${formatUsd(r.usd_per_hour)}/h` },
  { key: "so_far", header: "So far", align: "right", render: (r) => formatUsd((r.usd_per_hour * r.held_minutes) / 60) },
];

function CollectorCell({ row }: { row: FleetNodeRow }) {
  if (row.counters_at === null) return <span className="muted" title="this node's collector reports no counters">—</span>;
  const dropped = row.collector_dropped ?? 0;
  return (
    <span className="nowrap" data-testid={`collector-${row.node}`} title={`counters of ${formatDateTime(row.counters_at)}`}>
      {dropped > 0 ? <span className="badge badge-bad badge-inline">dropped {formatNumber(dropped)}</span> : <span className="muted">none dropped</span>}
      {(row.collector_spooled ?? 0) > 0 && <span className="cell-sub">spooled {formatNumber(row.collector_spooled ?? 0)}</span>}
    </span>
  );
}

const NODE_COLUMNS: Column<FleetNodeRow>[] = [
  { key: "node", header: "Node", render: (r) => <div className="cell-main"><span>{r.node}</span><span className="cell-sub">{r.gpu_count} × {r.gpu_model || "GPU"} · {[r.provider, r.region].filter(Boolean).join(" ")}</span></div> },
  { key: "cost_usd", header: "Cost", align: "right", render: (r) => <strong>{formatUsd(r.cost_usd)}</strong> },
  { key: "coverage", header: "Coverage", render: (r) => <ShareBar value={r.coverage} /> },
  { key: "busy_uninstrumented_usd", header: "Busy, uninstrumented", align: "right", render: (r) => formatUsd(r.busy_uninstrumented_usd) },
  { key: "idle_held_usd", header: "Idle-held", align: "right", render: (r) => formatUsd(r.idle_held_usd) },
  { key: "empty_usd", header: "Empty", align: "right", render: (r) => formatUsd(r.empty_usd) },
  { key: "instrumented_usd", header: "Instrumented", align: "right", render: (r) => formatUsd(r.instrumented_usd) },
  { key: "billed_gpu_hours", header: "GPU-hours", align: "right", priority: "low", render: (r) => formatGpuHours(r.billed_gpu_hours) },
  { key: "collector_dropped", header: "Collector", render: (r) => <CollectorCell row={r} /> },
];

const OTHER_TEAMS = "other teams";

const HOLDER_COLUMNS: Column<FleetHolderRow>[] = [
  {
    key: "holder",
    header: "Holder",
    render: (r) => (r.aggregated ? <em title="holders you do not see by name, summed">{r.holder}, summed</em> : r.holder),
  },
  { key: "team", header: "Team / project", render: (r) => (r.aggregated ? <span className="muted">–</span> : who(r.team, r.project)) },
  { key: "cost_usd", header: "Uninstrumented cost", align: "right", render: (r) => <strong>{formatUsd(r.cost_usd)}</strong> },
  { key: "busy_uninstrumented_usd", header: "Busy", align: "right", render: (r) => formatUsd(r.busy_uninstrumented_usd) },
  { key: "idle_held_usd", header: "Idle-held", align: "right", render: (r) => formatUsd(r.idle_held_usd) },
  { key: "gpu_hours", header: "GPU-hours", align: "right", priority: "low", render: (r) => formatGpuHours(r.gpu_hours) },
];

function CsvLink({ table, period }: { table: string; period: string }) {
  return (
    <a className="btn btn-small" href={apiUrl(`${FLEET_API}${table}.csv?period=${encodeURIComponent(period)}`)} download data-testid={`fleet-${table}-csv`}>
      Download CSV
    </a>
  );
}

export function ClassCards({ data }: { data: FleetSummary }) {
  return (
    <div className="stats" data-testid="fleet-classes">
      <Stat label="Coverage" tone="accent" testId="fleet-coverage" value={formatPct(data.coverage)} sub={`${formatGpuHours(data.instrumented_gpu_hours)} of ${formatGpuHours(data.billed_gpu_hours)} measured by runs`} />
      {FLEET_CLASSES.map((c) => (
        <Stat
          key={c}
          label={FLEET_CLASS_LABEL[c]}
          testId={`fleet-class-${c}`}
          tone={c === "idle_held" ? "warn" : undefined}
          value={formatUsd(data.classes[c].usd)}
          sub={<span title={CLASS_HELP[c]}>{formatGpuHours(data.classes[c].gpu_hours)}</span>}
        />
      ))}
    </div>
  );
}

export function FleetPage() {
  const [params, setParams] = useSearchParams();
  const { period, invalid } = parsePeriodParam(params.get("period"));
  const state = useApi<FleetSummary>(`${FLEET_API}summary?period=${encodeURIComponent(period)}`);
  return (
    <div className="page">
      <PageHeader
        title="Fleet"
        subtitle={state.data ? `${periodLabel(period)} · ${formatDate(state.data.period.start)} – ${formatDate(state.data.period.end)} · every GPU-hour of every node, measured or not` : periodLabel(period)}
        actions={<PeriodPicker value={period} onChange={(p) => setParams(p === DEFAULT_PERIOD ? {} : { period: p })} />}
      />
      <ParamNotice name="period" value={invalid} shown="the last 30 days" />
      <Async
        state={state}
        loadingRows={6}
        isEmpty={(d) => d.node_count === 0}
        empty={<Empty title="No node reports yet">Run the node collector (phantomhub-agent node) on your GPU hosts with a node token from Settings → API tokens.</Empty>}
      >
        {(d) => (
          <>
            <ClassCards data={d} />
            {d.classes.unknown.gpu_hours > 0 && (
              <p className="period-note" data-testid="fleet-unknown">
                {formatGpuHours(d.classes.unknown.gpu_hours)} not reporting (gaps in the collectors' samples): shown, not priced.
              </p>
            )}
            <Card title="Idle-held GPUs now" actions={<span className="muted small">{formatNumber(d.idle_held_now.length)} GPUs holding memory without computing</span>}>
              {d.idle_held_now.length > 0 ? (
                <DataTable caption="GPUs idle-held right now" testId="fleet-idle-now" columns={IDLE_COLUMNS} rows={d.idle_held_now} rowKey={(r) => `${r.node}:${r.gpu_index}`} />
              ) : (
                <Empty title="No GPU is idle-held right now">{d.last_report_at ? `The latest node report came ${formatDateTime(d.last_report_at)}; a GPU counts as now while its node reported within four intervals.` : null}</Empty>
              )}
            </Card>
            <Card title="Nodes that cost most" actions={<span className="card-links"><span className="muted small">{formatNumber(d.nodes.length)} of {formatNumber(d.node_count)} nodes</span><CsvLink table="nodes" period={period} /></span>}>
              {d.nodes.length > 0 ? (
                <DataTable caption="Nodes by cost" testId="fleet-nodes" columns={NODE_COLUMNS} rows={d.nodes} rowKey={(r) => r.node} />
              ) : (
                <Empty title="No node time in this period" />
              )}
            </Card>
            <Card title="Holders of uninstrumented time" actions={<span className="card-links"><span className="muted small">{d.sees_all_teams === false ? "your teams' pods, jobs and users no agent measures; other teams' summed" : "pods, jobs and users no agent measures"}</span><CsvLink table="holders" period={period} /></span>}>
              {d.holders.length > 0 ? (
                <DataTable caption="Holders by uninstrumented cost" testId="fleet-holders" columns={HOLDER_COLUMNS} rows={d.holders} rowKey={(r) => r.holder} />
              ) : (
                <Empty title="Every busy GPU-hour was measured by a run" />
              )}
            </Card>
          </>
        )}
      </Async>
    </div>
  );
}
