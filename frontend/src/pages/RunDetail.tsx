import { useMemo, useState } from "react";
import { Link, useParams } from "react-router";

import { useApi } from "../api/hooks";
import type { ApiError } from "../api/client";
import type { Analysis, AnalysisError, BaselineComparison, Phase, RankFigure, RunDetail, RunDetailWithBaseline, RunJobRef, RunMeta, Series, Straggler } from "../api/types";
import { DataTable, ScrollBox, type Column } from "../components/DataTable";
import { EChart } from "../components/EChart";
import { Explain, type ExplainSource } from "../components/Explain";
import { gpuLabel } from "../components/RunTable";
import { Async, Empty, ErrorState } from "../components/States";
import { Card, CategoryBar, PageHeader, Stat, StatusBadge } from "../components/ui";
import { CATEGORIES, CATEGORY_COLOR, CATEGORY_LABEL, type Category } from "../lib/categories";
import { largestRemainder } from "../lib/footing";
import { elapsedLabel, hasValues, memoryOption, mfuUtilOption, rankOption, stepTimeOption, type ChartHighlight } from "../lib/charts";
import {
  formatBytes,
  formatDateTime,
  formatDuration,
  formatGpuHours,
  formatNsAsMs,
  formatNumber,
  formatPct,
  formatShare,
  formatUsd,
  formatUsdPerGpuHour,
  formatUsdRange,
  gpuHoursDigits,
  isNum,
  plainWords,
  tierLabel,
} from "../lib/format";
import { jobPath } from "../lib/jobs";
import { usePeriodLink } from "../lib/links";
import { sortRows, toggleSort } from "../lib/urlState";
import { useChartPalette } from "../lib/useChartPalette";
import { BaselineCard } from "./run/Baseline";
import { BreakdownTable } from "./run/Breakdown";
import { evidenceLabel } from "./run/evidence";
import { DataQualityCard, DataQualityNotice } from "./run/DataQuality";
import { Headline } from "./run/Headline";
import { runMoney, runUsdPerGpuHour } from "./run/money";
import { Recommendations } from "./run/Recommendations";

function stored(field: string, value: unknown, unit: string, formula: string, inputs: Record<string, unknown> = {}): ExplainSource {
  return { value, unit, formula: `${field} = ${formula}`, inputs };
}

function t0Ns(run: RunMeta, series: Series | null): number {
  const iso = run.allocation_start ?? run.started_at;
  const ms = iso ? Date.parse(iso) : NaN;
  if (Number.isFinite(ms)) return ms * 1e6;
  return series?.t_start_ns[0] ?? 0;
}

/** The run's time as every page uses it: its billed span (from allocation_start). */
function runDuration(run: RunMeta): number | null {
  const start = run.billed_from ?? run.allocation_start ?? run.started_at;
  const end = run.billed_to ?? run.finished_at ?? run.last_seen_at;
  if (!start || !end) return null;
  return (Date.parse(end) - Date.parse(start)) / 1000;
}

export function RunDetailPage() {
  const { id = "" } = useParams();
  return <RunDetailLoader key={id} id={id} />;
}

function RunDetailLoader({ id }: { id: string }) {
  const state = useApi<RunDetail>(`runs/${encodeURIComponent(id)}`);
  if (state.error) return <RunNotFound error={state.error} onRetry={state.reload} />;
  return (
    <div className="page">
      <Async state={state} loadingRows={8}>
        {(d) => <RunView detail={d} />}
      </Async>
    </div>
  );
}

/** A run that is not there (or not yours to see) still leaves a way back. */
function RunNotFound({ error, onRetry }: { error: ApiError; onRetry: () => void }) {
  const { link } = usePeriodLink();
  return (
    <div className="page">
      <ErrorState error={error} onRetry={onRetry} />
      <nav className="card-links state-links" aria-label="Ways back">
        <Link to={link("/runs")}>← All runs</Link>
        <Link to={link("/leaderboards?kind=runs")}>Runs leaderboard</Link>
        <Link to={link("/")}>Overview</Link>
      </nav>
    </div>
  );
}

const retryFmt = new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZone: "UTC" });

/** "failed 2 times; tries again at Nov 30, 22:17 UTC" (or: no more tries until new telemetry). */
function retryWords(e: AnalysisError): string {
  const times = `failed ${e.failures === 1 ? "once" : `${formatNumber(e.failures)} times`}`;
  if (!e.retry_at) return `${times}; it is tried again when new telemetry arrives`;
  const at = Date.parse(e.retry_at);
  return `${times}; it is tried again ${at <= Date.now() ? "shortly" : `at ${retryFmt.format(new Date(at))} UTC`}`;
}

