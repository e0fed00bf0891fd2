// Display formatting. Every function takes a value straight from the API and accepts null
// (a figure that could not be computed), shown as an en dash rather than a misleading zero.

const DASH = "–";

const usdFormatters = new Map<string, Intl.NumberFormat>();
function usdFormatter(digits: number, compact: boolean): Intl.NumberFormat {
  const key = `${digits}:${compact}`;
  let f = usdFormatters.get(key);
  if (!f) {
    f = new Intl.NumberFormat("en-US", {
      style: "currency",
      currency: "USD",
      notation: compact ? "compact" : "standard",
      minimumFractionDigits: compact ? 0 : digits,
      maximumFractionDigits: compact ? 1 : digits,
    });
    usdFormatters.set(key, f);
  }
  return f;
}

export function isNum(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/**
 * $1,234.56; compact gives $1.2K / $3.4M for chart axes and big cards. An amount under a cent that
 * is not zero reads "< $0.01", never a misleading "$0.00" (a run's exact dollars, a rate's share).
 */
export function formatUsd(value: number | null | undefined, opts: { compact?: boolean; digits?: number } = {}): string {
  if (!isNum(value)) return DASH;
  const compact = opts.compact ?? false;
  const digits = opts.digits ?? 2;
  if (value !== 0 && Math.abs(value) < 0.5 * 10 ** -digits) return value > 0 ? `< ${usdFormatter(digits, false).format(10 ** -digits)}` : `> −${usdFormatter(digits, false).format(10 ** -digits)}`;
  if (compact && Math.abs(value) < 1000) return usdFormatter(value % 1 === 0 ? 0 : 2, false).format(value);
  return usdFormatter(digits, compact).format(value);
}

/** The most decimals any figure is shown with (a tiny run's dollars and GPU-hours): never a float's tail. */
const MAX_DIGITS = 4;

/**
 * Decimals for the dollars of a run (or any group of figures) whose total is `total`: cents from a
 * dime up; below that enough decimals for three significant digits of the total (at most 6), so a
 * run of a fraction of a cent shows its split ($0.00210 = $0.00122 + …) instead of $0.00 everywhere.
 */
export function usdDigitsFor(total: number | null | undefined): number {
  if (!isNum(total) || total === 0 || Math.abs(total) >= 0.1) return 2;
  return Math.min(MAX_DIGITS, Math.max(2, 2 - Math.floor(Math.log10(Math.abs(total)))));
}

/**
 * A rate in dollars per GPU-hour, computed from unrounded figures and rounded once here: $0.82,
 * $38.40; a price-book price of four decimals keeps them ($0.4321); under a dime, three
 * significant digits ($0.0123). Never "$7.9100" for a computed $7.91001.
 */
export function formatUsdRate(value: number | null | undefined): string {
  if (!isNum(value)) return DASH;
  const a = Math.abs(value);
  if (a > 0 && a < 0.1) return usdFormatter(Math.min(MAX_DIGITS, 2 - Math.floor(Math.log10(a))), false).format(value);
  const fourDecimals = Math.abs(value * 1e4 - Math.round(value * 1e4)) < 1e-6;
  const wholeCents = Math.abs(value * 100 - Math.round(value * 100)) < 1e-6;
  return usdFormatter(a < 1 && fourDecimals && !wholeCents ? 4 : 2, false).format(value);
}

/** "$0.82 per GPU-hour" (a rate as every page and popover writes it). */
export function formatUsdPerGpuHour(value: number | null | undefined): string {
  return isNum(value) ? `${formatUsdRate(value)} per GPU-hour` : DASH;
}

/** A unit price as the price book stores it (up to 4 decimals, often a string): $2.50, $0.4321. */
export function formatUsdPrice(value: number | string | null | undefined): string {
  const v = typeof value === "string" ? (value.trim() === "" ? Number.NaN : Number(value)) : value;
  if (!isNum(v)) return DASH;
  const wholeCents = Math.abs(v * 100 - Math.round(v * 100)) < 1e-6;
  return formatUsd(v, { digits: wholeCents ? 2 : 4 });
}

/** A signed money change: +$12.30 / −$4.00. */
export function formatUsdChange(value: number | null | undefined): string {
  if (!isNum(value)) return DASH;
  if (value === 0) return formatUsd(0);
  if (Math.abs(value) < 0.005) return value > 0 ? "< +$0.01" : "> −$0.01"; // a change under a cent, honestly
  const sign = value > 0 ? "+" : "−";
  return sign + formatUsd(Math.abs(value));
}

/** A fraction 0..1 as a percentage: 0.1234 → "12.3%"; a negative one with a real minus. */
export function formatPct(fraction: number | null | undefined, digits = 1): string {
  if (!isNum(fraction)) return DASH;
  const text = `${Math.abs(fraction * 100).toFixed(digits)}%`;
  return fraction < 0 && Number(text.slice(0, -1)) !== 0 ? `−${text}` : text;
}

/**
 * A share (a fraction) with a precision that suits its size, the same in a sentence, a card and a
 * popover: 12.3%, 0.5%, and below a tenth of a percent two significant digits (0.043%), never a
 * bare "0.0%" for a share that is not zero; below a thousandth of a percent "< 0.001%" (a CPU
 * run's MFU against a GPU's peak), not five decimals.
 */
export function formatShare(fraction: number | null | undefined): string {
  if (!isNum(fraction)) return DASH;
  const pct = Math.abs(fraction * 100);
  if (pct === 0 || pct >= 0.1) return formatPct(fraction, 1);
  if (pct < 0.001) return `${fraction < 0 ? "> −" : "< "}0.001%`;
  return formatPct(fraction, Math.min(4, 1 - Math.floor(Math.log10(pct))));
}

/** A change of a fraction, in percentage points: +2.1 pp. */
export function formatPctPoints(delta: number | null | undefined, digits = 1): string {
  if (!isNum(delta)) return DASH;
  const pp = delta * 100;
  if (Math.abs(pp) < 0.5 * 10 ** -digits) return `0.${"0".repeat(digits)} pp`;
  return `${pp > 0 ? "+" : "−"}${Math.abs(pp).toFixed(digits)} pp`;
}

export function formatNumber(value: number | null | undefined, digits = 0): string {
  if (!isNum(value)) return DASH;
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** GPU-hours with a precision that suits the size: 0.812 GPU-h, 12.4 GPU-h, 1,204 GPU-h. */
export function formatGpuHours(hours: number | null | undefined): string {
  if (!isNum(hours)) return DASH;
  const digits = gpuHoursDigits(hours);
  if (hours !== 0 && Math.abs(hours) < 0.5 * 10 ** -digits) return `< ${formatNumber(10 ** -digits, digits)} GPU-h`;
  return `${formatNumber(hours, digits)} GPU-h`;
}

/** Decimals of GPU-hours for a figure (or a column) whose size is `hours`: a card and its table agree. */
export function gpuHoursDigits(hours: number): number {
  const abs = Math.abs(hours);
  if (abs > 0 && abs < 0.1) return Math.min(MAX_DIGITS, 1 - Math.floor(Math.log10(abs))); // two significant digits: 0.0021
  return abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3;
}

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
export function formatBytes(bytes: number | null | undefined): string {
  if (!isNum(bytes)) return DASH;
  let v = Math.abs(bytes);
  let i = 0;
  while (v >= 1024 && i < BYTE_UNITS.length - 1) {
    v /= 1024;
    i += 1;
  }
  const digits = i === 0 ? 0 : v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return `${bytes < 0 ? "-" : ""}${v.toFixed(digits)} ${BYTE_UNITS[i]}`;
}

/** Milliseconds with sensible precision: 0.42 ms, 12.3 ms, 1.24 s. */
export function formatMs(ms: number | null | undefined): string {
  if (!isNum(ms)) return DASH;
  // Thresholds on the rounded value, so 9.999 reads "10.0 ms" like 10.001, not "10.00 ms".
  const a = Math.abs(ms);
  if (a >= 999.5) return `${(ms / 1000).toFixed(2)} s`;
  if (a >= 99.95) return `${ms.toFixed(0)} ms`;
  if (a >= 9.995) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

export function formatNsAsMs(ns: number | null | undefined): string {
  return isNum(ns) ? formatMs(ns / 1e6) : DASH;
}

/** A duration in seconds as "2 h 05 m", "4 m 10 s", "12 s". */
export function formatDuration(seconds: number | null | undefined): string {
  if (!isNum(seconds)) return DASH;
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h >= 24) return `${Math.floor(h / 24)} d ${h % 24} h`;
  if (h > 0) return `${h} h ${String(m).padStart(2, "0")} m`;
  if (m > 0) return `${m} m ${String(sec).padStart(2, "0")} s`;
  return `${sec} s`;
}

/** Large counts and rates compactly: 12.3K, 4.5M, 1.2G (FLOP/s, tokens/s). */
export function formatSi(value: number | null | undefined, unit = ""): string {
  if (!isNum(value)) return DASH;
  const prefixes = ["", "K", "M", "G", "T", "P", "E"];
  let v = Math.abs(value);
  let i = 0;
  while (v >= 1000 && i < prefixes.length - 1) {
    v /= 1000;
    i += 1;
  }
  const digits = v >= 100 ? 0 : v >= 10 ? 1 : 2;
  const num = `${value < 0 ? "-" : ""}${v.toFixed(digits)}`;
  return unit ? `${num} ${prefixes[i]}${unit}` : `${num}${prefixes[i]}`;
}

const dateFmt = new Intl.DateTimeFormat("en-US", { year: "numeric", month: "short", day: "numeric", timeZone: "UTC" });
const dateTimeFmt = new Intl.DateTimeFormat("en-US", {
  year: "numeric",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit",
  hourCycle: "h23",
  timeZone: "UTC",
});
const monthFmt = new Intl.DateTimeFormat("en-US", { year: "numeric", month: "long", timeZone: "UTC" });

function parseDate(iso: string | null | undefined): Date | null {
  if (!iso) return null;
  const d = new Date(/^\d{4}-\d{2}-\d{2}$/.test(iso) ? `${iso}T00:00:00Z` : iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** "Nov 30, 2026" (UTC, like every time the API returns). */
export function formatDate(iso: string | null | undefined): string {
  const d = parseDate(iso);
  return d ? dateFmt.format(d) : DASH;
}

/** "Nov 30, 2026, 22:17 UTC". */
export function formatDateTime(iso: string | null | undefined): string {
  const d = parseDate(iso);
  return d ? `${dateTimeFmt.format(d)} UTC` : DASH;
}

/** "2026-11" → "November 2026". */
export function formatMonth(month: string): string {
  const d = parseDate(`${month}-01`);
  return d ? monthFmt.format(d) : month;
}

/** A figure with the unit the analysis names it in (explain entries carry `unit`). */
export function formatWithUnit(value: unknown, unit: string): string {
  return formatInput(undefined, value, unit);
}

/** A raw input value: integers as they are, big or tiny numbers in exponent form. */
export function formatPlain(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value !== "number") return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return value.toLocaleString("en-US");
  if (value !== 0 && (Math.abs(value) >= 1e12 || Math.abs(value) < 1e-3)) return value.toExponential(4);
  return value.toLocaleString("en-US", { maximumFractionDigits: 6 });
}

/** A low–high range of dollars: "$12.00–$18.50" (a single figure when both ends agree). */
export function formatUsdRange(low: number | null | undefined, high: number | null | undefined): string {
  if (!isNum(low) || !isNum(high)) return DASH;
  const a = formatUsd(low);
  const b = formatUsd(high);
  return a === b ? a : `${a}–${b}`;
}

/**
 * A figure in the unit a category's evidence names: "ms/step" (milliseconds per step), "MFU" (a
 * fraction, shown as a percentage) or "s" (seconds, as a duration).
 */
export function formatEvidenceValue(value: number | null | undefined, unit: string): string {
  if (!isNum(value)) return DASH;
  switch (unit) {
    case "ms/step":
      return `${formatMs(value)} per step`;
    case "MFU":
      return `${formatShare(value)} MFU`;
    case "s":
      return formatSeconds(value);
    default:
      return `${formatHumanNumber(value)}${unit ? ` ${unit}` : ""}`;
  }
}

const IDLE_PART_WORDS: Record<string, string> = { startup: "start-up", teardown: "tear-down", gap: "gaps between steps" };

const SNAKE_RE = /\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b/g;
const HUMAN_NAMES: Record<string, string> = {
  useful_compute: "useful compute",
  compute_inefficiency: "compute inefficiency",
  data_stall: "data stall",
  comm_exposed: "exposed communication",
  host_overhead: "host overhead",
  world_size: "world size",
  gpu_count: "GPU count",
  comm_ns: "communication time",
  data_ns: "data wait time",
  forward_ns: "forward time",
  backward_ns: "backward time",
  optimizer_ns: "optimizer time",
  dur_ns: "step time",
};

const REC_CODE_RE = /\b(COMM_EXPOSED|DATA_STALL|HOST_CONTENTION|HOST_OVERHEAD|LOW_MFU|MEMORY_FRAGMENTATION|MFU_UNKNOWN|STRAGGLER|IDLE|OOM)\b/g;
const REC_CODE_WORDS: Record<string, string> = {
  COMM_EXPOSED: "exposed communication",
  DATA_STALL: "data stall",
  HOST_CONTENTION: "host contention",
  HOST_OVERHEAD: "host overhead",
  LOW_MFU: "low MFU",
  MEMORY_FRAGMENTATION: "memory fragmentation",
  MFU_UNKNOWN: "MFU unknown",
  STRAGGLER: "straggler",
  IDLE: "idle",
  OOM: "out of memory",
};

/** "see HOST_CONTENTION" (a recommendation's code) → "see the host contention recommendation". */
export function recommendationRefs(text: string): string {
  return text
    .replace(/\bsee (?=[A-Z]{3,})/g, "see the ")
    .replace(REC_CODE_RE, (code, _c, offset: number, whole: string) => {
      const words = REC_CODE_WORDS[code];
      return whole.slice(Math.max(0, offset - 8), offset) === "see the " ? `${words} recommendation` : code === "IDLE" || code === "OOM" ? code : words;
    });
}

/**
 * Text from the analysis in plain words: internal names (snake_case) become words, except where
 * they are code the reader types (followed by "=" or "(", or inside backticks); references to a
 * recommendation's code become its name; an idle part "phase:eval" reads "phase · eval".
 */
export function plainWords(text: string): string {
  return recommendationRefs(text)
    .replace(/>=/g, "≥")
    .replace(/<=/g, "≤")
    .replace(/\bphase:(\S+)/g, "phase · $1")
    .replace(/\bidle: (startup|teardown|gap)\b/g, (_m, part: string) => `idle: ${IDLE_PART_WORDS[part]}`)
    .split(/(`[^`]*`)/)
    .map((part) =>
      part.startsWith("`")
        ? part
        : part.replace(SNAKE_RE, (word, offset: number, whole: string) => {
            const next = whole.slice(offset + word.length).trimStart()[0];
            if (next === "=" || next === "(") return word;
            return HUMAN_NAMES[word] ?? word.replace(/_/g, " ");
          }),
    )
    .join("");
}

// Inputs of the analysis' explanations (and a recommendation's observations) as people read them:
// names in the product's words, every value in its unit and human formatting — never a raw
// nanosecond count, an epoch timestamp in exponent form or "1 ratio of steps".

const CATEGORY_WORDS: Record<string, string> = {
  useful_compute: "useful compute",
  compute_inefficiency: "compute inefficiency",
  data_stall: "data stall",
  comm_exposed: "exposed communication",
  host_overhead: "host overhead",
};

const WORDS: Record<string, string> = {
  gpu: "GPU",
  gpus: "GPUs",
  cpu: "CPU",
  mfu: "MFU",
  usd: "USD",
  flops: "FLOPs",
  nvml: "NVML",
  util: "utilisation",
  comm: "communication",
  mem: "memory",
  alloc: "allocator",
  oom: "out-of-memory",
  ms: "ms",
  id: "ID",
  dtype: "data type",
};

const NAMES: Record<string, string> = {
  capacity_bytes: "GPU memory capacity",
  peak_bytes_max: "peak memory (highest rank)",
  headroom_bytes: "memory headroom",
  allocated_bytes_max: "allocated memory (max)",
  reserved_bytes_max: "reserved memory (max)",
  t_start_ns: "start",
  t_end_ns: "end",
  gpu_count: "GPUs",
  world_size: "ranks (world size)",
  ranks_reporting: "ranks reporting",
  cost_cents: "cost",
  exact_usd: "exact dollars",
  peak_rank: "rank with the peak",
};

// Name endings that carry the unit (as the waste model's unit_of reads them), longest first.
const UNIT_SUFFIXES: [string, string][] = [
  ["_usd_per_gpu_hour", "USD/GPU-h"],
  ["_usd_per_gpu_ns", "USD/GPU-ns"],
  ["_gpu_seconds", "GPU-s"],
  ["_gpu_hours", "GPU-h"],
  ["_flops_per_gpu", "FLOP/s"],
  ["_per_1k_steps", "per 1k steps"],
  ["_ms_per_step", "ms/step"],
  ["_rank_ns", "rank-ns"],
  ["_seconds", "s"],
  ["_hours", "h"],
  ["_bytes", "bytes"],
  ["_cents", "cents"],
  ["_usd", "USD"],
  ["_pct", "%"],
  ["_ns", "ns"],
  ["_ms", "ms"],
  ["_share", "ratio"],
  ["_mfu", "ratio"],
  ["_fraction", "ratio"],
  ["_count", "count"],
  ["_steps", "count"],
  ["_rows", "count"],
];
const AGGREGATES = ["mean", "max", "min", "sum", "total", "p95"];
const TIME_UNITS = new Set(["ns", "rank-ns", "s", "ms", "h"]);

const NAME_UNITS: Record<string, string> = {
  gpu_count: "count",
  world_size: "count",
  ranks_reporting: "count",
  recoverability: "ratio",
  target_mfu: "ratio",
  gpus_per_rank: "GPUs",
  flops: "FLOP",
  flops_reported: "FLOP",
  tokens: "count",
  samples: "count",
  mfu: "ratio",
  fragmentation: "ratio",
};

/** The unit an input's name implies (peak_bytes_max → bytes), as the analysis names units. */
export function unitOf(name: string): string {
  if (NAME_UNITS[name]) return NAME_UNITS[name];
  let base = name;
  for (const agg of AGGREGATES) if (base.endsWith(`_${agg}`)) base = base.slice(0, -agg.length - 1);
  for (const [suffix, unit] of UNIT_SUFFIXES) if (base.endsWith(suffix) || base === suffix.slice(1)) return unit;
  return "";
}

function words(snake: string): string {
  let text = snake;
  for (const [name, w] of Object.entries(CATEGORY_WORDS)) text = text.split(name).join(w.replace(/ /g, "\u0000"));
  return text
    .split(/[_.]/)
    .filter(Boolean)
    .map((w) => WORDS[w] ?? w)
    .join(" ")
    .replace(/\u0000/g, " ");
}

/** "excess_ns_mean" → "excess time (mean)"; "comm_exposed_rank_ns" → "exposed communication time (all ranks)". */
export function inputName(name: string): string {
  if (NAMES[name]) return NAMES[name];
  const segment = /^segment_(\d+)_(seconds|usd_per_gpu_hour)$/.exec(name);
  if (segment) return `price period ${Number(segment[1]) + 1}: ${segment[2] === "seconds" ? "billed time" : "price"}`;
  if (!/[_.]/.test(name)) return WORDS[name] ?? name;
  let base = name;
  let agg = "";
  for (const a of AGGREGATES) {
    if (base.endsWith(`_${a}`)) {
      agg = a;
      base = base.slice(0, -a.length - 1);
      break;
    }
  }
  const unit = unitOf(base);
  const suffix = UNIT_SUFFIXES.find(([s, u]) => u === unit && base.endsWith(s));
  if (suffix && base !== suffix[0].slice(1)) base = base.slice(0, -suffix[0].length);
  let out = words(base);
  if (unit === "rank-ns") out += " time (all ranks)";
  else if (TIME_UNITS.has(unit) && !/\b(time|wait|duration|start|end)$/.test(out)) out += " time";
  else if (unit === "GPU-s" || unit === "GPU-h") out += " GPU time";
  else if (unit === "bytes" && !/memory/.test(out)) out += " memory";
  else if (unit === "ms/step") out += " time per step";
  if (agg) out += ` (${agg === "p95" ? "95th percentile" : agg})`;
  return out;
}

/** A number without a unit, readably: 2,264 · 0.163 · 12.5 · 23.6 E (never exponent form). */
export function formatHumanNumber(value: number): string {
  const a = Math.abs(value);
  if (Number.isInteger(value) && a < 1e15) return value.toLocaleString("en-US");
  if (a >= 1e6) return formatSi(value);
  if (a >= 100) return formatNumber(value, 1);
  if (a >= 1) return formatNumber(value, 2);
  if (a === 0) return "0";
  return value.toLocaleString("en-US", { maximumSignificantDigits: 3 });
}

/** Seconds as "0.42 s", "12.3 s" or "4 m 10 s" (the server's evidence words write them the same way). */
export function formatSeconds(seconds: number): string {
  const a = Math.abs(seconds);
  if (a < 1e-3) return `${formatNumber(seconds * 1e6, a < 1e-5 ? 2 : 0)} µs`;
  if (a < 1) return formatMs(seconds * 1000);
  if (a < 60) return `${seconds.toFixed(a < 10 ? 2 : 1)} s`;
  return formatDuration(seconds);
}

// Values that are names of the analysis' own (an evidence kind, a category): in the product's words.
const VALUE_WORDS: Record<string, string> = {
  own_stretch: "best stretch",
  peers: "peer runs",
  project_median: "project median",
  straggler: "stragglers",
  none: "no evidence",
  ...CATEGORY_WORDS,
};

/** A value in the unit the analysis gives it (or its name implies), formatted for people. */
export function formatInput(name: string | undefined, value: unknown, unitGiven?: string): string {
  if (value === null || value === undefined) return DASH;
  if (typeof value === "string") return VALUE_WORDS[value] ?? (/^[a-z]+(_[a-z0-9]+)+$/.test(value) ? value.replace(/_/g, " ") : value);
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (!isNum(value)) return String(value);
  const unit = unitGiven || (name ? unitOf(name) : "");
  switch (unit) {
    case "USD":
      // Cents from a cent up; under a cent, its significant digits ($0.00172), never "$0.00".
      return formatUsd(value, { digits: value === 0 || Math.abs(value) >= 0.01 ? 2 : usdDigitsFor(value) });
    case "cents":
      return formatUsd(value / 100);
    case "USD/GPU-h":
      return formatUsdPerGpuHour(value);
    case "USD/GPU-ns":
      return formatUsdPerGpuHour(value * 3.6e12);
    case "USD/month":
      return `${formatUsd(value)} / month`;
    case "GPU-s":
      return formatGpuHours(value / 3600);
    case "GPU-h":
      return formatGpuHours(value);
    case "h":
      return formatDuration(value * 3600);
    case "h/month":
      return `${formatNumber(value)} h / month`;
    case "s":
      return formatSeconds(value);
    case "ns":
      // Timestamps are nanoseconds since 1970: read them as a date and time.
      if ((name ?? "").startsWith("t_") || Math.abs(value) > 1e17) return formatDateTime(new Date(value / 1e6).toISOString());
      return formatSeconds(value / 1e9);
    case "rank-ns":
      return `${formatSeconds(value / 1e9)} summed over ranks`;
    case "ms":
      return formatMs(value);
    case "ms/step":
      return `${formatMs(value)} per step`;
    case "ratio":
      // A difference of two shares is in percentage points, as the tables beside it write it.
      return /^delta|_delta$|^change/.test(name ?? "") ? formatPctPoints(value, Math.abs(value) < 0.001 && value !== 0 ? 3 : 1) : formatShare(value);
    case "ratio of steps":
      return `${formatPct(value)} of steps`;
    case "%":
      return `${formatNumber(value, Math.abs(value) < 10 ? 1 : 0)}%`;
    case "count":
      return formatNumber(value, Number.isInteger(value) ? 0 : 1);
    case "GPUs":
      return `${formatNumber(value)} GPU${value === 1 ? "" : "s"}`;
    case "FLOP":
      return formatSi(value, "FLOP");
    case "FLOP/s":
      return formatSi(value, "FLOP/s");
    case "tokens/s":
    case "samples/s":
      return `${formatSi(value)} ${unit}`;
    case "per 1k steps":
      return `${formatNumber(value, 2)} per 1,000 steps`;
    case "rank":
      return `rank ${formatNumber(value)}`;
    case "bytes":
    case "B":
      return formatBytes(value);
    case "":
      return formatHumanNumber(value);
    default:
      if (unit.startsWith("ratio ")) return `${formatPct(value)} ${unit.slice(6)}`;
      return `${formatHumanNumber(value)} ${unit}`;
  }
}

// Factors that only change a unit (ns → s, GPU-s → GPU-h): the inputs are shown in people's units
// already, so the formula reads without them ("/ 10⁹" is code, not an explanation).
const UNIT_FACTOR_RE = /\s*[/*]\s*(?:1e9|1e6|1e3|3\.6e12|3\.6e9|3600|100)\b(?!\s*\))/g;

/** A formula as the analysis writes it, in the same words as its inputs: × for *, Σ over ranks. */
export function humanFormula(formula: string): string {
  return formula
    .replace(/round_half_up\(([^]*), cents\)/, "$1, rounded to the cent")
    .replace(UNIT_FACTOR_RE, "")
    .replace(/Σ_(\w+)/g, (_m, over: string) => `Σ over ${over === "segments" ? "price periods" : over}`)
    .replace(/\b(?:seconds_)?in_segment\b/g, "in the price period")
    .replace(/\b[a-z][a-z0-9]*(?:[_.][a-z0-9]+)+\b/g, (name) => inputName(name))
    .replace(/\b(usd|mfu|flops|gpu)\b/g, (w) => WORDS[w] ?? w)
    .replace(/ \* /g, " × ")
    .replace(/\b1e9\b/g, "a billion")
    .replace(/\b1e6\b/g, "a million")
    .replace(/\b1e3\b/g, "a thousand");
}

/** The name a formula defines ("delta = run − baseline" → "delta"), to format its value by it. */
export function formulaName(formula: string): string {
  const m = /^\s*([A-Za-z_][\w.\[\]]*)\s*=/.exec(formula);
  return m ? m[1] : "";
}

/**
 * An explained figure's value in its unit, a difference of shares in percentage points. Dollars
 * under a dime are shown from the unrounded figure the explanation keeps (``exact_usd``), as the
 * page shows them, not as the cents they round to.
 */
export function formatExplainValue(value: unknown, unit: string, formula: string, inputs: Record<string, unknown> = {}): string {
  const exact = inputs.exact_usd;
  // Only where the page shows the unrounded figure (Explain's `shown`), never beside a figure in cents.
  if (unit === "USD" && isNum(exact) && exact === value) return formatInput(undefined, exact, unit);
  return formatInput(formulaName(formula).split(".").pop(), value, unit);
}

const TIER_LABEL: Record<string, string> = { on_demand: "on-demand", reserved: "reserved", spot: "spot" };

/** A pricing tier in one spelling everywhere: "on-demand", "reserved", "spot". */
export function tierLabel(tier: string | null | undefined): string {
  if (!tier) return DASH;
  return TIER_LABEL[tier] ?? tier.replace(/_/g, "-");
}
