import { useMemo, useState } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";

import { useApi } from "../api/hooks";
import type { EntityPage, Figures } from "../api/types";
import { ClosedMonthNote } from "../components/ClosedMonthNote";
import { DataTable } from "../components/DataTable";
import { RunTable } from "../components/RunTable";
import { Async, Empty } from "../components/States";
import { ParamNotice, PeriodPicker } from "../components/PeriodPicker";
import { Card, PageHeader, ShareBar } from "../components/ui";
import { formatDate, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { runsPath, usePeriodLink } from "../lib/links";
import { DEFAULT_PERIOD, parsePeriodParam, periodLabel, sortRows, toggleSort } from "../lib/urlState";
import { BudgetsCard } from "./Budgets";
import { ProjectFailuresCard } from "./job/ProjectFailures";
import { CategoryCard, DailyCard, FigureCards } from "./Overview";

type ProjectRow = Figures & { slug?: string; key?: string; name: string };

function projectKey(row: ProjectRow): string {
  return row.slug ?? row.key ?? row.name;
}

/** A team's or a project's page for a period: by day and category, its projects, its runs. */
export function EntityView({ kind, slug }: { kind: "team" | "project"; slug: string }) {
  const navigate = useNavigate();
  const [params, setParams] = useSearchParams();
  const { period, invalid } = parsePeriodParam(params.get("period"));
  const { link } = usePeriodLink();
  const [projectSort, setProjectSort] = useState("-recoverable_usd");
  const state = useApi<EntityPage>(`${kind === "team" ? "teams" : "projects"}/${encodeURIComponent(slug)}?period=${encodeURIComponent(period)}`);
  const entity = state.data?.[kind];
  const teamSlug = kind === "project" ? (state.data?.project?.team ?? undefined) : undefined;
  const teamName = kind === "project" ? (state.data?.project?.team_name ?? teamSlug) : undefined;
  const scope = kind === "team" ? { team: slug } : { project: slug };
  const projects = useMemo(() => sortRows((state.data?.projects ?? []) as ProjectRow[], projectSort), [state.data, projectSort]);
  const allRuns = state.data?.period ? runsPath({ ...scope, from: state.data.period.start, to: state.data.period.end }) : null;

  return (
    <div className="page">
      <PageHeader
        crumbs={kind === "project" && teamSlug ? [{ to: link(`/teams/${encodeURIComponent(teamSlug)}`), label: teamName ?? teamSlug }] : undefined}
        title={entity?.name ?? slug}
        subtitle={`${kind === "team" ? "Team" : "Project"}${entity && entity.name !== slug ? ` · ${slug}` : ""} · ${periodLabel(period)}${state.data?.period ? ` · ${formatDate(state.data.period.start)} – ${formatDate(state.data.period.end)}` : ""}`}
        actions={<PeriodPicker value={period} onChange={(p) => setParams(p === DEFAULT_PERIOD ? {} : { period: p })} />}
      />
      <ParamNotice name="period" value={invalid} shown="the last 30 days" />
      <Async state={state} loadingRows={6}>
        {(d) => (
          <>
            <ClosedMonthNote note={d.closed_month} />
            <FigureCards totals={d.totals} previous={d.previous_totals} dataFrom={d.data_from} />
            <BudgetsCard {...scope} />
            <div className="grid grid-2-1">
              <DailyCard days={d.by_day} runsOf={scope} />
              <CategoryCard byCategory={d.by_category} />
            </div>
            {kind === "team" && (
              <Card title="Projects" actions={<span className="muted small">in this period · open one for its runs</span>}>
                {projects.length > 0 ? (
                  <DataTable
                    caption="Projects of this team"
                    testId="team-projects"
                    rows={projects}
                    rowKey={projectKey}
                    sort={projectSort}
                    onSort={(key) => setProjectSort((s) => toggleSort(s, key))}
                    onOpen={(p) => navigate(link(`/projects/${encodeURIComponent(projectKey(p))}`))}
                    columns={[
                      {
                        key: "name",
                        header: "Project",
                        sortable: true,
                        render: (p) => (
                          <Link to={link(`/projects/${encodeURIComponent(projectKey(p))}`)} tabIndex={-1} className="row-link">
                            {p.name}
                          </Link>
                        ),
                      },
                      { key: "cost_usd", header: "Spend", align: "right", sortable: true, render: (p) => formatUsd(p.cost_usd) },
                      { key: "recoverable_usd", header: "Recoverable", align: "right", sortable: true, render: (p) => <strong className="money-accent">{formatUsd(p.recoverable_usd)}</strong> },
                      ...(projects.some((p) => p.lost_usd !== undefined)
                        ? [{ key: "lost_usd", header: "Lost to failures", align: "right" as const, sortable: true, render: (p: ProjectRow) => formatUsd(p.lost_usd) }]
                        : []),
                      { key: "waste_share", header: "Waste share", sortable: true, render: (p) => <ShareBar value={p.waste_share} /> },
                      { key: "mfu", header: "MFU", align: "right", sortable: true, render: (p) => formatPct(p.mfu) },
                      { key: "runs", header: "Runs", align: "right", sortable: true, render: (p) => formatNumber(p.runs) },
                      { key: "gpu_hours", header: "GPU-hours", align: "right", sortable: true, priority: "low", render: (p) => formatGpuHours(p.gpu_hours) },
                    ]}
                  />
                ) : (
                  <Empty title="No projects with spend in this period" />
                )}
              </Card>
            )}
            <Card
              title="Top runs by recoverable spend"
              actions={
                allRuns && (
                  <Link to={allRuns} data-testid="all-runs-link">
                    All {formatNumber(d.totals.runs)} run{d.totals.runs === 1 ? "" : "s"} of this {kind} in the period →
                  </Link>
                )
              }
            >
              {d.top_runs.length > 0 ? <RunTable rows={d.top_runs} caption="Top runs" showTeam={kind === "team"} testId="top-runs" period /> : <Empty title="No runs in this period" />}
            </Card>
            {kind === "project" && <ProjectFailuresCard project={slug} period={period} />}
          </>
        )}
      </Async>
    </div>
  );
}