export function AnalysisFailed({ error }: { error: AnalysisError }) {
  return (
    <Card>
      <div className="state state-error" role="alert" data-testid="analysis-failed">
        <div className="state-icon" aria-hidden="true">
          !
        </div>
        <div className="state-title">The analysis of this run failed</div>
        <div className="state-body">
          Its telemetry is stored, but the analysis could not be completed: <strong>{error.message}</strong>. It has {retryWords(error)}. No figures are shown
          until an analysis succeeds.
        </div>
      </div>
    </Card>
  );
}

export function ReanalysisFailed({ error, analysedAt }: { error: AnalysisError; analysedAt: string }) {
  return (
    <div className="notice notice-bad" role="status" data-testid="reanalysis-failed">
      The latest re-analysis of this run failed ({error.message}); it has {retryWords(error)}. The figures below are from the analysis of {formatDateTime(analysedAt)} and do not include the
      telemetry that arrived since.
    </div>
  );
}

function RunView({ detail }: { detail: RunDetail }) {
  const { run, analysis, series, phases } = detail;
  const duration = runDuration(run);
  const { link } = usePeriodLink();
  const failure = detail.analysis_error ?? analysis?.analysis_error ?? null;
  const billedFrom = run.billed_from ?? run.allocation_start;
  return (
    <>
      <PageHeader
        crumbs={[
          { to: link(`/teams/${encodeURIComponent(run.team)}`), label: run.team_name ?? run.team },
          { to: link(`/projects/${encodeURIComponent(run.project)}`), label: run.project_name ?? run.project },
        ]}
        title={
          <span className="title-with-badge">
            {run.name || run.id}
            <StatusBadge status={run.status} />
          </span>
        }
        subtitle={
          <span className="meta-line">
            <span>{gpuLabel(run)}</span>
            {run.dtype && <span>{run.dtype}</span>}
            <span>
              {run.world_size} rank{run.world_size === 1 ? "" : "s"} on {run.nodes} node{run.nodes === 1 ? "" : "s"}
            </span>
            {(run.provider || run.region) && <span>{[run.provider, run.region].filter(Boolean).join(" · ")}</span>}
            <span>{tierLabel(run.pricing_tier)}</span>
            <span title="The run's time everywhere in PhantomHub: from its GPUs' allocation to the end of its billed time">billed from {formatDateTime(billedFrom)}</span>
            {duration !== null && <span>{formatDuration(duration)} billed</span>}
            {run.tags.map((t) => (
              <span key={t} className="tag">
                {t}
              </span>
            ))}
          </span>
        }
      />
      {run.job && <RunJobLine job={run.job} />}
      {analysis && failure && <ReanalysisFailed error={failure} analysedAt={analysis.analysed_at} />}
      {analysis ? (
        <AnalysisView run={run} analysis={analysis} series={series} phases={phases} baseline={(detail as RunDetailWithBaseline).baseline} />
      ) : failure || detail.analysis_status === "failed" ? (
        <AnalysisFailed error={failure ?? { message: "the analysis failed", failures: 1, retry_at: null }} />
      ) : (
        <Card>
          <Empty title="Analysis pending">The run's telemetry is stored; its analysis appears here within a minute.</Empty>
        </Card>
      )}
      <BaselineCard baseline={(detail as RunDetailWithBaseline).baseline} />
      <RunFacts run={run} />
    </>
  );
}

/** "Attempt 2 of 3 of job torchelastic/3f2a…": the run's place in its job, linking to the job. */
export function RunJobLine({ job }: { job: RunJobRef }) {
  const { link } = usePeriodLink();
  return (
    <p className="callout job-line" data-testid="run-job">
      <span>
        Attempt {formatNumber(job.index)} of {formatNumber(job.attempts_total)} of job{" "}
        <Link to={link(jobPath(job.id))} className="mono">
          {job.key}
        </Link>
      </span>
      <Link to={link(jobPath(job.id))} className="small">
        what failures cost this job →
      </Link>
    </p>
  );
}

