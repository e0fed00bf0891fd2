import { Link, useNavigate, useSearchParams } from "react-router";

import { useApi } from "../api/hooks";
import type { JobList, JobRow } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Async, Empty } from "../components/States";
import { Card, PageHeader, Pager, Segmented, StatusBadge } from "../components/ui";
import { formatDateTime, formatNumber, formatUsd } from "../lib/format";
import { DEFAULT_JOB_SORT, JOB_SORTS, JOBS_API, JOBS_PAGE_SIZE, jobPath, type JobSort } from "../lib/jobs";
import { usePeriodLink } from "../lib/links";

/** The table's column for each of the server's sorts (each sorts biggest / newest first). */
const SORT_COLUMN: Record<JobSort, string> = { lost: "lost_usd", cost: "cost_usd", recent: "last_started_at" };
const COLUMN_SORT: Record<string, JobSort> = { lost_usd: "lost", cost_usd: "cost", last_started_at: "recent" };
const SORT_LABEL: Record<JobSort, string> = { lost: "Most lost", cost: "Most cost", recent: "Latest" };

export function jobsApiPath(query: { project: string; team: string; sort: JobSort; page: number }): string {
  const params = new URLSearchParams();
  if (query.project) params.set("project", query.project);
  if (query.team) params.set("team", query.team);
  params.set("sort", query.sort);
  params.set("limit", String(JOBS_PAGE_SIZE));
  params.set("offset", String((query.page - 1) * JOBS_PAGE_SIZE));
  return `${JOBS_API}?${params.toString()}`;
}

/** Every job one may see (a project's or a team's with ?project= / ?team=), by lost dollars first. */
export function JobsPage() {
  const [params, setParams] = useSearchParams();
  const navigate = useNavigate();
  const { link } = usePeriodLink();
  const project = (params.get("project") ?? "").trim();
  const team = (params.get("team") ?? "").trim();
  const sortParam = params.get("sort") ?? "";
  const sort: JobSort = (JOB_SORTS as readonly string[]).includes(sortParam) ? (sortParam as JobSort) : DEFAULT_JOB_SORT;
  const pageParam = Number.parseInt(params.get("page") ?? "", 10);
  const page = Number.isFinite(pageParam) && pageParam > 1 ? pageParam : 1;
  const state = useApi<JobList>(jobsApiPath({ project, team, sort, page }));

  const update = (patch: Record<string, string>) => {
    const next = new URLSearchParams(params);
    if (!("page" in patch)) next.delete("page");
    for (const [k, v] of Object.entries(patch)) {
      if (!v || (k === "sort" && v === DEFAULT_JOB_SORT) || (k === "page" && v === "1")) next.delete(k);
      else next.set(k, v);
    }
    setParams(next);
  };

  const columns: Column<JobRow>[] = [
    {
      key: "key",
      header: "Job",
      render: (j) => (
        <div className="cell-main">
          <Link to={link(jobPath(j.id))} tabIndex={-1} className="row-link mono">
            {j.key}
          </Link>
          <span className="cell-sub">
            {j.team} / {j.project}
          </span>
        </div>
      ),
    },
    { key: "lost_usd", header: "Lost to failures", align: "right", sortable: true, render: (j) => <strong className={j.lost_usd > 0 ? "money-lost" : undefined}>{formatUsd(j.lost_usd)}</strong> },
    { key: "cost_usd", header: "Cost", align: "right", sortable: true, render: (j) => formatUsd(j.cost_usd) },
    { key: "attempts", header: "Attempts", align: "right", render: (j) => formatNumber(j.attempts) },
    { key: "failures", header: "Failures", align: "right", render: (j) => (j.failures > 0 ? formatNumber(j.failures) : <span className="muted">0</span>) },
    { key: "status", header: "Status", render: (j) => <StatusBadge status={j.status} /> },
    { key: "started_at", header: "First started", priority: "low", render: (j) => <span className="nowrap">{formatDateTime(j.started_at)}</span> },
    { key: "last_started_at", header: "Last started", align: "right", sortable: true, render: (j) => <span className="nowrap">{formatDateTime(j.last_started_at)}</span> },
  ];
  const data = state.data;
  const pages = data ? Math.max(1, Math.ceil(data.count / JOBS_PAGE_SIZE)) : 1;
  const first = data && data.results.length ? (page - 1) * JOBS_PAGE_SIZE + 1 : 0;
  const last = data ? first + data.results.length - 1 : 0;
  const scope = [project && `project ${project}`, team && `team ${team}`].filter(Boolean).join(", ");

  return (
    <div className="page">
      <PageHeader
        title="Jobs"
        subtitle="A job is one training objective across the attempts its launcher restarted; what failures cost it is lost to rework, restarts and checkpoints"
        actions={<Segmented label="Sort jobs" value={sort} options={JOB_SORTS.map((s) => ({ value: s, label: SORT_LABEL[s] }))} onChange={(s) => update({ sort: s })} />}
      />
      {scope && (
        <div className="callout" data-testid="jobs-scope">
          <span>Jobs of {scope}</span>
          <button type="button" className="btn btn-ghost btn-small" onClick={() => update({ project: "", team: "" })}>
            Show all jobs
          </button>
        </div>
      )}
      <Card actions={<span className="muted small" data-testid="jobs-count">{data ? `${formatNumber(data.count)} job${data.count === 1 ? "" : "s"}` : ""}</span>}>
        <Async
          state={state}
          loadingRows={8}
          isEmpty={(d) => d.results.length === 0}
          empty={
            data && data.count > 0 ? (
              <Empty title={`Page ${formatNumber(page)} is past the last page`}>
                <button type="button" className="btn btn-small" onClick={() => update({ page: String(pages) })}>
                  Go to page {formatNumber(pages)}
                </button>
              </Empty>
            ) : (
              <Empty title={scope ? `No jobs of ${scope}` : "No jobs yet"}>Runs join a job when the agent is told one (job=) or reads it from its launcher (torchelastic, Slurm, Kubernetes).</Empty>
            )
          }
        >
          {(d) => (
            <div className={state.loading ? "is-refreshing" : undefined}>
              <DataTable
                caption="Jobs"
                testId="jobs-table"
                columns={columns}
                rows={d.results}
                rowKey={(j) => String(j.id)}
                sort={`-${SORT_COLUMN[sort]}`}
                onSort={(key) => COLUMN_SORT[key] && update({ sort: COLUMN_SORT[key] })}
                onOpen={(j) => navigate(link(jobPath(j.id)))}
              />
              {d.count > d.results.length && (
                <Pager first={first} last={last} count={d.count} page={page} pages={pages} shownTestId="jobs-shown" onPage={(p) => update({ page: String(p) })} />
              )}
            </div>
          )}
        </Async>
      </Card>
    </div>
  );
}
