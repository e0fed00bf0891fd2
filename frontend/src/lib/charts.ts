// ECharts options built from API data. Pure functions of (data, palette), so they are tested
// without a browser and every chart draws only what the API returned.
import type { DayFigures, Phase, RankFigure, Series } from "../api/types";
import { CATEGORIES, CATEGORY_COLOR, CATEGORY_LABEL } from "./categories";
import { formatBytes, formatMs, formatPct, formatSeconds, formatUsd, isNum } from "./format";
import type { ChartPalette } from "./theme";

type Option = Record<string, unknown>;

// ECharts measures text for layout itself, so it needs a real font stack (not "inherit").
export const CHART_FONT = 'Inter, ui-sans-serif, system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';

function base(p: ChartPalette): Option {
  return {
    animation: false,
    textStyle: { color: p.text, fontFamily: CHART_FONT },
    grid: { left: 8, right: 16, top: 36, bottom: 8, containLabel: true },
    tooltip: {
      trigger: "axis",
      backgroundColor: p.tooltipBg,
      borderColor: p.tooltipBorder,
      textStyle: { color: p.text, fontSize: 12 },
      confine: true,
    },
    // One line, paged where it does not fit (narrow screens), so it never covers the plot.
    legend: { type: "scroll", top: 0, left: 0, icon: "roundRect", itemWidth: 10, itemHeight: 10, textStyle: { color: p.muted, fontSize: 12 } },
  };
}

function valueAxis(p: ChartPalette, formatter: (v: number) => string, extra: Option = {}): Option {
  return {
    type: "value",
    axisLabel: { color: p.muted, formatter },
    splitLine: { lineStyle: { color: p.grid } },
    axisLine: { show: false },
    ...extra,
  };
}

/** Seconds since the start of the run as "0:00", "12:30", "1:02:03". */
export function elapsedLabel(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const mm = String(m).padStart(h ? 2 : 1, "0");
  return h ? `${h}:${mm}:${String(sec).padStart(2, "0")}` : `${mm}:${String(sec).padStart(2, "0")}`;
}

function elapsedAxis(p: ChartPalette): Option {
  return {
    type: "value",
    axisLabel: { color: p.muted, formatter: (v: number) => elapsedLabel(v), hideOverlap: true },
    axisLine: { lineStyle: { color: p.axis } },
    splitLine: { show: false },
    min: "dataMin",
    max: "dataMax",
  };
}

type Point = [number, number | null];

/**
 * Indices of the windows that measured something: with `perStep`, windows in which no step
 * started (steps = 0) carry no per-step figure and are left out rather than drawn as zero.
 */
export function measuredIndices(series: Series, column: readonly (number | null)[], perStep: boolean): number[] {
  const out: number[] = [];
  for (let i = 0; i < series.t_start_ns.length; i += 1) {
    if (perStep && series.steps && series.steps[i] === 0) continue;
    if (isNum(column[i])) out.push(i);
  }
  return out;
}

/**
 * [elapsed seconds, value] points at the given windows. Where the time between two measured
 * windows is far longer than usual (a hang, a checkpoint, the start-up), a null breaks the line so
 * the chart shows the gap instead of bridging it.
 */
export function gappedPoints(series: Series, indices: number[], value: (i: number) => number | null, t0Ns: number): Point[] {
  const times = indices.map((i) => (series.t_start_ns[i] - t0Ns) / 1e9);
  const deltas = times.slice(1).map((t, k) => t - times[k]).sort((a, b) => a - b);
  const typical = deltas.length ? deltas[Math.floor(deltas.length / 2)] : 0;
  const limit = Math.max((3 * series.width_ns) / 1e9, 4 * typical);
  const out: Point[] = [];
  indices.forEach((i, k) => {
    if (k > 0 && times[k] - times[k - 1] > limit) out.push([(times[k] + times[k - 1]) / 2, null]);
    out.push([times[k], value(i)]);
  });
  return out;
}

/** A column's measured points, scaled (e.g. ×100 for a fraction shown in %). */
export function pairs(series: Series, column: (number | null)[], t0Ns: number, scale = 1, perStep = true): Point[] {
  return gappedPoints(series, measuredIndices(series, column, perStep), (i) => (isNum(column[i]) ? column[i]! * scale : null), t0Ns);
}