function AnalysisView({ run, analysis: a, series, phases, baseline }: { run: RunMeta; analysis: Analysis; series: Series | null; phases: Phase[]; baseline?: BaselineComparison | null }) {
  const ex = a.explain ?? {};
  const money = runMoney(a);
  const usd = (v: number) => formatUsd(v, { digits: money.digits });
  const wasteShare = money.cost > 0 ? money.waste / money.cost : null;
  const perGpuHour = runUsdPerGpuHour(a);
  const gap = isNum(a.gpu_util_pct) && isNum(a.mfu) ? a.gpu_util_pct / 100 - a.mfu : null;
  const t0 = t0Ns(run, series);
  const [highlighted, setHighlighted] = useState<Category | null>(null);
  const highlight = useMemo(() => stretchHighlight(a, highlighted), [a, highlighted]);
  const canHighlight = !!series && series.t_start_ns.length > 0;
  const claimed = a.recommendations.reduce((sum, r) => sum + (isNum(r.saving_usd) ? r.saving_usd : 0), 0);
  const idleParts = a.idle.filter((i) => i.gpu_seconds > 0);
  const idleUsd = idleDollars(idleParts, money.tiny ? money.usd.idle : null, money.digits);
  const onHighlight = (c: Category | null) => {
    setHighlighted(c);
    if (c) document.getElementById("step-time")?.scrollIntoView?.({ behavior: "smooth", block: "center" });
  };
  return (
    <>
      {!a.complete && <div className="notice">The analysis is catching up with newly arrived telemetry; figures may still move.</div>}
      <DataQualityNotice a={a} />
      <div className="stats" data-testid="run-stats">
        <Stat
          label="Cost"
          testId="run-cost"
          value={usd(money.cost)}
          explain={<Explain label="cost" entry={ex.cost_usd} shown={money.tiny ? money.cost : undefined} />}
          sub={isNum(perGpuHour) ? formatUsdPerGpuHour(perGpuHour) : formatGpuHours(a.gpu_hours)}
        />
        <Stat
          label="Recoverable"
          tone="accent"
          testId="run-recoverable"
          value={formatUsd(a.recoverable_usd)}
          explain={<Explain label="recoverable spend" entry={ex.recoverable_usd} />}
          sub={
            <>
              <span data-testid="run-recoverable-range">range {formatUsdRange(a.recoverable_low_usd, a.recoverable_high_usd)}</span>
              {a.cost_usd > 0 && <> · {formatPct(a.recoverable_usd / a.cost_usd)} of cost</>}
            </>
          }
        />
        <Stat label="Waste" testId="run-waste" value={usd(money.waste)} explain={<Explain label="waste" entry={ex.waste_usd} shown={money.tiny ? money.waste : undefined} />} sub={`${formatPct(wasteShare)} of cost`} />
        <Stat label="GPU-hours" testId="run-gpu-hours" value={formatNumber(a.gpu_hours, gpuHoursDigits(a.gpu_hours))} unit="GPU-h" explain={<Explain label="billed GPU time" entry={ex.billed_gpu_seconds} />} sub={a.unpriced_gpu_seconds > 0 ? `${formatGpuHours(a.unpriced_gpu_seconds / 3600)} unpriced` : `${formatNumber(a.gpu_seconds, 0)} GPU-s billed`} />
        <Stat label="MFU" testId="run-mfu" value={formatShare(a.mfu)} explain={<Explain label="MFU" entry={ex.mfu} />} sub={`target ${formatPct(a.target_mfu, 0)}${a.peak_known ? "" : " · peak unknown"}`} />
        <Stat
          label="GPU utilization"
          value={isNum(a.gpu_util_pct) ? `${a.gpu_util_pct.toFixed(1)}%` : "–"}
          explain={<Explain label="GPU utilization" source={stored("analysis.gpu_util_pct", a.gpu_util_pct, "%", "mean of the GPU utilization samples (nvidia-smi / NVML) over the run", { hosts_with_samples: a.host.hosts.filter((h) => h.samples > 0).length })} />}
          sub={gap !== null ? `${formatPct(gap)} busy but not working` : "no GPU samples"}
        />
      </div>
      <Headline a={a} money={money} baseline={baseline} />

      <Card title="Waste breakdown" id="breakdown" actions={<span className="muted small">every billed GPU-second in exactly one category · recoverable only where evidence shows a better run</span>}>
        <CategoryBar usd={money.usd} showLegend={false} height={20} />
        <div className="breakdown-layout">
          <ScrollBox label="Waste breakdown" testId="breakdown">
            <BreakdownTable a={a} money={money} t0Ns={t0} highlighted={highlighted} onHighlight={canHighlight ? onHighlight : undefined} />
          </ScrollBox>
          <div>
            <h3 className="sub-title">Idle by cause</h3>
            {a.idle.some((i) => i.gpu_seconds > 0) ? (
              <ul className="kv-list">
                {a.idle
                  .filter((i) => i.gpu_seconds > 0)
                  .map((i, n) => (
                    <li key={i.label} data-idle={i.label} className="kv-wrap">
                      <span>{idleLabel(i.label)}</span>
                      <span className="muted">{formatGpuHours(i.gpu_seconds / 3600)}</span>
                      <span>{usd(idleUsd[n])}</span>
                      {i.evidence && i.evidence.kind !== "none" && isNum(i.recoverable_cents) && i.recoverable_cents > 0 && (
                        <span className="kv-sub muted small" title={plainWords(i.evidence.summary)}>
                          {formatUsd(i.recoverable_cents / 100)} recoverable against the {evidenceLabel(i.evidence.kind)}
                        </span>
                      )}
                    </li>
                  ))}
              </ul>
            ) : (
              <p className="muted">No idle time: a step was running for all of the billed time.</p>
            )}
            {a.stragglers.length > 0 && (
              <p className="muted small">
                Exposed communication includes the other ranks' wait for {a.stragglers.length === 1 ? "a straggler" : `${a.stragglers.length} stragglers`}: see Per rank.
              </p>
            )}
          </div>
        </div>
      </Card>
      <Card
        title="Recommendations"
        id="recommendations"
        actions={
          <span className="muted small">
            {a.recommendations.length} found{claimed > 0 ? ` · savings add up to ${formatUsd(claimed)} of ${formatUsd(a.recoverable_usd)} recoverable, no dollar counted twice` : ""}
          </span>
        }
      >
        {a.recommendations.length ? (
          <Recommendations
            items={a.recommendations}
            recoverable={Object.fromEntries(CATEGORIES.map((c) => [c, a.categories[c].recoverable_usd]))}
            notes={a.stragglers.length ? { STRAGGLER: a.stragglers.map((s) => `${stragglerWho(a, s.rank, s.host)}: ${stragglerAdvice(a, s.rank, s.host)}`).join(" ") } : undefined}
          />
        ) : (
          <Empty title="Nothing to fix">No rule found recoverable waste worth acting on.</Empty>
        )}
      </Card>

      <SeriesCharts run={run} analysis={a} series={series} phases={phases} highlight={highlight} onClearHighlight={() => setHighlighted(null)} />
      <Ranks analysis={a} />
      <div className="grid grid-1-1">
        <PhasesCard phases={phases} t0={t0Ns(run, series)} />
        <HostsCard analysis={a} />
      </div>
      <DataQualityCard a={a} />
    </>
  );
}

