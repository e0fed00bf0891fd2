import { useMemo, useState } from "react";
import { Link, useNavigate } from "react-router";

import type { ReactNode } from "react";

import type { RunListItem, RunTotals } from "../api/types";
import { usePeriodLink } from "../lib/links";
import { formatDateTime, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { DEFAULT_SORT, PERIOD_SORT_KEYS, SERVER_SORT_KEYS, sortRows, toggleSort } from "../lib/urlState";
import { DataTable, type Column } from "./DataTable";
import { ShareBar, StatusBadge } from "./ui";

export function runPath(id: string): string {
  return `/runs/${encodeURIComponent(id)}`;
}

/** The run id of a row, whichever list it came from (runs list: id; rollup lists: key). */
export function runId(r: RunListItem): string {
  return r.id ?? r.key ?? "";
}

/** "8× H100-SXM": how many GPUs of which model. */
export function gpuLabel(r: { gpu_count?: number | null; gpu_model?: string | null; gpu_key?: string | null }): string {
  const model = r.gpu_model || r.gpu_key || "unknown GPU";
  return r.gpu_count ? `${r.gpu_count}× ${model}` : model;
}

const SORTABLE = new Set<string>([...SERVER_SORT_KEYS, ...PERIOD_SORT_KEYS]);

const COMPACT = new Set(["name", "gpu", "cost_usd", "recoverable_usd", "waste_share", "period_cost_usd", "period_recoverable_usd"]);

type PeriodName = "cost_usd" | "recoverable_usd" | "lost_usd" | "gpu_hours" | "waste_usd";

/**
 * A run's figure within the page's period. The runs list names them `period_*` (its `cost_usd` is
 * the whole run's); rows of the rollups (leaderboards, top runs) carry only the period's figures.
 */
export function periodFigure(r: RunListItem, name: PeriodName): number | null {
  const own = r[`period_${name}`];
  if (own !== undefined) return own ?? null;
  return r.key !== undefined && r.id === undefined ? (r[name] ?? null) : null;
}

/** The whole run's cost, whichever list the row came from. */
export function wholeCost(r: RunListItem): number | null {
  if (r.whole_cost_usd !== undefined) return r.whole_cost_usd ?? null;
  return r.id !== undefined ? (r.cost_usd ?? null) : null;
}

/** Sorting rows in the page by the columns of a period table: period figures and the whole cost. */
export function periodValue(r: RunListItem, key: string): unknown {
  if (key.startsWith("period_")) return periodFigure(r, key.slice(7) as PeriodName);
  if (key === "cost_usd") return wholeCost(r);
  return (r as Record<string, unknown>)[key];
}

/**
 * The columns of a list filtered by a period: each run's cost within it ("In period", what finance
 * counts) and its whole cost beside it ("Whole run"), recoverable spend and GPU-hours within it.
 * The whole cost keeps the key `cost_usd`, as the runs API sorts it.
 */
function periodColumns(totals: RunTotals | null | undefined): Partial<Record<string, Partial<Column<RunListItem>>>> {
  const foot = (v: ReactNode) => (totals ? v : undefined);
  return {
    cost_usd: {
      key: "cost_usd",
      header: "Whole run",
      title: "the whole run's cost, on every day it was billed",
      render: (r) => <span className="muted">{formatUsd(wholeCost(r))}</span>,
      footer: foot(<span className="muted">{formatUsd(totals?.whole_cost_usd)}</span>),
    },
    recoverable_usd: {
      key: "period_recoverable_usd",
      header: "Recoverable in period",
      title: "recoverable spend in the period",
      render: (r) => <strong>{r.analysed !== false ? formatUsd(periodFigure(r, "recoverable_usd")) : <span className="muted">pending</span>}</strong>,
      footer: foot(<strong>{formatUsd(totals?.period_recoverable_usd)}</strong>),
    },
    lost_usd: {
      key: "period_lost_usd",
      header: "Lost in period",
      title: "lost to failures in the period",
      render: (r) => formatUsd(periodFigure(r, "lost_usd")),
      footer: foot(formatUsd(totals?.period_lost_usd)),
    },
    waste_share: { footer: foot(<span className="muted small">{formatPct(totals?.period_waste_share)} in period</span>) },
    gpu_hours: {
      key: "period_gpu_hours",
      header: "GPU-hours in period",
      title: "GPU-hours in the period",
      render: (r) => formatGpuHours(periodFigure(r, "gpu_hours")),
      footer: foot(formatGpuHours(totals?.period_gpu_hours)),
    },
  };
}

/**
 * Money first (cost, recoverable, waste share, MFU), then the details that give way on narrow
 * screens. With `period` (a list filtered by a period) the cost within the period comes first and
 * the whole run's beside it, each labelled; with `totals` a totals row closes the table.
 */
export function runColumns(
  opts: { showTeam?: boolean; compact?: boolean; link?: (path: string) => string; period?: boolean; totals?: RunTotals | null; lost?: boolean } = {},
): Column<RunListItem>[] {
  const link = opts.link ?? ((p: string) => p);
  let cols: Column<RunListItem>[] = [
    {
      key: "name",
      header: "Run",
      render: (r) => (
        <div className="cell-main">
          <Link to={link(runPath(runId(r)))} tabIndex={-1} className="row-link">
            {r.name || runId(r).slice(0, 8)}
          </Link>
          {opts.showTeam !== false && (
            <span className="cell-sub">
              {r.team_name ?? r.team} / {r.project_name ?? r.project}
            </span>
          )}
        </div>
      ),
    },
    { key: "cost_usd", header: "Cost", align: "right", render: (r) => formatUsd(r.cost_usd) },
    { key: "recoverable_usd", header: "Recoverable", align: "right", render: (r) => <strong>{r.analysed !== false ? formatUsd(r.recoverable_usd) : <span className="muted">pending</span>}</strong> },
    ...(opts.lost ? [{ key: "lost_usd", header: "Lost to failures", align: "right" as const, render: (r: RunListItem) => formatUsd(r.lost_usd) }] : []),
    { key: "waste_share", header: "Waste share", render: (r) => <ShareBar value={r.waste_share} /> },
    { key: "mfu", header: "MFU", align: "right", render: (r) => formatPct(r.mfu) },
    { key: "gpu", header: "GPUs", render: (r) => <span className="nowrap">{gpuLabel(r)}</span> },
    { key: "gpu_hours", header: "GPU-hours", align: "right", priority: "low", render: (r) => formatGpuHours(r.gpu_hours) },
    {
      key: "started_at",
      header: "Started",
      title: "start of the billed time (GPUs allocated)",
      priority: "low",
      render: (r) => <span className="nowrap muted">{formatDateTime(r.started_at)}</span>,
    },
    { key: "status", header: "Status", priority: "low", render: (r) => (r.status ? <StatusBadge status={r.status} /> : null) },
  ];
  if (opts.period) {
    const changes = periodColumns(opts.totals);
    const inPeriod: Column<RunListItem> = {
      key: "period_cost_usd",
      header: "In period",
      title: "cost in the period (the days finance counts)",
      align: "right",
      render: (r) => formatUsd(periodFigure(r, "cost_usd")),
      footer: opts.totals ? formatUsd(opts.totals.period_cost_usd) : undefined,
    };
    cols = cols.flatMap((c) => {
      const changed = { ...c, ...changes[c.key] };
      return c.key === "cost_usd" ? [inPeriod, changed] : [changed];
    });
  } else if (opts.totals) {
    const t = opts.totals;
    const footers: Record<string, ReactNode> = {
      cost_usd: formatUsd(t.cost_usd),
      recoverable_usd: <strong>{formatUsd(t.recoverable_usd)}</strong>,
      lost_usd: formatUsd(t.lost_usd),
      waste_share: <span className="muted small">{formatPct(t.waste_share)}</span>,
      gpu_hours: formatGpuHours(t.gpu_hours),
    };
    cols = cols.map((c) => (c.key in footers ? { ...c, footer: footers[c.key] } : c));
  }
  if (opts.totals) {
    const n = opts.totals.runs;
    cols[0] = { ...cols[0], footer: <span data-testid="runs-total-label">Total · {formatNumber(n)} run{n === 1 ? "" : "s"}</span> };
  }
  return cols.filter((c) => !opts.compact || COMPACT.has(c.key)).map((c) => ({ ...c, sortable: SORTABLE.has(c.key) }));
}

/**
 * Runs as a table. With `onSort` the caller sorts (the runs list, on the server); without it the
 * table sorts the rows it was given by any numeric column itself. Links keep the page's period.
 */
/** A checkbox column for picking runs (to compare them): `selected` ids, `onToggle` flips one. */
export function selectColumn(selected: readonly string[], onToggle: (id: string) => void): Column<RunListItem> {
  return {
    key: "select",
    header: <span className="visually-hidden">Select</span>,
    title: "Select",
    render: (r) => (
      <input
        type="checkbox"
        checked={selected.includes(runId(r))}
        onChange={() => onToggle(runId(r))}
        aria-label={`Select ${r.name || runId(r).slice(0, 8)} to compare`}
        data-testid="run-select"
      />
    ),
  };
}

export function RunTable({ rows, sort, onSort, caption, showTeam, compact, testId, selected, onToggle, period, totals }: { rows: RunListItem[]; sort?: string; onSort?: (key: string) => void; caption: string; showTeam?: boolean; compact?: boolean; testId?: string; selected?: readonly string[]; onToggle?: (id: string) => void; period?: boolean; totals?: RunTotals | null }) {
  const navigate = useNavigate();
  const { link } = usePeriodLink();
  const [ownSort, setOwnSort] = useState(period ? "-period_recoverable_usd" : DEFAULT_SORT);
  const shown = useMemo(() => (onSort ? rows : sortRows(rows, ownSort, period ? periodValue : undefined)), [rows, onSort, ownSort, period]);
  // Lost to failures beside recoverable, where the API gives it (older servers do not).
  const lost = rows.some((r) => r.lost_usd !== undefined || r.period_lost_usd !== undefined) || totals?.lost_usd !== undefined;
  const columns = runColumns({ showTeam, compact, link, period, totals, lost });
  const select = selected && onToggle ? selectColumn(selected, onToggle) : null;
  return (
    <DataTable
      caption={caption}
      columns={select ? [select, ...columns] : columns}
      rows={shown}
      rowKey={runId}
      sort={onSort ? sort : ownSort}
      onSort={onSort ?? ((key) => setOwnSort((s) => toggleSort(s, key)))}
      onOpen={(r) => navigate(link(runPath(runId(r))))}
      testId={testId}
    />
  );
}