export function hasValues(column: readonly (number | null | undefined)[] | undefined): boolean {
  return !!column && column.some((v) => isNum(v) && v !== 0);
}

/** A stretch of the run to highlight on the step-time chart (a category's evidence window). */
export interface ChartHighlight {
  label: string;
  t_start_ns: number;
  t_end_ns: number;
  color?: string;
}

/** Phases shaded faintly; a highlighted stretch drawn stronger and outlined, with its label. */
function markAreas(phases: Phase[], highlight: ChartHighlight | null, t0Ns: number, p: ChartPalette): Option | undefined {
  if (!phases.length && !highlight) return undefined;
  const data: Option[][] = phases.map((ph) => [{ name: ph.name, xAxis: (ph.t_start_ns - t0Ns) / 1e9 }, { xAxis: (ph.t_start_ns + ph.dur_ns - t0Ns) / 1e9 }]);
  if (highlight) {
    const color = highlight.color ?? p.accent;
    data.push([
      {
        name: highlight.label,
        xAxis: (highlight.t_start_ns - t0Ns) / 1e9,
        // A translucent fill (#rrggbbaa) under a solid outline; other colour forms fade as a whole.
        itemStyle: /^#[0-9a-f]{6}$/i.test(color)
          ? { color: `${color}38`, opacity: 1, borderColor: p.text, borderWidth: 1.5, borderType: "dashed" }
          : { color, opacity: 0.22, borderColor: p.text, borderWidth: 1.5, borderType: "dashed" },
        label: { color: p.text, fontSize: 11, fontWeight: 600, position: "insideTop" },
      },
      { xAxis: (highlight.t_end_ns - t0Ns) / 1e9 },
    ]);
  }
  return {
    silent: true,
    itemStyle: { color: p.accent, opacity: 0.07 },
    label: { color: p.muted, fontSize: 10, position: "insideTop" },
    data,
  };
}

export const STEP_STAGES = [
  { key: "data_ms", label: "Data wait", color: CATEGORY_COLOR.data_stall },
  { key: "forward_ms", label: "Forward", color: "#2f9e6e" },
  { key: "backward_ms", label: "Backward", color: "#5cbf8f" },
  { key: "optimizer_ms", label: "Optimizer", color: "#9ad6b6" },
  { key: "comm_ms", label: "Exposed comm", color: CATEGORY_COLOR.comm_exposed },
  { key: "host_ms", label: "Host overhead", color: CATEGORY_COLOR.host_overhead },
] as const;

/** Step time split into stages per window, stacked: where each step's milliseconds go. */
export function stepTimeOption(series: Series, phases: Phase[], t0Ns: number, p: ChartPalette, highlight: ChartHighlight | null = null): Option {
  const stages = STEP_STAGES.filter((s) => hasValues(series[s.key]));
  // Stacked series must share their x values: every stage at the windows that measured a step.
  const windows = measuredIndices(series, series.step_ms, true);
  return {
    ...base(p),
    tooltip: { ...(base(p).tooltip as Option), valueFormatter: (v: number) => formatMs(v) },
    xAxis: elapsedAxis(p),
    yAxis: valueAxis(p, (v) => (v >= 1000 ? `${+(v / 1000).toFixed(2)} s` : `${v} ms`)),
    dataZoom: [{ type: "inside" }],
    series: stages.map((s, i) => ({
      name: s.label,
      type: "line",
      stack: "step",
      showSymbol: false,
      connectNulls: false,
      lineStyle: { width: 0 },
      areaStyle: { color: s.color, opacity: 0.85 },
      itemStyle: { color: s.color },
      emphasis: { focus: "series" },
      data: gappedPoints(series, windows, (w) => series[s.key][w] ?? 0, t0Ns),
      markArea: i === 0 ? markAreas(phases, highlight, t0Ns, p) : undefined,
    })),
  };
}