/** The ranks that ran on a host, in rank order (their order on the node is the usual GPU order). */
function ranksOn(a: Analysis, host: string): number[] {
  return a.ranks.filter((r) => r.host === host).map((r) => r.rank).sort((x, y) => x - y);
}

/** "Rank 3 (GPU 3 of node-0)": the rank and the GPU it most likely drove, by its place on the node. */
export function stragglerWho(a: Analysis, rank: number, host: string): string {
  const local = ranksOn(a, host).indexOf(rank);
  return local >= 0 && host ? `Rank ${rank} (GPU ${local} of ${host})` : `Rank ${rank}${host ? ` on ${host}` : ""}`;
}

/**
 * A straggler's cost as the page writes it, rounded once: the STRAGGLER recommendation's saving for
 * this rank where there is one (the same dollars on both lines, never $71.09 here and $71.08
 * there), with the others' wait and its own excess footed to it by largest remainder.
 */
export function stragglerCost(a: Analysis, s: Straggler): { total: number; wait: number; own: number } {
  const rec = a.recommendations.find((r) => r.code === "STRAGGLER" && new RegExp(`^Rank ${s.rank}\\b`).test(r.title) && isNum(r.saving_usd));
  const exact = s.caused_wait_usd + ownExcessUsd(s);
  const total = rec && isNum(rec.saving_usd) ? rec.saving_usd : Math.round(exact * 100) / 100;
  const [wait, own] = largestRemainder([s.caused_wait_usd, ownExcessUsd(s)], total, 2);
  return { total, wait, own };
}

