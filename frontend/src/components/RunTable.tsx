import { Link, useNavigate } from "react-router";

import type { RunListItem } from "../api/types";
import { formatDateTime, formatGpuHours, formatPct, formatUsd } from "../lib/format";
import { SERVER_SORT_KEYS } from "../lib/urlState";
import { DataTable, type Column } from "./DataTable";
import { ShareBar, StatusBadge } from "./ui";

export function runPath(id: string): string {
  return `/runs/${encodeURIComponent(id)}`;
}

/** The run id of a row, whichever list it came from (runs list: id; rollup lists: key). */
export function runId(r: RunListItem): string {
  return r.id ?? r.key ?? "";
}

const SORTABLE = new Set<string>(SERVER_SORT_KEYS);

const COMPACT = new Set(["name", "gpu", "cost_usd", "recoverable_usd", "waste_share"]);

export function runColumns(opts: { showTeam?: boolean; compact?: boolean } = {}): Column<RunListItem>[] {
  const cols: Column<RunListItem>[] = [
    {
      key: "name",
      header: "Run",
      render: (r) => (
        <div className="cell-main">
          <Link to={runPath(runId(r))} tabIndex={-1} className="row-link">
            {r.name || runId(r).slice(0, 8)}
          </Link>
          {opts.showTeam !== false && (
            <span className="cell-sub">
              {r.team} / {r.project}
            </span>
          )}
        </div>
      ),
    },
    { key: "status", header: "Status", render: (r) => (r.status ? <StatusBadge status={r.status} /> : null) },
    {
      key: "gpu",
      header: "GPUs",
      render: (r) => (
        <span className="nowrap">
          {r.gpu_count ? `${r.gpu_count}× ` : ""}
          {r.gpu_model || r.gpu_key || "unknown"}
        </span>
      ),
    },
    { key: "started_at", header: "Started", render: (r) => <span className="nowrap muted">{formatDateTime(r.started_at)}</span> },
    { key: "gpu_hours", header: "GPU-hours", align: "right", render: (r) => formatGpuHours(r.gpu_hours) },
    { key: "cost_usd", header: "Cost", align: "right", render: (r) => formatUsd(r.cost_usd) },
    { key: "recoverable_usd", header: "Recoverable", align: "right", render: (r) => <strong>{r.analysed !== false ? formatUsd(r.recoverable_usd) : <span className="muted">pending</span>}</strong> },
    { key: "waste_share", header: "Waste share", render: (r) => <ShareBar value={r.waste_share} /> },
    { key: "mfu", header: "MFU", align: "right", render: (r) => formatPct(r.mfu) },
  ];
  return cols.filter((c) => !opts.compact || COMPACT.has(c.key)).map((c) => ({ ...c, sortable: SORTABLE.has(c.key) }));
}

export function RunTable({ rows, sort, onSort, caption, showTeam, compact, testId }: { rows: RunListItem[]; sort?: string; onSort?: (key: string) => void; caption: string; showTeam?: boolean; compact?: boolean; testId?: string }) {
  const navigate = useNavigate();
  return (
    <DataTable
      caption={caption}
      columns={runColumns({ showTeam, compact })}
      rows={rows}
      rowKey={runId}
      sort={sort}
      onSort={onSort}
      onOpen={(r) => navigate(runPath(runId(r)))}
      testId={testId}
    />
  );
}
