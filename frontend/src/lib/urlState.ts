// State that lives in the URL (filters, sort, period, month) so a view can be shared and survives a
// reload. Parsing is forgiving (unknown or malformed values fall back to defaults) and writing
// omits defaults, so URLs stay short and canonical.

export const RUN_STATUSES = ["running", "finished", "failed", "crashed"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** Sort keys the runs API and the leaderboards API accept (prefix "-" for descending). */
export const SERVER_SORT_KEYS = ["recoverable_usd", "lost_usd", "cost_usd", "waste_usd", "gpu_hours", "mfu", "waste_share", "started_at"] as const;
export const DEFAULT_SORT = "-recoverable_usd";
/** The runs list's figures within its billed days (`from`/`to`): it sorts by them only then. */
export const PERIOD_SORT_KEYS = ["period_cost_usd", "period_recoverable_usd", "period_lost_usd", "period_waste_usd", "period_gpu_hours"] as const;

export function isPeriodSort(sort: string): boolean {
  return (PERIOD_SORT_KEYS as readonly string[]).includes(parseSort(sort).key);
}

export interface RunsQuery {
  q: string;
  team: string;
  project: string;
  status: string;
  gpu: string;
  tag: string;
  from: string;
  to: string;
  /** Who launched the run, exactly as its agent reported it (docs/agent.md). */
  launched_by: string;
  sort: string;
  page: number;
}

export const RUNS_FILTER_KEYS = ["q", "team", "project", "status", "gpu", "tag", "from", "to", "launched_by"] as const;
export type RunsFilterKey = (typeof RUNS_FILTER_KEYS)[number];

export const EMPTY_RUNS_QUERY: RunsQuery = {
  q: "",
  team: "",
  project: "",
  status: "",
  gpu: "",
  tag: "",
  from: "",
  to: "",
  launched_by: "",
  sort: DEFAULT_SORT,
  page: 1,
};

const DATE_RE = /^\d{4}-\d{2}-\d{2}$/;
const MONTH_RE = /^\d{4}-(0[1-9]|1[0-2])$/;

export function parseSort(sort: string): { key: string; desc: boolean } {
  return sort.startsWith("-") ? { key: sort.slice(1), desc: true } : { key: sort, desc: false };
}

export function isServerSort(sort: string): boolean {
  return (SERVER_SORT_KEYS as readonly string[]).includes(parseSort(sort).key);
}

/** Clicking a column: first descending (biggest money first), then ascending, then back. */
export function toggleSort(current: string, key: string): string {
  const { key: curKey, desc } = parseSort(current);
  if (curKey !== key) return `-${key}`;
  return desc ? key : `-${key}`;
}

export function parseRunsQuery(params: URLSearchParams): RunsQuery {
  const get = (k: string) => (params.get(k) ?? "").trim();
  const status = get("status");
  const from = get("from");
  const to = get("to");
  let sort = get("sort");
  // A period figure sorts a list with billed days; without them the whole run's figure does.
  if (isPeriodSort(sort) && !isDay(from) && !isDay(to)) sort = sort.replace("period_", "");
  const page = Number.parseInt(get("page"), 10);
  return {
    q: get("q"),
    team: get("team"),
    project: get("project"),
    status: (RUN_STATUSES as readonly string[]).includes(status) ? status : "",
    gpu: get("gpu"),
    tag: get("tag"),
    from: isDay(from) ? from : "",
    to: isDay(to) ? to : "",
    launched_by: get("launched_by"),
    sort: sort && (isServerSort(sort) || isPeriodSort(sort)) ? sort : DEFAULT_SORT,
    page: Number.isFinite(page) && page >= 1 ? page : 1,
  };
}

/** The URL search for a query: defaults and empty filters are left out, keys in a fixed order. */
export function runsQueryToParams(query: RunsQuery): URLSearchParams {
  const out = new URLSearchParams();
  for (const key of RUNS_FILTER_KEYS) {
    const v = query[key].trim();
    if (v) out.set(key, v);
  }
  if (query.sort !== DEFAULT_SORT) out.set("sort", query.sort);
  if (query.page > 1) out.set("page", String(query.page));
  return out;
}

/** A change of filter or sort starts again at page 1; a change of page keeps the filters. */
export function updateRunsQuery(query: RunsQuery, patch: Partial<RunsQuery>): RunsQuery {
  const next = { ...query, ...patch };
  if (!("page" in patch)) next.page = 1;
  return next;
}

export function activeFilterCount(query: RunsQuery): number {
  return RUNS_FILTER_KEYS.filter((k) => query[k].trim() !== "").length;
}

export const RUNS_PAGE_SIZE = 50;

/** The portal API path for a runs query (the API always gets the sort, and the page size). */
export function runsApiPath(query: RunsQuery, pageSize = RUNS_PAGE_SIZE): string {
  const p = runsQueryToParams(query);
  p.set("sort", query.sort);
  p.set("page", String(query.page));
  p.set("page_size", String(pageSize));
  return `runs?${p.toString()}`;
}

// Periods: 7d, 30d (default), 90d, a month YYYY-MM, or a range of days YYYY-MM-DD..YYYY-MM-DD
// (both ends included, at most 366 days), as the portal API takes them.

export const ROLLING_PERIODS = ["7d", "30d", "90d"] as const;
export const DEFAULT_PERIOD = "30d";
export const MAX_RANGE_DAYS = 366;
const RANGE_RE = /^(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})$/;
const DAY_MS = 86_400_000;