/** MFU beside GPU utilization, both in %: the gap is "busy but not working". */
export function mfuUtilOption(series: Series, targetMfu: number | null, t0Ns: number, p: ChartPalette): Option {
  const out: Option[] = [];
  if (hasValues(series.gpu_util_pct)) {
    out.push({
      name: "GPU utilization (nvidia-smi)",
      type: "line",
      showSymbol: false,
      lineStyle: { width: 1.5, color: p.muted },
      itemStyle: { color: p.muted },
      areaStyle: { color: p.muted, opacity: 0.08 },
      data: pairs(series, series.gpu_util_pct, t0Ns, 1, false),
    });
  }
  out.push({
    name: "MFU",
    type: "line",
    showSymbol: false,
    lineStyle: { width: 2, color: p.accent },
    itemStyle: { color: p.accent },
    areaStyle: { color: p.accent, opacity: 0.18 },
    data: pairs(series, series.mfu, t0Ns, 100),
    markLine: isNum(targetMfu)
      ? {
          silent: true,
          symbol: "none",
          lineStyle: { color: CATEGORY_COLOR.useful_compute, type: "dashed" },
          label: { formatter: `target ${formatPct(targetMfu, 0)}`, color: p.muted, position: "insideEndTop" },
          data: [{ yAxis: targetMfu * 100 }],
        }
      : undefined,
  });
  return {
    ...base(p),
    tooltip: { ...(base(p).tooltip as Option), valueFormatter: (v: number) => (isNum(v) ? `${v.toFixed(1)}%` : "–") },
    xAxis: elapsedAxis(p),
    yAxis: valueAxis(p, (v) => `${v}%`, { min: 0, max: (v: { max: number }) => Math.max(100, Math.ceil(v.max / 10) * 10) }),
    dataZoom: [{ type: "inside" }],
    series: out,
  };
}

export function memoryOption(series: Series, capacityBytes: number | null, t0Ns: number, p: ChartPalette): Option {
  const lines = [
    { key: "mem_reserved_bytes" as const, label: "Reserved", color: p.accent2 },
    { key: "mem_allocated_bytes" as const, label: "Allocated", color: p.accent },
    { key: "mem_peak_bytes" as const, label: "Peak", color: CATEGORY_COLOR.compute_inefficiency },
  ].filter((l) => hasValues(series[l.key]));
  return {
    ...base(p),
    tooltip: { ...(base(p).tooltip as Option), valueFormatter: (v: number) => formatBytes(v) },
    xAxis: elapsedAxis(p),
    yAxis: valueAxis(p, (v) => formatBytes(v), { splitNumber: 4, min: 0 }),
    dataZoom: [{ type: "inside" }],
    series: lines.map((l, i) => ({
      name: l.label,
      type: "line",
      showSymbol: false,
      lineStyle: { width: 1.6, color: l.color },
      itemStyle: { color: l.color },
      data: pairs(series, series[l.key], t0Ns),
      markLine:
        i === 0 && isNum(capacityBytes)
          ? {
              silent: true,
              symbol: "none",
              lineStyle: { color: p.danger, type: "dashed" },
              label: { formatter: `capacity ${formatBytes(capacityBytes)}`, color: p.muted, position: "insideEndTop" },
              data: [{ yAxis: capacityBytes }],
            }
          : undefined,
    })),
  };
}

const DAY_MS = 86_400_000;
const tooltipDayFmt = new Intl.DateTimeFormat("en-US", { weekday: "short", year: "numeric", month: "short", day: "numeric", timeZone: "UTC" });
const axisDayFmt = new Intl.DateTimeFormat("en-US", { month: "short", day: "numeric", timeZone: "UTC" });

export function dayMs(day: string): number {
  return Date.parse(`${day}T00:00:00Z`);
}

/** "Tue, Nov 3, 2026": a day as the tooltip names it (UTC, like every day the API returns). */
export function tooltipDay(ms: number): string {
  return tooltipDayFmt.format(new Date(ms));
}

interface AxisParam {
  axisValue?: number | string;
  dataIndex: number;
  seriesName?: string;
  marker?: string;
  value?: unknown;
}

/**
 * Spend per day on a time axis: every day of the period has its place (the API sends each day,
 * zero where nothing ran), the six categories stacked (useful compute included, so a day's bar is
 * its spend), recoverable spend as a line over them. The tooltip names the day, each category, the
 * day's spend and recoverable dollars and how many runs were billed.
 */
