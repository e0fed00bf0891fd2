import { useMemo, useState } from "react";
import { Link, useNavigate } from "react-router";

import type { JobAttempt } from "../../api/types";
import { DataTable, type Column } from "../../components/DataTable";
import { StatusBadge } from "../../components/ui";
import { formatBytes, formatDateTime, formatNumber, formatSeconds, formatUsd, isNum } from "../../lib/format";
import { CAUSE_HELP, endCauseLabel, isFailure } from "../../lib/jobs";
import { usePeriodLink } from "../../lib/links";
import { sortRows, toggleSort } from "../../lib/urlState";

const SORT: Record<string, (a: JobAttempt) => number | string | null> = {
  index: (a) => a.index,
  attempt: (a) => a.attempt,
  started: (a) => a.billed_from ?? a.started_at,
  cost: (a) => a.cost_usd,
  lost: (a) => a.lost_usd.total,
  rework: (a) => a.lost_usd.rework,
  restart: (a) => a.lost_usd.restart,
  checkpoint: (a) => a.lost_usd.checkpoint,
  restored: (a) => a.restored_step,
  ckpt_count: (a) => a.checkpoints.count,
  ckpt_blocking: (a) => a.checkpoints.blocking_s,
};

function lostCell(v: number) {
  return v > 0 ? formatUsd(v) : <span className="muted">{formatUsd(v)}</span>;
}

/** One row per attempt shown, in start order: when, how it ended, what it cost and lost, its checkpoints. */
export function AttemptsTable({ attempts }: { attempts: readonly JobAttempt[] }) {
  const { link } = usePeriodLink();
  const navigate = useNavigate();
  const [sort, setSort] = useState("index");
  const rows = useMemo(() => sortRows(attempts, sort, (a, key) => SORT[key]?.(a) ?? null), [attempts, sort]);
  const columns: Column<JobAttempt>[] = [
    { key: "index", header: "#", title: "order by start", align: "right", render: (a) => formatNumber(a.index) },
    {
      key: "run",
      header: "Run",
      render: (a) => (
        <Link to={link(`/runs/${encodeURIComponent(a.run_id)}`)} tabIndex={-1} className="row-link">
          {a.name || a.run_id}
        </Link>
      ),
    },
    { key: "cost", header: "Cost", align: "right", render: (a) => formatUsd(a.cost_usd) },
    { key: "lost", header: "Lost", title: "lost to failures", align: "right", render: (a) => <strong className={a.lost_usd.total > 0 ? "money-lost" : undefined}>{formatUsd(a.lost_usd.total)}</strong> },
    { key: "rework", header: <span title={CAUSE_HELP.rework}>Rework</span>, title: "rework dollars", align: "right", render: (a) => lostCell(a.lost_usd.rework) },
    { key: "restart", header: <span title={CAUSE_HELP.restart}>Restart</span>, title: "restart dollars", align: "right", render: (a) => lostCell(a.lost_usd.restart) },
    { key: "checkpoint", header: <span title={CAUSE_HELP.checkpoint}>Checkpoint</span>, title: "checkpoint dollars", align: "right", render: (a) => lostCell(a.lost_usd.checkpoint) },
    {
      key: "end",
      header: "Status / end cause",
      title: "status and end cause",
      render: (a) => (
        <div className="cell-main">
          <span className="nowrap">
            <StatusBadge status={a.status} /> <span className={isFailure(a.end_cause) ? "end-cause end-cause-failed" : "end-cause"} data-testid="end-cause">{endCauseLabel(a.end_cause, a.status)}</span>
          </span>
          {a.end_detail && <span className="cell-sub mono">{a.end_detail}</span>}
        </div>
      ),
    },
    { key: "started", header: "Started", title: "billed from", priority: "low", render: (a) => <span className="nowrap">{formatDateTime(a.billed_from ?? a.started_at)}</span> },
    { key: "ended", header: "Ended", priority: "low", render: (a) => <span className="nowrap">{a.ended_at ? formatDateTime(a.ended_at) : <span className="muted">running</span>}</span> },
    { key: "attempt", header: "Launcher attempt", title: "the launcher's restart count", align: "right", render: (a) => (a.attempt === null ? <span className="muted">–</span> : formatNumber(a.attempt)) },
    {
      key: "restored",
      header: "Restored step",
      align: "right",
      render: (a) =>
        isNum(a.restored_step) ? (
          <div className="cell-main">
            <span>{formatNumber(a.restored_step)}</span>
            {a.rework_steps && <span className="cell-sub">steps {formatNumber(a.rework_steps[0])}–{formatNumber(a.rework_steps[1])} again</span>}
          </div>
        ) : (
          <span className="muted">–</span>
        ),
    },
    { key: "ckpt_count", header: "Checkpoints", align: "right", render: (a) => (
      <div className="cell-main">
        <span>{formatNumber(a.checkpoints.count)}{!!a.checkpoints.async && <span className="badge badge-info badge-inline">async</span>}</span>
        {a.checkpoints.count > 0 && <span className="cell-sub">{formatBytes(a.checkpoints.bytes)}</span>}
      </div>
    ) },
    { key: "ckpt_blocking", header: "Blocked", title: "seconds blocked in checkpoint saves and restores", align: "right", render: (a) => (a.checkpoints.blocking_s > 0 ? formatSeconds(a.checkpoints.blocking_s) : <span className="muted">–</span>) },
  ];
  return (
    <DataTable
      caption="Attempts of this job"
      testId="attempts-table"
      columns={columns.map((c) => ({ ...c, sortable: c.key in SORT }))}
      rows={rows}
      rowKey={(a) => a.run_id}
      rowLabel={(a) => `Attempt ${a.index}: ${a.name || a.run_id}`}
      sort={sort}
      onSort={(key) => setSort((s) => toggleSort(s, key))}
      onOpen={(a) => navigate(link(`/runs/${encodeURIComponent(a.run_id)}`))}
      dense
      stickyFirst
    />
  );
}