/** Dollars of each idle cause as shown: cents, or (a run under a dime) the idle dollars split by GPU time and footed. */
function idleDollars(parts: Analysis["idle"], tinyIdleUsd: number | null, digits: number): number[] {
  if (tinyIdleUsd === null) return parts.map((i) => i.usd_cents / 100);
  const seconds = parts.reduce((sum, i) => sum + i.gpu_seconds, 0);
  return largestRemainder(parts.map((i) => (seconds > 0 ? (tinyIdleUsd * i.gpu_seconds) / seconds : 0)), tinyIdleUsd, digits);
}

/** A straggler's own time beyond the other ranks, in dollars (0 in analyses stored before it was kept). */
export function ownExcessUsd(s: Straggler): number {
  return Object.values(s.own_excess_usd ?? {}).reduce((sum, usd) => sum + usd, 0);
}

/**
 * Where to look for a slow rank. When every rank ran on the same node, the node is not what sets
 * this rank apart: its GPU or its share of the work is. Rank 0 lags for reasons of its own.
 */
export function stragglerAdvice(a: Analysis, rank: number, host: string): string {
  const onHost = ranksOn(a, host);
  const local = onHost.indexOf(rank);
  const gpu = local >= 0 ? `GPU ${local}` : "its GPU";
  const allHere = a.ranks.length > 1 && onHost.length === a.ranks.length;
  const parts: string[] = [];
  if (allHere) parts.push(`All ${a.ranks.length} ranks ran on ${host}, so the node itself is not the cause: look at rank ${rank} and ${gpu}.`);
  if (rank === 0) {
    parts.push("Rank 0 usually lags because it alone does extra work: logging and metrics, checkpoint saving, evaluation, or progress bars. Move that work off the training step, spread it over the ranks, or run it asynchronously.");
  } else {
    parts.push(`Check ${gpu} for throttling (nvidia-smi -q -d CLOCK,PERFORMANCE -i ${local >= 0 ? local : "<gpu>"}) and whether this rank gets more work per step (longer sequences, a bigger data shard).`);
  }
  return parts.join(" ");
}

const IDLE_LABEL: Record<string, string> = { startup: "start-up", teardown: "tear-down", gap: "gaps between steps", no_steps: "no steps reported" };

function idleLabel(label: string): string {
  if (label.startsWith("phase:")) return `phase · ${label.slice(6)}`;
  return IDLE_LABEL[label] ?? label.replace(/_/g, " ");
}

/** The highlighted category's best stretch, as the step-time chart draws it. */
function stretchHighlight(a: Analysis, category: Category | null): ChartHighlight | null {
  const w = category ? a.categories[category]?.evidence?.window : null;
  if (!category || !w) return null;
  return { label: `${CATEGORY_LABEL[category]}: best stretch`, t_start_ns: w.t_start_ns, t_end_ns: w.t_end_ns, color: CATEGORY_COLOR[category] };
}