export function dailyOption(days: DayFigures[], p: ChartPalette): Option {
  const t = days.map((d) => dayMs(d.day));
  const byCategory = days.length > 0 && days.every((d) => d.categories_usd);
  const bars: Option[] = byCategory
    ? CATEGORIES.map((c) => ({
        name: CATEGORY_LABEL[c],
        type: "bar",
        stack: "spend",
        barMaxWidth: 18,
        itemStyle: { color: CATEGORY_COLOR[c] },
        emphasis: { focus: "series" },
        data: days.map((d, i) => [t[i], d.categories_usd?.[c] ?? 0]),
      }))
    : [{ name: "Spend", type: "bar", barMaxWidth: 18, itemStyle: { color: p.axis }, data: days.map((d, i) => [t[i], d.cost_usd]) }];
  const series: Option[] = [
    ...bars,
    {
      name: "Recoverable",
      type: "line",
      showSymbol: days.length <= 45,
      symbolSize: 5,
      lineStyle: { width: 2, color: p.accent },
      itemStyle: { color: p.accent },
      data: days.map((d, i) => [t[i], d.recoverable_usd]),
      z: 5,
    },
  ];
  const first = t.length ? t[0] : 0;
  const last = t.length ? t[t.length - 1] : 0;
  return {
    ...base(p),
    useUTC: true,
    tooltip: {
      ...(base(p).tooltip as Option),
      axisPointer: { type: "shadow" },
      formatter: (params: AxisParam[]) => {
        const list = Array.isArray(params) ? params : [params];
        const i = list[0]?.dataIndex ?? 0;
        const d = days[i];
        if (!d) return "";
        const lines = list
          .filter((x) => x.seriesName !== "Recoverable" && Array.isArray(x.value) && (x.value[1] as number) > 0)
          .map((x) => `${x.marker ?? ""}${x.seriesName}: <b>${formatUsd((x.value as number[])[1])}</b>`);
        const runs = d.runs === undefined ? "" : ` · ${d.runs} run${d.runs === 1 ? "" : "s"}`;
        return [
          `<b>${tooltipDay(t[i])}</b>`,
          `Spend <b>${formatUsd(d.cost_usd)}</b>${runs}`,
          ...lines,
          `Recoverable <b>${formatUsd(d.recoverable_usd)}</b>`,
          d.cost_usd > 0 ? `<span style="opacity:.7">click to open the day's runs</span>` : "",
        ]
          .filter(Boolean)
          .join("<br/>");
      },
    },
    xAxis: {
      type: "time",
      min: first - DAY_MS / 2,
      max: last + DAY_MS / 2,
      minInterval: DAY_MS,
      axisLabel: { color: p.muted, formatter: (v: number) => axisDayFmt.format(new Date(v)), hideOverlap: true },
      axisLine: { lineStyle: { color: p.axis } },
      axisTick: { show: false },
      splitLine: { show: false },
    },
    yAxis: valueAxis(p, (v) => formatUsd(v, { compact: true })),
    series,
  };
}

/** Cost per GPU model and its recoverable part, as horizontal bars. */
export function byGpuOption(rows: { gpu: string; cost_usd: number; recoverable_usd: number }[], p: ChartPalette): Option {
  const sorted = [...rows].sort((a, b) => a.cost_usd - b.cost_usd);
  return {
    ...base(p),
    grid: { left: 8, right: 24, top: 30, bottom: 4, containLabel: true },
    tooltip: { ...(base(p).tooltip as Option), axisPointer: { type: "shadow" }, valueFormatter: (v: number) => formatUsd(v) },
    xAxis: valueAxis(p, (v) => formatUsd(v, { compact: true })),
    yAxis: { type: "category", data: sorted.map((r) => r.gpu), axisLabel: { color: p.text }, axisLine: { show: false }, axisTick: { show: false } },
    series: [
      { name: "Spend", type: "bar", barGap: "-100%", barMaxWidth: 16, itemStyle: { color: p.axis, borderRadius: 3 }, data: sorted.map((r) => r.cost_usd) },
      { name: "Recoverable", type: "bar", barMaxWidth: 16, itemStyle: { color: p.accent, borderRadius: 3 }, data: sorted.map((r) => r.recoverable_usd) },
    ],
  };
}

