import { useNavigate, useSearchParams } from "react-router";

import { useApi } from "../api/hooks";
import type { EntityPage, Figures } from "../api/types";
import { DataTable } from "../components/DataTable";
import { RunTable } from "../components/RunTable";
import { Async, Empty } from "../components/States";
import { PeriodPicker } from "../components/PeriodPicker";
import { Card, PageHeader, ShareBar } from "../components/ui";
import { formatDate, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { DEFAULT_PERIOD, parsePeriod, periodLabel, sortRows } from "../lib/urlState";
import { CategoryCard, DailyCard, FigureCards } from "./Overview";

type ProjectRow = Figures & { slug?: string; key?: string; name: string };

function projectKey(row: ProjectRow): string {
  return row.slug ?? row.key ?? row.name;
}

/** A team's or a project's page for a period: by day and category, its projects and top runs. */
export function EntityView({ kind, slug }: { kind: "team" | "project"; slug: string }) {
  const navigate = useNavigate();
  const [params, setParams] = useSearchParams();
  const period = parsePeriod(params.get("period"));
  const state = useApi<EntityPage>(`${kind === "team" ? "teams" : "projects"}/${encodeURIComponent(slug)}?period=${encodeURIComponent(period)}`);
  const entity = state.data?.[kind];
  const teamSlug = kind === "project" ? (entity as { team?: string | { slug: string } } | undefined)?.team : undefined;
  const teamRef = typeof teamSlug === "string" ? teamSlug : teamSlug?.slug;

  return (
    <div className="page">
      <PageHeader
        crumbs={kind === "project" && teamRef ? [{ to: `/teams/${encodeURIComponent(teamRef)}`, label: teamRef }] : undefined}
        title={entity?.name ?? slug}
        subtitle={`${kind === "team" ? "Team" : "Project"} · ${slug} · ${state.data?.period ? `${formatDate(state.data.period.start)} – ${formatDate(state.data.period.end)}` : periodLabel(period)}`}
        actions={<PeriodPicker value={period} onChange={(p) => setParams(p === DEFAULT_PERIOD ? {} : { period: p })} />}
      />
      <Async state={state} loadingRows={6}>
        {(d) => (
          <>
            <FigureCards totals={d.totals} previous={d.previous_totals} />
            <div className="grid grid-2-1">
              <DailyCard days={d.by_day} />
              <CategoryCard byCategory={d.by_category} />
            </div>
            {kind === "team" && (
              <Card title="Projects">
                {d.projects && d.projects.length > 0 ? (
                  <DataTable
                    caption="Projects of this team"
                    testId="team-projects"
                    rows={sortRows(d.projects as ProjectRow[], "-recoverable_usd")}
                    rowKey={projectKey}
                    onOpen={(p) => navigate(`/projects/${encodeURIComponent(projectKey(p))}`)}
                    columns={[
                      { key: "name", header: "Project", render: (p) => <span className="row-link">{p.name}</span> },
                      { key: "runs", header: "Runs", align: "right", render: (p) => formatNumber(p.runs) },
                      { key: "gpu_hours", header: "GPU-hours", align: "right", render: (p) => formatGpuHours(p.gpu_hours) },
                      { key: "cost_usd", header: "Spend", align: "right", render: (p) => formatUsd(p.cost_usd) },
                      { key: "waste_share", header: "Waste share", render: (p) => <ShareBar value={p.waste_share} /> },
                      { key: "mfu", header: "MFU", align: "right", render: (p) => formatPct(p.mfu) },
                      { key: "recoverable_usd", header: "Recoverable", align: "right", render: (p) => <strong className="money-accent">{formatUsd(p.recoverable_usd)}</strong> },
                    ]}
                  />
                ) : (
                  <Empty title="No projects with spend in this period" />
                )}
              </Card>
            )}
            <Card title="Top runs by recoverable spend">
              {d.top_runs.length > 0 ? <RunTable rows={d.top_runs} caption="Top runs" showTeam={kind === "team"} testId="top-runs" /> : <Empty title="No runs in this period" />}
            </Card>
          </>
        )}
      </Async>
    </div>
  );
}
