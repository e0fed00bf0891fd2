import { useMemo, useState } from "react";
import { Link } from "react-router";

import { useApi } from "../../api/hooks";
import type { ProjectFailureRow, ProjectFailures } from "../../api/types";
import { DataTable, type Column } from "../../components/DataTable";
import { Async, Empty } from "../../components/States";
import { Card } from "../../components/ui";
import { formatMonth, formatNumber, formatUsd } from "../../lib/format";
import { endCauseLabel, projectFailuresApiPath } from "../../lib/jobs";
import { isMonth, periodDates, sortRows, toggleSort } from "../../lib/urlState";

/** The month a period's failures are read for: the month itself, or the month the period ends in. */
export function failuresMonth(period: string, now: Date = new Date()): string {
  return isMonth(period) ? period : periodDates(period, now).end.slice(0, 7);
}

/**
 * A project's failures in a month by end cause, exception and host: how many attempts ended so,
 * and the rework and restart dollars they cost the attempts after them.
 */
export function ProjectFailuresCard({ project, period }: { project: string; period: string }) {
  const month = failuresMonth(period);
  const state = useApi<ProjectFailures>(projectFailuresApiPath(project, month));
  const [sort, setSort] = useState("-lost_usd");
  // Attempts that finished cleanly cost nothing here: counted under the table, not listed as a cause.
  const rows = useMemo(() => sortRows((state.data?.rows ?? []).filter((r) => r.end_cause !== "finished"), sort), [state.data, sort]);
  const finished = (state.data?.rows ?? []).filter((r) => r.end_cause === "finished").reduce((s, r) => s + r.attempts, 0);
  const total = rows.reduce((s, r) => s + r.lost_usd, 0);
  const columns: Column<ProjectFailureRow>[] = [
    {
      key: "end_cause",
      header: "End cause",
      sortable: true,
      render: (r) => (
        <div className="cell-main">
          <span>{endCauseLabel(r.end_cause)}</span>
          {r.end_detail && <span className="cell-sub mono">{r.end_detail}</span>}
        </div>
      ),
    },
    { key: "host", header: "Host", sortable: true, render: (r) => (r.host ? <span className="nowrap">{r.host}</span> : <span className="muted">–</span>) },
    { key: "attempts", header: "Attempts", align: "right", sortable: true, render: (r) => formatNumber(r.attempts) },
    { key: "rework_usd", header: "Rework", align: "right", sortable: true, render: (r) => formatUsd(r.rework_usd) },
    { key: "restart_usd", header: "Restart", align: "right", sortable: true, render: (r) => formatUsd(r.restart_usd) },
    { key: "lost_usd", header: "Lost", align: "right", sortable: true, render: (r) => <strong className={r.lost_usd > 0 ? "money-lost" : undefined}>{formatUsd(r.lost_usd)}</strong> },
  ];
  return (
    <Card
      title={`Failures in ${formatMonth(month)}`}
      id="failures"
      actions={
        <span className="card-links">
          {state.data && rows.length > 0 && <span className="muted small">{formatUsd(total)} lost to failures</span>}
          <Link to={`/jobs?project=${encodeURIComponent(project)}`} data-testid="project-jobs-link">
            Jobs of this project →
          </Link>
        </span>
      }
    >
      <Async
        state={state}
        loadingRows={3}
        isEmpty={(d) => d.rows.every((r) => r.end_cause === "finished")}
        empty={
          <Empty title={`No attempt of this project's jobs failed in ${formatMonth(month)}`}>
            {finished > 0 ? `${formatNumber(finished)} attempt${finished === 1 ? "" : "s"} finished cleanly.` : null}
          </Empty>
        }
      >
        {() => (
          <>
            <DataTable caption={`Failure causes of ${project} in ${month}`} testId="project-failures" dense columns={columns} rows={rows} rowKey={(r) => `${r.end_cause}/${r.end_detail}/${r.host}`} sort={sort} onSort={(k) => setSort((s) => toggleSort(s, k))} />
            <p className="muted small" data-testid="project-failures-note">
              Rework and restart: what each failure cost the attempts after it (and its own restart time after its last step).
              {finished > 0 && ` ${formatNumber(finished)} attempt${finished === 1 ? "" : "s"} finished cleanly.`}
            </p>
          </>
        )}
      </Async>
    </Card>
  );
}
