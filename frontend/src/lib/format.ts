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

/** $1,234.56; compact gives $1.2K / $3.4M for chart axes and big cards. */
export function formatUsd(value: number | null | undefined, opts: { compact?: boolean; digits?: number } = {}): string {
  if (!isNum(value)) return DASH;
  const compact = opts.compact ?? false;
  if (compact && Math.abs(value) < 1000) return usdFormatter(value % 1 === 0 ? 0 : 2, false).format(value);
  return usdFormatter(opts.digits ?? 2, compact).format(value);
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
  const sign = value > 0 ? "+" : "−";
  return sign + formatUsd(Math.abs(value));
}

/** A fraction 0..1 as a percentage: 0.1234 → "12.3%". */
export function formatPct(fraction: number | null | undefined, digits = 1): string {
  if (!isNum(fraction)) return DASH;
  return `${(fraction * 100).toFixed(digits)}%`;
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
  const abs = Math.abs(hours);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 1 ? 2 : 3;
  return `${formatNumber(hours, digits)} GPU-h`;
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
  if (value === null || value === undefined) return DASH;
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (!isNum(value)) return String(value);
  switch (unit) {
    case "USD":
      return formatUsd(value);
    case "ratio":
      return `${formatNumber(value, 4)} (${formatPct(value)})`;
    case "GPU-s":
      return `${formatNumber(value, 1)} GPU-s (${formatGpuHours(value / 3600)})`;
    case "GPU-h":
      return formatGpuHours(value);
    case "FLOP/s":
      return formatSi(value, "FLOP/s");
    case "ms":
      return formatMs(value);
    case "bytes":
    case "B":
      return formatBytes(value);
    default:
      return `${formatPlain(value)}${unit ? ` ${unit}` : ""}`;
  }
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
      return `${formatPct(value)} MFU`;
    case "s":
      return value < 60 ? `${value < 10 ? value.toFixed(1) : value.toFixed(0)} s` : formatDuration(value);
    default:
      return `${formatPlain(value)}${unit ? ` ${unit}` : ""}`;
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
