import { useMemo } from "react";
import { useNavigate, useSearchParams } from "react-router";

import { useApi } from "../api/hooks";
import type { Figures, Overview } from "../api/types";
import { ClosedMonthNote } from "../components/ClosedMonthNote";
import { EChart } from "../components/EChart";
import { ParamNotice, PeriodPicker } from "../components/PeriodPicker";
import { RunTable } from "../components/RunTable";
import { Async, Empty } from "../components/States";
import { Card, CategoryBar, Change, PageHeader, Stat } from "../components/ui";
import { byGpuOption, dailyOption } from "../lib/charts";
import { formatDate, formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { runsPath } from "../lib/links";
import { useChartPalette } from "../lib/useChartPalette";
import { DEFAULT_PERIOD, parsePeriodParam, periodLabel } from "../lib/urlState";

export function change(cur: Figures, prev: Figures | null | undefined, key: keyof Figures): number | null {
  if (!prev) return null;
  const a = cur[key];
  const b = prev[key];
  return typeof a === "number" && typeof b === "number" ? a - b : null;
}

/**
 * The period's headline figures; with `previous` (null: no complete previous period, whose first
 * day with data is `dataFrom`), each shows its change — or "no previous" and why.
 */
export function FigureCards({ totals, previous, dataFrom, testPrefix = "" }: { totals: Figures; previous?: Figures | null; dataFrom?: string | null; testPrefix?: string }) {
  const why = previous === null ? (dataFrom ? `no complete previous period: the data starts ${formatDate(dataFrom)}` : "nothing to compare with") : undefined;
  const delta = (key: keyof Figures, kind: "usd" | "pp", goodWhen: "up" | "down") =>
    previous === undefined ? undefined : <Change value={change(totals, previous, key)} kind={kind} goodWhen={goodWhen} title={why} />;
  return (
    <>
    <div className="stats">
      <Stat label="Spend" testId={`${testPrefix}stat-spend`} value={formatUsd(totals.cost_usd)} change={delta("cost_usd", "usd", "down")} sub={formatGpuHours(totals.gpu_hours)} />
      <Stat label="Recoverable spend" tone="accent" testId={`${testPrefix}stat-recoverable`} value={formatUsd(totals.recoverable_usd)} change={delta("recoverable_usd", "usd", "down")} sub={totals.cost_usd ? `${formatPct(totals.recoverable_usd / totals.cost_usd)} of spend` : undefined} />
      {totals.lost_usd !== undefined && (
        <Stat
          label="Lost to failures"
          tone="warn"
          testId={`${testPrefix}stat-lost`}
          value={formatUsd(totals.lost_usd)}
          change={delta("lost_usd", "usd", "down")}
          sub={totals.cost_usd ? `${formatPct(totals.lost_usd / totals.cost_usd)} of spend · rework, restarts, checkpoints` : "rework, restarts, checkpoints"}
        />
      )}
      <Stat label="Waste" testId={`${testPrefix}stat-waste`} value={formatUsd(totals.waste_usd)} change={delta("waste_share", "pp", "down")} sub={`${formatPct(totals.waste_share)} of spend`} />
      <Stat label="MFU" testId={`${testPrefix}stat-mfu`} value={formatPct(totals.mfu)} change={delta("mfu", "pp", "up")} sub="GPU-hour weighted" />
      <Stat label="Runs" testId={`${testPrefix}stat-runs`} value={formatNumber(totals.runs)} sub={previous ? `${formatNumber(previous.runs)} in the previous period` : undefined} />
    </div>
    {why && (
      <p className="period-note" data-testid={`${testPrefix}no-previous`}>
        No change shown: {why}, so the period before this one is not complete.
      </p>
    )}
    </>
  );
}

export function CategoryCard({ byCategory, title = "Where the spend went" }: { byCategory: Record<string, number>; title?: string }) {
  const total = Object.values(byCategory).reduce((s, v) => s + (v || 0), 0);
  return (
    <Card title={title}>
      {total > 0 ? <CategoryBar usd={byCategory} height={18} /> : <Empty title="No analysed spend in this period" />}
    </Card>
  );
}

/** Spend by day over the whole period; a click on a day opens the runs billed that day. */
export function DailyCard({ days, title = "Spend by day and category, with recoverable spend", runsOf }: { days: Overview["by_day"]; title?: string; runsOf?: { team?: string; project?: string } }) {
  const palette = useChartPalette();
  const navigate = useNavigate();
  const option = useMemo(() => dailyOption(days, palette), [days, palette]);
  const spent = days.some((d) => d.cost_usd > 0);
  return (
    <Card title={title} actions={<span className="muted small">{days.length} days · UTC</span>}>
      {spent ? (
        <EChart
          option={option}
          height={260}
          points={days.length}
          label={`${title}, ${days.length} days from ${formatDate(days[0].day)} to ${formatDate(days[days.length - 1].day)}`}
          onClick={(e) => {
            const d = days[e.dataIndex];
            if (d && d.cost_usd > 0) navigate(runsPath({ ...runsOf, from: d.day, to: d.day }));
          }}
        />
      ) : (
        <Empty title="No spend on any day of this period" />
      )}
    </Card>
  );
}

export function OverviewPage() {
  const [params, setParams] = useSearchParams();
  const { period, invalid } = parsePeriodParam(params.get("period"));
  const state = useApi<Overview>(`overview?period=${encodeURIComponent(period)}`);
  const palette = useChartPalette();
  const gpuOption = useMemo(() => (state.data ? byGpuOption(state.data.by_gpu, palette) : null), [state.data, palette]);

  return (
    <div className="page">
      <PageHeader
        title="Overview"
        subtitle={state.data ? `${periodLabel(period)} · ${formatDate(state.data.period.start)} – ${formatDate(state.data.period.end)}` : periodLabel(period)}
        actions={<PeriodPicker value={period} onChange={(p) => setParams(p === DEFAULT_PERIOD ? {} : { period: p })} />}
      />
      <ParamNotice name="period" value={invalid} shown="the last 30 days" />
      <Async state={state} loadingRows={6} isEmpty={(d) => d.totals.runs === 0} empty={<Empty title="No runs in this period">Runs appear here once the agent has sent telemetry and the analysis has run.</Empty>}>
        {(d) => (
          <>
            <ClosedMonthNote note={d.closed_month} />
            <FigureCards totals={d.totals} previous={d.previous_totals} dataFrom={d.data_from} />
            <div className="grid grid-2-1">
              <DailyCard days={d.by_day} />
              <CategoryCard byCategory={d.by_category} />
            </div>
            <div className="grid grid-2-1">
              <Card title="Worst offenders" actions={<span className="muted small">runs by recoverable spend in the period</span>}>
                {d.worst_runs.length > 0 ? <RunTable rows={d.worst_runs} compact caption="Runs with the most recoverable spend" testId="worst-runs" period /> : <Empty title="No analysed runs" />}
              </Card>
              <Card title="Spend by GPU model">
                {d.by_gpu.length > 0 && gpuOption ? <EChart option={gpuOption} height={Math.max(160, 40 + d.by_gpu.length * 34)} label="Spend and recoverable spend by GPU model" /> : <Empty title="No GPU spend" />}
              </Card>
            </div>
          </>
        )}
      </Async>
    </div>
  );
}