function SeriesCharts({ run, analysis: a, series, phases, highlight, onClearHighlight }: { run: RunMeta; analysis: Analysis; series: Series | null; phases: Phase[]; highlight: ChartHighlight | null; onClearHighlight: () => void }) {
  const palette = useChartPalette();
  const t0 = t0Ns(run, series);
  const options = useMemo(
    () =>
      series
        ? {
            step: stepTimeOption(series, phases, t0, palette, highlight),
            mfu: mfuUtilOption(series, a.target_mfu, t0, palette),
            memory: memoryOption(series, a.memory.capacity_bytes, t0, palette),
          }
        : null,
    [series, phases, t0, palette, a.target_mfu, a.memory.capacity_bytes, highlight],
  );
  const ex = a.explain ?? {};
  const m = a.memory;
  if (!series || !options || series.t_start_ns.length === 0) {
    return (
      <Card title="Over the run">
        <Empty title="No windowed series stored for this run" />
      </Card>
    );
  }
  const hasMemory = hasValues(series.mem_reserved_bytes) || hasValues(series.mem_allocated_bytes) || hasValues(series.mem_peak_bytes);
  return (
    <>
      <Card
        title="Step-time decomposition"
        id="step-time"
        actions={
          highlight ? (
            <span className="small chart-highlight" data-testid="chart-highlight">
              highlighted: {highlight.label.toLowerCase()}, {elapsedLabel((highlight.t_start_ns - t0) / 1e9)}–{elapsedLabel((highlight.t_end_ns - t0) / 1e9)}
              <button type="button" className="btn btn-ghost btn-small" onClick={onClearHighlight}>
                Clear
              </button>
            </span>
          ) : (
            <span className="muted small">mean per step in each {formatNsAsMs(series.width_ns)} window{phases.length ? " · shaded: phases" : ""}</span>
          )
        }
      >
        <EChart option={options.step} height={280} label={highlight ? `Step time by stage over the run, with ${highlight.label.toLowerCase()} highlighted` : "Step time by stage over the run"} />
      </Card>
      <div className="grid grid-1-1">
        <Card
          title={
            <>
              MFU beside GPU utilization <Explain label="MFU" entry={ex.mfu} /> <Explain label="MFU over step time" entry={ex.mfu_step_time} />
            </>
          }
          id="mfu"
          actions={<span className="muted small">{hasValues(series.gpu_util_pct) ? "the gap is busy but not working" : "no GPU utilization samples"}</span>}
        >
          <EChart option={options.mfu} height={240} label="MFU and GPU utilization over the run" />
        </Card>
        <Card title="Memory" id="memory">
          {hasMemory ? <EChart option={options.memory} height={190} label="GPU memory over the run" /> : <Empty title="No allocator statistics reported" />}
          <ul className="kv-list kv-grid">
            <li>
              <span className="muted">Peak</span>
              <span>
                {formatBytes(m.peak_bytes_max)}
                {isNum(m.peak_fraction_of_capacity) && <span className="muted"> ({formatPct(m.peak_fraction_of_capacity)} of {formatBytes(m.capacity_bytes)})</span>}
                <Explain label="peak memory" source={stored("memory.peak_bytes_max", m.peak_bytes_max, "bytes", "max over ranks and steps of torch.cuda.max_memory_allocated at step end", { peak_rank: m.peak_rank, capacity_bytes: m.capacity_bytes, headroom_bytes: m.headroom_bytes })} />
              </span>
            </li>
            <li>
              <span className="muted">Fragmentation</span>
              <span>
                {formatPct(m.fragmentation_mean)}
                <Explain label="fragmentation" source={stored("memory.fragmentation_mean", m.fragmentation_mean, "ratio", "mean over steps of 1 − allocated / reserved", { allocated_bytes_max: m.allocated_bytes_max, reserved_bytes_max: m.reserved_bytes_max })} />
              </span>
            </li>
            <li>
              <span className="muted">Allocator retries</span>
              <span>
                {formatNumber(m.alloc_retries_total)}
                {isNum(m.alloc_retries_per_1k_steps) && <span className="muted"> ({m.alloc_retries_per_1k_steps.toFixed(2)} / 1k steps)</span>}
              </span>
            </li>
            <li>
              <span className="muted">Out-of-memory errors</span>
              <span>{formatNumber(m.oom_count)}</span>
            </li>
          </ul>
        </Card>
      </div>
    </>
  );
}

const RANK_SORT: Record<string, (r: RankFigure) => number | null> = {
  rank: (r) => r.rank,
  steps: (r) => r.steps,
  step: (r) => r.step_ns_mean,
  compute: (r) => r.compute_ns_mean,
  data: (r) => r.data_ns_mean,
  comm: (r) => r.comm_ns_mean,
  hostov: (r) => r.host_ns_mean,
  slow: (r) => r.slow_step_share,
  caused: (r) => r.caused_wait_gpu_seconds,
  mem: (r) => r.mem_peak_bytes,
};

