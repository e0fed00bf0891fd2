import { useMemo, useState } from "react";
import { useNavigate, useSearchParams } from "react-router";

import { apiUrl } from "../api/client";
import { useApi } from "../api/hooks";
import { useSession } from "../api/session";
import type { GpuSpec, Page, RunRow } from "../api/types";
import { RunTable } from "../components/RunTable";
import { TextFilter } from "../components/TextFilter";
import { Async, Empty } from "../components/States";
import { SaveViewButton } from "../components/SavedViews";
import { Card, PageHeader, Pager } from "../components/ui";
import { COMPARE_MAX, COMPARE_MIN, comparePath } from "./Compare";
import { formatDate, formatNumber } from "../lib/format";
import { usePeriodLink } from "../lib/links";
import {
  activeFilterCount,
  EMPTY_RUNS_QUERY,
  parseRunsQuery,
  RUN_STATUSES,
  runsApiPath,
  runsQueryToParams,
  toggleSort,
  updateRunsQuery,
  type RunsQuery,
} from "../lib/urlState";

export function RunsPage() {
  const [params, setParams] = useSearchParams();
  const query = useMemo(() => parseRunsQuery(params), [params]);
  const { user } = useSession();
  const state = useApi<Page<RunRow>>(runsApiPath(query));
  const gpus = useApi<GpuSpec[]>("/api/v1/pricing/gpus");
  // Runs ticked for comparison (kept across pages and filters until compared or cleared).
  const [picked, setPicked] = useState<string[]>([]);
  const navigate = useNavigate();
  const { period } = usePeriodLink();
  const togglePicked = (id: string) => setPicked((p) => (p.includes(id) ? p.filter((x) => x !== id) : [...p, id]));
  const canCompare = picked.length >= COMPARE_MIN && picked.length <= COMPARE_MAX;

  const set = (patch: Partial<RunsQuery>, replace = false) => setParams(runsQueryToParams(updateRunsQuery(query, patch)), { replace });

  const teams = user?.teams ?? [];
  const badDates = (["from", "to"] as const).map((k) => [k, (params.get(k) ?? "").trim()] as const).filter(([k, v]) => v && !query[k]);
  const filters = activeFilterCount(query);
  const data = state.data;
  const first = data ? (data.page - 1) * data.page_size + 1 : 0;
  const last = data ? Math.min(data.count, data.page * data.page_size) : 0;
  const pages = data ? (data.pages ?? Math.max(1, Math.ceil(data.count / data.page_size))) : 1;
  const csv = (() => {
    const p = runsQueryToParams({ ...query, page: 1 });
    p.set("sort", query.sort);
    return apiUrl(`runs.csv?${p.toString()}`);
  })();

  return (
    <div className="page">
      <PageHeader
        title="Runs"
        subtitle={data ? `${formatNumber(data.count)} run${data.count === 1 ? "" : "s"}${filters ? ` matching ${filters} filter${filters === 1 ? "" : "s"}` : ""}` : "Every run you can see"}
        actions={
          <>
            <span className="muted small" data-testid="compare-picked" aria-live="polite">
              {picked.length ? `${picked.length} selected${picked.length > COMPARE_MAX ? ` (at most ${COMPARE_MAX})` : ""}` : `tick ${COMPARE_MIN}–${COMPARE_MAX} runs to compare`}
            </span>
            {picked.length > 0 && (
              <button type="button" className="btn btn-ghost" onClick={() => setPicked([])}>
                Clear selection
              </button>
            )}
            <button type="button" className="btn" disabled={!canCompare} onClick={() => navigate(comparePath(picked, period))} data-testid="compare-action" title={`Compare ${COMPARE_MIN} to ${COMPARE_MAX} selected runs side by side`}>
              Compare
            </button>
            <SaveViewButton />
            <a className="btn" href={csv} download data-testid="runs-csv" title="Every run that matches these filters, as CSV">
              Download CSV
            </a>
          </>
        }
      />
      {badDates.length > 0 && (
        <div className="notice" role="status" data-testid="param-notice">
          {badDates.map(([k, v]) => `“${v}” is not a day (YYYY-MM-DD) for “${k === "from" ? "billed from" : "to"}”`).join("; ")}: that filter is left out.
        </div>
      )}
      <Card>
        <form className="filters" role="search" aria-label="Filter runs" onSubmit={(e) => e.preventDefault()}>
          <TextFilter id="f-q" label="Search" value={query.q} placeholder="Run name…" onCommit={(v) => set({ q: v }, true)} />
          {teams.length > 0 && !user?.is_org_admin && !user?.is_finance ? (
            <label className="filter" htmlFor="f-team">
              <span className="filter-label">Team</span>
              <select id="f-team" className="select" value={query.team} onChange={(e) => set({ team: e.target.value })}>
                <option value="">All teams</option>
                {query.team && !teams.some((t) => t.slug === query.team) && <option value={query.team}>{query.team}</option>}
                {teams.map((t) => (
                  <option key={t.slug} value={t.slug}>
                    {t.name}
                  </option>
                ))}
              </select>
            </label>
          ) : (
            <TextFilter id="f-team" label="Team" value={query.team} placeholder="slug" onCommit={(v) => set({ team: v }, true)} options={teams.map((t) => t.slug)} />
          )}
          <TextFilter id="f-project" label="Project" value={query.project} placeholder="slug" onCommit={(v) => set({ project: v }, true)} />
          <label className="filter" htmlFor="f-status">
            <span className="filter-label">Status</span>
            <select id="f-status" className="select" value={query.status} onChange={(e) => set({ status: e.target.value })}>
              <option value="">Any status</option>
              {RUN_STATUSES.map((s) => (
                <option key={s} value={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
          <label className="filter" htmlFor="f-gpu">
            <span className="filter-label">GPU</span>
            <select id="f-gpu" className="select" value={query.gpu} onChange={(e) => set({ gpu: e.target.value })}>
              <option value="">Any GPU</option>
              {query.gpu && !gpus.data?.some((g) => g.key === query.gpu) && <option value={query.gpu}>{query.gpu}</option>}
              {(gpus.data ?? []).map((g) => (
                <option key={g.key} value={g.key}>
                  {g.key}
                </option>
              ))}
            </select>
          </label>
          <TextFilter id="f-tag" label="Tag" value={query.tag} placeholder="tag" onCommit={(v) => set({ tag: v }, true)} />
          <TextFilter id="f-launched-by" label="Launched by" value={query.launched_by} placeholder="user" onCommit={(v) => set({ launched_by: v }, true)} />
          <label className="filter" htmlFor="f-from" title="Runs billed on some day from this one (UTC), as finance counts them">
            <span className="filter-label">Billed from</span>
            <input id="f-from" className="input" type="date" value={query.from} max={query.to || undefined} onChange={(e) => set({ from: e.target.value })} />
          </label>
          <label className="filter" htmlFor="f-to" title="…to this day, included">
            <span className="filter-label">to</span>
            <input id="f-to" className="input" type="date" value={query.to} min={query.from || undefined} onChange={(e) => set({ to: e.target.value })} />
          </label>
          {filters > 0 && (
            <button type="button" className="btn btn-ghost filter-clear" onClick={() => setParams(runsQueryToParams({ ...EMPTY_RUNS_QUERY, sort: query.sort }))}>
              Clear filters
            </button>
          )}
        </form>
        <Async
          state={state}
          loadingRows={10}
          isEmpty={(d) => d.results.length === 0}
          empty={
            data && data.count > 0 && data.page > pages ? (
              <Empty title={`Page ${formatNumber(data.page)} is past the last page`}>
                {formatNumber(data.count)} run{data.count === 1 ? "" : "s"} fill {formatNumber(pages)} page{pages === 1 ? "" : "s"}.{" "}
                <button type="button" className="btn btn-small" onClick={() => set({ page: pages })}>
                  Go to page {formatNumber(pages)}
                </button>
              </Empty>
            ) : (
              <Empty title={filters ? "No runs match these filters" : "No runs yet"}>{filters ? "Loosen a filter or clear them." : "Runs appear once the agent sends telemetry."}</Empty>
            )
          }
        >
          {(d) => (
            <div className={state.loading ? "is-refreshing" : undefined}>
              {d.period && (
                <p className="muted small period-note" data-testid="runs-period-note">
                  Billed {d.period.start ? formatDate(d.period.start) : "any day"} – {d.period.end ? formatDate(d.period.end) : "today"}: <strong>In period</strong> is each run&apos;s cost on those days, as finance counts it; <strong>Whole run</strong> is its cost on every day it was billed. The total row adds up every matching run, on every page.
                </p>
              )}
              <RunTable
                rows={d.results}
                sort={query.sort}
                onSort={(key) => set({ sort: toggleSort(query.sort, key) })}
                caption="Runs"
                testId="runs-table"
                selected={picked}
                onToggle={togglePicked}
                period={!!d.period}
                totals={d.totals}
              />
              <Pager first={first} last={last} count={d.count} page={d.page} pages={pages} shownTestId="runs-shown" onPage={(p) => set({ page: p })} />
            </div>
          )}
        </Async>
      </Card>
    </div>
  );
}

