import { useMemo, useState } from "react";
import { Link, useNavigate } from "react-router";

import type { RunListItem } from "../api/types";
import { usePeriodLink } from "../lib/links";
import { formatDateTime, formatGpuHours, formatPct, formatUsd } from "../lib/format";
import { DEFAULT_SORT, SERVER_SORT_KEYS, sortRows, toggleSort } from "../lib/urlState";
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

const SORTABLE = new Set<string>(SERVER_SORT_KEYS);

const COMPACT = new Set(["name", "gpu", "cost_usd", "recoverable_usd", "waste_share"]);

/** Money first (cost, recoverable, waste share, MFU), then the details that give way on narrow screens. */
export function runColumns(opts: { showTeam?: boolean; compact?: boolean; link?: (path: string) => string } = {}): Column<RunListItem>[] {
  const link = opts.link ?? ((p: string) => p);
  const cols: Column<RunListItem>[] = [
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

export function RunTable({ rows, sort, onSort, caption, showTeam, compact, testId, selected, onToggle }: { rows: RunListItem[]; sort?: string; onSort?: (key: string) => void; caption: string; showTeam?: boolean; compact?: boolean; testId?: string; selected?: readonly string[]; onToggle?: (id: string) => void }) {
  const navigate = useNavigate();
  const { link } = usePeriodLink();
  const [ownSort, setOwnSort] = useState(DEFAULT_SORT);
  const shown = useMemo(() => (onSort ? rows : sortRows(rows, ownSort)), [rows, onSort, ownSort]);
  const columns = runColumns({ showTeam, compact, link });
  return (
    <DataTable
      caption={caption}
      columns={selected && onToggle ? [selectColumn(selected, onToggle), ...columns] : columns}
      rows={shown}
      rowKey={runId}
      sort={onSort ? sort : ownSort}
      onSort={onSort ?? ((key) => setOwnSort((s) => toggleSort(s, key)))}
      onOpen={(r) => navigate(link(runPath(runId(r))))}
      testId={testId}
    />
  );
}