/** Dollars per category for each rank: a slow rank shows up as others' exposed communication. */
export function rankOption(ranks: RankFigure[], stragglers: Set<number>, p: ChartPalette): Option {
  return {
    ...base(p),
    tooltip: { ...(base(p).tooltip as Option), axisPointer: { type: "shadow" }, valueFormatter: (v: number) => formatUsd(v) },
    xAxis: {
      type: "category",
      data: ranks.map((r) => (stragglers.has(r.rank) ? `rank ${r.rank} ⚠` : `rank ${r.rank}`)),
      axisLabel: { color: p.muted, interval: "auto", hideOverlap: true },
      axisLine: { lineStyle: { color: p.axis } },
      axisTick: { show: false },
    },
    yAxis: valueAxis(p, (v) => formatUsd(v, { compact: true })),
    series: CATEGORIES.map((c) => ({
      name: CATEGORY_LABEL[c],
      type: "bar",
      stack: "rank",
      barMaxWidth: 28,
      itemStyle: { color: CATEGORY_COLOR[c] },
      data: ranks.map((r) => r.usd[c] ?? 0),
    })),
  };
}

/** An interval in hours as an axis names it: "12 s", "45 min", "1.2 min", "2.5 h". */
export function hoursLabel(hours: number): string {
  if (hours * 60 < 1) return `${+(hours * 3600).toFixed(0)} s`;
  if (hours < 1) return `${+(hours * 60).toFixed(1)} min`;
  return `${+hours.toFixed(2)} h`;
}

/**
 * A job's checkpoint overhead in dollars a month against the checkpoint interval (the advice's
 * curve): checkpoints cost more when frequent, lost work more when rare. The current interval and
 * the recommended one are marked (the current only where the job has one).
 */
export function checkpointCurveOption(curve: readonly [number, number][], current: number | null, recommended: number | null, p: ChartPalette): Option {
  const points = curve.filter(([x, y]) => isNum(x) && isNum(y) && x > 0);
  const marks: Option[] = [];
  if (isNum(current) && current > 0)
    marks.push({ name: "current", xAxis: current, lineStyle: { color: p.danger, type: "dashed" }, label: { formatter: `now ${formatSeconds(current)}`, color: p.muted, position: "insideEndTop" } });
  if (isNum(recommended) && recommended > 0)
    marks.push({ name: "recommended", xAxis: recommended, lineStyle: { color: CATEGORY_COLOR.useful_compute, type: "solid" }, label: { formatter: `recommended ${formatSeconds(recommended)}`, color: p.muted, position: "insideEndBottom" } });
  const xs = [...points.map(([x]) => x), ...marks.map((m) => m.xAxis as number)];
  // A linear axis in hours reads "30 min", "1 h", "1.5 h" at ECharts' round ticks; seconds would not.
  for (const m of marks) m.xAxis = (m.xAxis as number) / 3600;
  return {
    ...base(p),
    grid: { left: 8, right: 24, top: 16, bottom: 24, containLabel: true },
    legend: { show: false },
    tooltip: {
      ...(base(p).tooltip as Option),
      formatter: (params: AxisParam[]) => {
        const first = (Array.isArray(params) ? params : [params])[0];
        const v = first?.value as number[] | undefined;
        return v ? `every ${formatSeconds(v[0] * 3600)}<br/>overhead <b>${formatUsd(v[1])}</b> / month` : "";
      },
    },
    xAxis: {
      type: "value",
      name: "checkpoint interval",
      nameLocation: "middle",
      nameGap: 26,
      nameTextStyle: { color: p.muted, fontSize: 11 },
      min: xs.length ? Math.min(...xs) / 3600 : undefined,
      max: xs.length ? Math.max(...xs) / 3600 : undefined,
      axisLabel: { color: p.muted, formatter: hoursLabel, hideOverlap: true },
      axisLine: { lineStyle: { color: p.axis } },
      splitLine: { show: false },
    },
    yAxis: valueAxis(p, (v) => formatUsd(v, { compact: true }), { min: 0 }),
    series: [
      {
        name: "Overhead a month",
        type: "line",
        showSymbol: false,
        smooth: false,
        lineStyle: { width: 2, color: p.accent },
        itemStyle: { color: p.accent },
        data: points.map(([x, y]) => [x / 3600, y]),
        markLine: marks.length ? { silent: true, symbol: "none", data: marks } : undefined,
      },
    ],
  };
}