export function isMonth(value: string): boolean {
  return MONTH_RE.test(value) && value >= "2000-01" && value <= "2099-12";
}

/** A calendar date YYYY-MM-DD that exists (not 2026-02-30), from 2000 to 2099. */
export function isDay(value: string): boolean {
  if (!DATE_RE.test(value) || value < "2000-01-01" || value > "2099-12-31") return false;
  const d = new Date(`${value}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === value;
}

function dayMs(day: string): number {
  return Date.parse(`${day}T00:00:00Z`);
}

export function addDays(day: string, n: number): string {
  return new Date(dayMs(day) + n * DAY_MS).toISOString().slice(0, 10);
}

/** Days from `start` to `end`, both included. */
export function daysBetween(start: string, end: string): number {
  return Math.round((dayMs(end) - dayMs(start)) / DAY_MS) + 1;
}

export function isRange(value: string): boolean {
  const m = RANGE_RE.exec(value);
  return !!m && isDay(m[1]) && isDay(m[2]) && m[1] <= m[2] && daysBetween(m[1], m[2]) <= MAX_RANGE_DAYS;
}

export function isPeriod(value: string): boolean {
  return (ROLLING_PERIODS as readonly string[]).includes(value) || isMonth(value) || isRange(value);
}

/** The period in a URL, and the text that was not one (shown to the reader rather than ignored). */
export function parsePeriodParam(value: string | null | undefined): { period: string; invalid: string | null } {
  const v = (value ?? "").trim();
  if (!v) return { period: DEFAULT_PERIOD, invalid: null };
  return isPeriod(v) ? { period: v, invalid: null } : { period: DEFAULT_PERIOD, invalid: v };
}

export function parsePeriod(value: string | null | undefined): string {
  return parsePeriodParam(value).period;
}

function todayUtc(now: Date): string {
  return now.toISOString().slice(0, 10);
}

function monthEnd(month: string): string {
  return addDays(`${shiftMonth(month, 1)}-01`, -1);
}

/** The first and last day of a period (UTC), as the API resolves it. */
export function periodDates(period: string, now: Date = new Date()): { start: string; end: string } {
  const range = RANGE_RE.exec(period);
  if (range) return { start: range[1], end: range[2] };
  if (isMonth(period)) return { start: `${period}-01`, end: monthEnd(period) };
  const days = Number.parseInt(period, 10) || 30;
  const end = todayUtc(now);
  return { start: addDays(end, 1 - days), end };
}

/** The period for a range of days: a whole calendar month reads as that month. */
export function rangePeriod(start: string, end: string): string {
  const month = start.slice(0, 7);
  if (start === `${month}-01` && end === monthEnd(month)) return month;
  return `${start}..${end}`;
}

export function periodLabel(period: string): string {
  if (period === "7d") return "Last 7 days";
  if (period === "30d") return "Last 30 days";
  if (period === "90d") return "Last 90 days";
  const range = RANGE_RE.exec(period);
  if (range) return `${shortDay(range[1], range[1].slice(0, 4) !== range[2].slice(0, 4))} – ${shortDay(range[2], true)}`;
  if (isMonth(period)) {
    const [y, m] = period.split("-").map(Number);
    return new Date(Date.UTC(y, m - 1, 1)).toLocaleString("en-US", { month: "long", year: "numeric", timeZone: "UTC" });
  }
  return period;
}

function shortDay(day: string, withYear: boolean): string {
  return new Date(`${day}T00:00:00Z`).toLocaleString("en-US", { month: "short", day: "numeric", ...(withYear ? { year: "numeric" } : {}), timeZone: "UTC" });
}

/** The current calendar month in UTC, as the API names months. */
export function currentMonth(now: Date = new Date()): string {
  return `${now.getUTCFullYear()}-${String(now.getUTCMonth() + 1).padStart(2, "0")}`;
}

export function shiftMonth(month: string, delta: number): string {
  const [y, m] = month.split("-").map(Number);
  const index = y * 12 + (m - 1) + delta;
  return `${Math.floor(index / 12)}-${String((index % 12) + 1).padStart(2, "0")}`;
}

/** The last `count` months ending with `latest`, newest first. */
export function recentMonths(latest: string, count: number): string[] {
  return Array.from({ length: count }, (_, i) => shiftMonth(latest, -i));
}

// Client-side sorting for tables the API returns whole (leaderboards, finance, ranks).

type Accessor<T> = (row: T, key: string) => unknown;

const defaultAccessor = <T,>(row: T, key: string): unknown => (row as Record<string, unknown>)[key];

/** Sorts a copy by `sort` ("-key" descending); nulls always last; ties keep their order. */
export function sortRows<T>(rows: readonly T[], sort: string, accessor: Accessor<T> = defaultAccessor): T[] {
  const { key, desc } = parseSort(sort);
  const dir = desc ? -1 : 1;
  return rows
    .map((row, index) => ({ row, index, value: accessor(row, key) }))
    .sort((a, b) => {
      const an = a.value === null || a.value === undefined || (typeof a.value === "number" && Number.isNaN(a.value));
      const bn = b.value === null || b.value === undefined || (typeof b.value === "number" && Number.isNaN(b.value));
      if (an || bn) return an === bn ? a.index - b.index : an ? 1 : -1;
      let c: number;
      if (typeof a.value === "number" && typeof b.value === "number") c = a.value - b.value;
      else c = String(a.value).localeCompare(String(b.value), "en", { numeric: true, sensitivity: "base" });
      return c !== 0 ? c * dir : a.index - b.index;
    })
    .map((x) => x.row);
}
