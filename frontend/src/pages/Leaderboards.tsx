import { useMemo, type ReactNode } from "react";
import { Link, useNavigate, useSearchParams } from "react-router";

import { apiUrl } from "../api/client";
import { useApi } from "../api/hooks";
import type { Figures, Leaderboard, LeaderboardRow, OrgSettings } from "../api/types";
import { ClosedMonthNote } from "../components/ClosedMonthNote";
import { DataTable, type Column } from "../components/DataTable";
import { ParamNotice, PeriodPicker } from "../components/PeriodPicker";
import { gpuLabel } from "../components/RunTable";
import { Async, Empty } from "../components/States";
import { SaveViewButton } from "../components/SavedViews";
import { Card, Change, PageHeader, Pager, Segmented, ShareBar } from "../components/ui";
import { formatDate, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { usePeriodLink } from "../lib/links";
import { DEFAULT_PERIOD, DEFAULT_SORT, isServerSort, parsePeriodParam, periodLabel, sortRows, toggleSort } from "../lib/urlState";

/** "people" (runs summed per launcher) exists only where an org admin turned it on (a privacy setting). */
export const KINDS = ["teams", "projects", "runs", "people"] as const;
/** Rows a page of a board; "Show all" asks for up to ALL_ROWS at once (more stays paged). */
export const PAGE_ROWS = 100;
export const ALL_ROWS = 1000;
export type Kind = (typeof KINDS)[number];

export function entityPath(kind: Kind, key: string): string {
  if (kind === "people") return `/runs?launched_by=${encodeURIComponent(key)}`;
  const base = kind === "teams" ? "/teams/" : kind === "projects" ? "/projects/" : "/runs/";
  return base + encodeURIComponent(key);
}

const CHANGE_KEYS = new Set(["change.cost_usd", "change.recoverable_usd"]);

/** Why a row has no change to show: its data starts inside the previous period (or later). */
export function noPreviousReason(dataFrom: string | null | undefined): string {
  return dataFrom ? `no complete previous period to compare with: its data starts ${formatDate(dataFrom)}` : "nothing to compare with";
}
const SORTABLE = ["runs", "gpu_hours", "cost_usd", "waste_usd", "recoverable_usd", "lost_usd", "waste_share", "mfu", "name", ...CHANGE_KEYS];

export function leaderboardValue(row: LeaderboardRow, key: string): unknown {
  if (key.startsWith("change.")) return row.change?.[key.slice(7) as keyof NonNullable<LeaderboardRow["change"]>] ?? null;
  return (row as unknown as Record<string, unknown>)[key];
}

/** The totals row: what every row of the board adds up to (every page), as finance totals it. */
function footers(kind: Kind, totals: Figures | undefined, count: number | undefined): Record<string, ReactNode> {
  if (!totals) return {};
  const rows = count ?? 0;
  const noun = kind === "teams" ? "team" : kind === "projects" ? "project" : kind === "people" ? "person" : "run";
  const nouns = kind === "people" ? "people" : `${noun}s`;
  return {
    name: <span data-testid="leaderboard-total-label">Total · {formatNumber(rows)} {rows === 1 ? noun : nouns}</span>,
    cost_usd: formatUsd(totals.cost_usd),
    recoverable_usd: <strong className="money-accent">{formatUsd(totals.recoverable_usd)}</strong>,
    lost_usd: formatUsd(totals.lost_usd),
    waste_usd: formatUsd(totals.waste_usd),
    waste_share: <span className="muted small">{formatPct(totals.waste_share)}</span>,
    mfu: formatPct(totals.mfu),
    runs: formatNumber(totals.runs),
    gpu_hours: formatGpuHours(totals.gpu_hours),
  };
}

function columns(kind: Kind, link: (path: string) => string, board?: Leaderboard): Column<LeaderboardRow>[] {
  const foot = footers(kind, board?.totals, board?.count);
  const cols: (Column<LeaderboardRow> | false)[] = [
    {
      key: "name",
      header: kind === "teams" ? "Team" : kind === "projects" ? "Project" : kind === "people" ? "Launched by" : "Run",
      render: (r) => (
        <div className="cell-main">
          <Link to={link(entityPath(kind, r.key))} tabIndex={-1} className="row-link">
            {r.name || r.key}
          </Link>
          {kind !== "teams" && kind !== "people" && <span className="cell-sub">{kind === "projects" ? (r.team_name ?? r.team) : `${r.team_name ?? r.team} / ${r.project_name ?? r.project}`}</span>}
        </div>
      ),
    },
    kind === "runs"
      ? { key: "cost_usd", header: "In period", title: "spend in the period (the days finance counts)", align: "right", render: (r) => formatUsd(r.cost_usd) }
      : { key: "cost_usd", header: "Spend", align: "right", render: (r) => formatUsd(r.cost_usd) },
    kind === "runs" && { key: "whole_cost_usd", header: "Whole run", title: "the whole run's cost, on every day it was billed", align: "right", render: (r) => <span className="muted">{formatUsd(r.whole_cost_usd)}</span> },
    { key: "recoverable_usd", header: "Recoverable", align: "right", render: (r) => <strong className="money-accent">{formatUsd(r.recoverable_usd)}</strong> },
    { key: "lost_usd", header: "Lost to failures", align: "right", render: (r) => formatUsd(r.lost_usd) },
    kind !== "runs" && { key: "change.cost_usd", header: "Δ spend", title: "change in spend", align: "right", render: (r) => <Change value={r.change?.cost_usd} kind="usd" goodWhen="down" title={r.change ? undefined : noPreviousReason(r.data_from)} /> },
    kind !== "runs" && { key: "change.recoverable_usd", header: "Δ recoverable", title: "change in recoverable spend", align: "right", render: (r) => <Change value={r.change?.recoverable_usd} kind="usd" goodWhen="down" title={r.change ? undefined : noPreviousReason(r.data_from)} /> },
    { key: "waste_usd", header: "Waste", align: "right", render: (r) => formatUsd(r.waste_usd) },
    { key: "waste_share", header: "Waste share", render: (r) => <ShareBar value={r.waste_share} /> },
    { key: "mfu", header: "MFU", align: "right", render: (r) => formatPct(r.mfu) },
    kind === "runs" && { key: "gpu", header: "GPUs", render: (r) => <span className="nowrap">{gpuLabel(r)}</span> },
    kind !== "runs" && { key: "runs", header: "Runs", align: "right", render: (r) => formatNumber(r.runs) },
    { key: "gpu_hours", header: "GPU-hours", align: "right", priority: "low", render: (r) => formatGpuHours(r.gpu_hours) },
    // Node collectors' time that no run measured (the Fleet page): beside the run figures, never in them.
    kind !== "runs" && kind !== "people" && { key: "fleet.uninstrumented_usd", header: "Fleet: uninstrumented", title: "busy GPU time no run measured", align: "right", render: (r) => formatUsd(r.fleet?.uninstrumented_usd ?? 0) },
    kind !== "runs" && kind !== "people" && { key: "fleet.idle_held_usd", header: "Fleet: idle-held", title: "GPUs held without computing", align: "right", render: (r) => formatUsd(r.fleet?.idle_held_usd ?? 0) },
  ];
  return cols
    .filter((c): c is Column<LeaderboardRow> => !!c)
    .map((c) => ({ ...c, sortable: SORTABLE.includes(c.key), footer: board?.totals ? (foot[c.key] ?? null) : undefined }));
}

export function LeaderboardsPage() {
  const [params, setParams] = useSearchParams();
  const navigate = useNavigate();
  const kindParam = params.get("kind");
  const kind: Kind = (KINDS as readonly string[]).includes(kindParam ?? "") ? (kindParam as Kind) : "teams";
  // The people board is a privacy setting: its tab shows only where it is on (the API says 404 otherwise).
  const settings = useApi<OrgSettings>("settings");
  const peopleOn = settings.data?.people_leaderboard === true;
  const { period, invalid } = parsePeriodParam(params.get("period"));
  const { link } = usePeriodLink();
  const sortParam = params.get("sort") ?? "";
  const sort = SORTABLE.includes(sortParam.replace(/^-/, "")) ? sortParam : DEFAULT_SORT;

  const apiSort = isServerSort(sort) ? sort : DEFAULT_SORT;
  // Paged by the server: `?page=`, or every row (up to ALL_ROWS) with `?all=1`.
  const showAll = params.get("all") === "1";
  const pageParam = Number.parseInt(params.get("page") ?? "", 10);
  const page = !showAll && Number.isFinite(pageParam) && pageParam > 1 ? pageParam : 1;
  const size = showAll ? ALL_ROWS : PAGE_ROWS;
  const state = useApi<Leaderboard>(`leaderboards/${kind}?period=${encodeURIComponent(period)}&sort=${encodeURIComponent(apiSort)}&page=${page}&page_size=${size}`);
  const rows = useMemo(() => (state.data ? sortRows(state.data.rows, sort, leaderboardValue) : []), [state.data, sort]);
  const count = state.data?.count ?? rows.length;
  const pages = state.data?.pages ?? 1;
  const first = state.data ? ((state.data.page ?? 1) - 1) * (state.data.page_size ?? size) + 1 : 0;
  const last = first + rows.length - 1;

  const update = (patch: Record<string, string>) => {
    const next = new URLSearchParams(params);
    if (!("page" in patch)) next.delete("page");
    for (const [k, v] of Object.entries(patch)) {
      const isDefault = (k === "kind" && v === "teams") || (k === "period" && v === DEFAULT_PERIOD) || (k === "sort" && v === DEFAULT_SORT);
      if (isDefault || !v) next.delete(k);
      else next.set(k, v);
    }
    setParams(next);
  };

  return (
    <div className="page">
      <PageHeader
        title="Leaderboards"
        subtitle={
          state.data
            ? `${periodLabel(period)} · ${formatDate(state.data.period.start)} – ${formatDate(state.data.period.end)}${state.data.rows.some((r) => r.change) ? `, compared with ${formatDate(state.data.previous.start)} – ${formatDate(state.data.previous.end)}` : " · no complete previous period to compare with"}`
            : "Ranked by the spend you could win back"
        }
        actions={
          <>
            <PeriodPicker value={period} onChange={(p) => update({ period: p })} />
            <SaveViewButton />
          </>
        }
      />
      <ParamNotice name="period" value={invalid} shown="the last 30 days" />
      <ClosedMonthNote note={state.data?.closed_month} />
      <Card
        title={
          <Segmented
            label="Leaderboard"
            value={kind}
            options={[
              { value: "teams", label: "Teams" },
              { value: "projects", label: "Projects" },
              { value: "runs", label: "Runs" },
              ...(peopleOn || kind === "people" ? [{ value: "people", label: "People" }] : []),
            ]}
            onChange={(k) => update({ kind: k })}
          />
        }
        actions={
          <span className="card-links">
            <span className="muted small" data-testid="leaderboard-count">
              {state.data ? (rows.length < count ? `${formatNumber(rows.length)} of ${formatNumber(count)} ${kind}` : `${formatNumber(count)} ${kind}`) : ""}
            </span>
            <a className="btn btn-small" href={apiUrl(`leaderboards/${kind}.csv?period=${encodeURIComponent(period)}&sort=${encodeURIComponent(apiSort)}`)} download data-testid="leaderboard-csv">
              Download CSV
            </a>
          </span>
        }
      >
        <Async state={state} loadingRows={8} isEmpty={(d) => d.rows.length === 0} empty={<Empty title={`No ${kind} with spend in this period`}>Try a longer period.</Empty>}>
          {() => (
            <>
            <DataTable
              caption={`${kind} leaderboard`}
              testId={`leaderboard-${kind}`}
              columns={columns(kind, link, state.data)}
              rows={rows}
              rowKey={(r) => r.key}
              sort={sort}
              onSort={(key) => update({ sort: toggleSort(sort, key) })}
              onOpen={(r) => navigate(link(entityPath(kind, r.key)))}
            />
            {kind === "people" && state.data?.unattributed && state.data.unattributed.runs > 0 && (
              <p className="muted small" data-testid="people-unattributed">
                Not in the board: {formatNumber(state.data.unattributed.runs)} run{state.data.unattributed.runs === 1 ? "" : "s"} whose agent did not say who launched them ({formatUsd(state.data.unattributed.cost_usd)} spend, {formatUsd(state.data.unattributed.recoverable_usd)} recoverable).
              </p>
            )}
            {(rows.length < count || showAll) && (
              <Pager
                first={first}
                last={last}
                count={count}
                page={page}
                pages={pages}
                testId="leaderboard-pager"
                shownTestId="leaderboard-shown"
                hideButtons={showAll}
                onPage={(p) => update({ page: String(p) })}
                extra={
                  <>
                    {!showAll && count <= ALL_ROWS && (
                      <button type="button" className="btn btn-small" onClick={() => update({ all: "1" })} data-testid="leaderboard-show-all">
                        Show all {formatNumber(count)}
                      </button>
                    )}
                    {showAll && (
                      <button type="button" className="btn btn-small" onClick={() => update({ all: "" })}>
                        Show {PAGE_ROWS} a page
                      </button>
                    )}
                  </>
                }
              />
            )}
            </>
          )}
        </Async>
      </Card>
    </div>
  );
}