function Ranks({ analysis: a }: { analysis: Analysis }) {
  const palette = useChartPalette();
  const [sort, setSort] = useState("rank");
  const rows = useMemo(() => sortRows(a.ranks, sort, (r, key) => RANK_SORT[key]?.(r) ?? null), [a.ranks, sort]);
  const stragglers = useMemo(() => new Set(a.stragglers.map((s) => s.rank)), [a.stragglers]);
  const option = useMemo(() => rankOption(a.ranks, stragglers, palette), [a.ranks, stragglers, palette]);
  const columns: Column<RankFigure>[] = [
    {
      key: "rank",
      header: "Rank",
      render: (r) => (
        <span className="nowrap">
          {r.rank}
          {stragglers.has(r.rank) && <span className="badge badge-bad badge-inline">straggler</span>}
        </span>
      ),
    },
    { key: "host", header: "Host", render: (r) => <span className="nowrap">{r.host}</span> },
    { key: "steps", header: "Steps", align: "right", render: (r) => formatNumber(r.steps) },
    { key: "step", header: "Step", align: "right", render: (r) => formatNsAsMs(r.step_ns_mean) },
    { key: "compute", header: "Compute", align: "right", render: (r) => formatNsAsMs(r.compute_ns_mean) },
    { key: "data", header: "Data wait", align: "right", render: (r) => formatNsAsMs(r.data_ns_mean) },
    { key: "comm", header: "Comm wait", align: "right", render: (r) => formatNsAsMs(r.comm_ns_mean) },
    { key: "hostov", header: "Host", align: "right", render: (r) => formatNsAsMs(r.host_ns_mean) },
    { key: "slow", header: "Slow steps", align: "right", render: (r) => formatPct(r.slow_step_share) },
    { key: "caused", header: "Caused wait", align: "right", render: (r) => (r.caused_wait_gpu_seconds > 0 ? formatGpuHours(r.caused_wait_gpu_seconds / 3600) : "–") },
    { key: "mem", header: "Peak mem", align: "right", render: (r) => formatBytes(r.mem_peak_bytes) },
  ];
  if (a.ranks.length === 0) return null;
  return (
    <Card title="Per rank" id="ranks" actions={<span className="muted small">mean per step · {a.stragglers.length ? `${a.stragglers.length} straggler${a.stragglers.length === 1 ? "" : "s"}` : "no stragglers"}</span>}>
      {a.stragglers.map((s) => {
        const cost = stragglerCost(a, s);
        return (
        <div key={s.rank} className="callout callout-bad callout-block" data-testid="straggler">
          <strong>{stragglerWho(a, s.rank, s.host)} is a straggler</strong>
          : it arrived last in {formatNumber(s.blamed_steps)} of {formatNumber(s.aligned_steps)} aligned steps ({formatPct(s.slow_step_share)} slow), {formatNsAsMs(s.lead_ns_mean ?? 0)} a step behind the other ranks. The others waited {formatGpuHours(s.caused_wait_gpu_seconds / 3600)} for it ({formatUsd(cost.wait)}) and it spent {formatGpuHours((s.own_excess_gpu_seconds ?? 0) / 3600)} more than they did ({formatUsd(cost.own)}): <strong data-testid="straggler-cost">{formatUsd(cost.total)}</strong> that fixing it saves
          <Explain
            label="straggler cost"
            source={stored("stragglers[].caused_wait_usd + own_excess_usd", cost.total, "USD", "the other ranks' exposed-communication dollars in the steps this rank arrived last, plus its own data, compute and host time beyond the other ranks' median per step, each at its category's price", {
              caused_wait_gpu_seconds: s.caused_wait_gpu_seconds,
              caused_wait_usd: s.caused_wait_usd,
              blamed_steps: s.blamed_steps,
              lead_ns_mean: s.lead_ns_mean ?? 0,
              own_excess_gpu_seconds: s.own_excess_gpu_seconds ?? 0,
              own_excess_usd: ownExcessUsd(s),
              compute_ns_mean: s.compute_ns_mean,
              median_rank_compute_ns_mean: s.median_rank_compute_ns_mean,
              data_ns_mean: s.data_ns_mean,
              median_rank_data_ns_mean: s.median_rank_data_ns_mean,
            })}
          />
          <div className="small straggler-causes">{stragglerAdvice(a, s.rank, s.host)}</div>
        </div>
        );
      })}
      {a.ranks.length > 1 && <EChart option={option} height={220} label="Cost by category for each rank" />}
      <DataTable
        caption="Per-rank figures"
        columns={columns.map((c) => ({ ...c, sortable: c.key in RANK_SORT }))}
        rows={rows}
        rowKey={(r) => String(r.rank)}
        dense
        testId="ranks-table"
        sort={sort}
        onSort={(key) => setSort((s) => toggleSort(s, key))}
      />
    </Card>
  );
}

function PhasesCard({ phases, t0 }: { phases: Phase[]; t0: number }) {
  return (
    <Card title="Phases" id="phases" actions={<span className="muted small">non-step time the agent reported</span>}>
      {phases.length === 0 ? (
        <Empty title="No phases reported">Evaluation and checkpoint phases show here when the agent reports them.</Empty>
      ) : (
        <DataTable
          caption="Phases"
          dense
          rows={phases}
          rowKey={(p) => `${p.name}-${p.rank}-${p.t_start_ns}`}
          columns={[
            { key: "name", header: "Phase", render: (p) => p.name },
            { key: "rank", header: "Rank", render: (p) => (p.rank === null ? "all" : String(p.rank)) },
            { key: "at", header: "At", align: "right", render: (p) => formatDuration((p.t_start_ns - t0) / 1e9) },
            { key: "dur", header: "Duration", align: "right", render: (p) => formatNsAsMs(p.dur_ns) },
          ]}
        />
      )}
    </Card>
  );
}

function HostsCard({ analysis: a }: { analysis: Analysis }) {
  const hosts = a.host.hosts;
  return (
    <Card title="Hosts" id="hosts" actions={<span className="muted small">CPU contention and host overhead</span>}>
      {hosts.length === 0 ? (
        <Empty title="No host data" />
      ) : (
        <DataTable
          caption="Hosts"
          dense
          rows={hosts}
          rowKey={(h) => h.host}
          columns={[
            {
              key: "host",
              header: "Host",
              render: (h) => (
                <span className="nowrap">
                  {h.host}
                  {h.contended && <span className="badge badge-warn badge-inline">contended</span>}
                </span>
              ),
            },
            { key: "ranks", header: "Ranks", render: (h) => (h.ranks.length > 4 ? `${h.ranks[0]}–${h.ranks[h.ranks.length - 1]}` : h.ranks.join(", ")) },
            { key: "util", header: "GPU util", align: "right", render: (h) => (isNum(h.gpu_util_pct_mean) ? `${h.gpu_util_pct_mean.toFixed(0)}%` : "–") },
            { key: "other", header: "Other CPU", align: "right", render: (h) => (isNum(h.cpu_other_pct_mean) ? `${h.cpu_other_pct_mean.toFixed(0)}%` : "–") },
            { key: "steal", header: "Steal", align: "right", render: (h) => (isNum(h.cpu_steal_pct_mean) ? `${h.cpu_steal_pct_mean.toFixed(1)}%` : "–") },
            { key: "hostov", header: "Host ovh.", title: "host overhead share of step time", align: "right", render: (h) => formatPct(h.host_overhead_share) },
          ]}
        />
      )}
    </Card>
  );
}

function RunFacts({ run }: { run: RunMeta }) {
  const { link } = usePeriodLink();
  const counters = run.ranks.filter((r) => Object.keys(r.counters).length > 0);
  return (
    <Card title="Run details" id="details">
      <dl className="facts">
        <div>
          <dt>Run id</dt>
          <dd className="mono">{run.id}</dd>
        </div>
        <div>
          <dt>Team / project</dt>
          <dd>
            <Link to={link(`/teams/${encodeURIComponent(run.team)}`)}>{run.team_name ?? run.team}</Link> / <Link to={link(`/projects/${encodeURIComponent(run.project)}`)}>{run.project_name ?? run.project}</Link>
          </dd>
        </div>
        {run.launched_by && (
          <div>
            <dt>Launched by</dt>
            <dd data-testid="run-launched-by">
              <Link to={link(`/runs?launched_by=${encodeURIComponent(run.launched_by)}`)} title="Every run this identity launched">
                {run.launched_by}
              </Link>
            </dd>
          </div>
        )}
        <div>
          <dt>Billed from (GPUs allocated)</dt>
          <dd>{formatDateTime(run.billed_from ?? run.allocation_start)}</dd>
        </div>
        <div>
          <dt>Billed to</dt>
          <dd>{formatDateTime(run.billed_to ?? run.finished_at ?? run.last_seen_at)}</dd>
        </div>
        <div>
          <dt>Finished</dt>
          <dd>{run.finished_at ? formatDateTime(run.finished_at) : `not yet · last seen ${formatDateTime(run.last_seen_at)}`}</dd>
        </div>
        {run.started_at && run.started_at !== run.allocation_start && (
          <div>
            <dt>Registered</dt>
            <dd title="When the agent reported the run's start (or the server first heard of it): not the billed time">{formatDateTime(run.started_at)}</dd>
          </div>
        )}
        <div>
          <dt>Ranks reporting</dt>
          <dd>
            {run.ranks.length} of {run.world_size}
          </dd>
        </div>
      </dl>
      {(Object.keys(run.config).length > 0 || Object.keys(run.environment).length > 0 || counters.length > 0) && (
        <details className="raw">
          <summary>Configuration, environment and agent counters</summary>
          <pre>{JSON.stringify({ config: run.config, environment: run.environment, counters: Object.fromEntries(counters.map((r) => [`rank ${r.rank}`, r.counters])) }, null, 2)}</pre>
        </details>
      )}
    </Card>
  );
}

