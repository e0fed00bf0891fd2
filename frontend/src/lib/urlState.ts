// State that lives in the URL (filters, sort, period, month) so a view can be shared and survives a
// reload. Parsing is forgiving (unknown or malformed values fall back to defaults) and writing
// omits defaults, so URLs stay short and canonical.

export const RUN_STATUSES = ["running", "finished", "failed", "crashed"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** Sort keys the runs API and the leaderboards API accept (prefix "-" for descending). */
export const SERVER_SORT_KEYS = ["recoverable_usd", "cost_usd", "mfu", "waste_share", "started_at"] as const;
export const DEFAULT_SORT = "-recoverable_usd";

export interface RunsQuery {
  q: string;
  team: string;
  project: string;
  status: string;
  gpu: string;
  tag: string;
  from: string;
  to: string;
  sort: string;
  page: number;
}

export const RUNS_FILTER_KEYS = ["q", "team", "project", "status", "gpu", "tag", "from", "to"] as const;
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
  const sort = get("sort");
  const page = Number.parseInt(get("page"), 10);
  return {
    q: get("q"),
    team: get("team"),
    project: get("project"),
    status: (RUN_STATUSES as readonly string[]).includes(status) ? status : "",
    gpu: get("gpu"),
    tag: get("tag"),
    from: DATE_RE.test(from) ? from : "",
    to: DATE_RE.test(to) ? to : "",
    sort: sort && isServerSort(sort) ? sort : DEFAULT_SORT,
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

// Periods: 7d, 30d (default), 90d, or a month YYYY-MM.

export const ROLLING_PERIODS = ["7d", "30d", "90d"] as const;
export const DEFAULT_PERIOD = "30d";

export function isMonth(value: string): boolean {
  return MONTH_RE.test(value);
}

export function parsePeriod(value: string | null | undefined): string {
  const v = (value ?? "").trim();
  if ((ROLLING_PERIODS as readonly string[]).includes(v) || isMonth(v)) return v;
  return DEFAULT_PERIOD;
}

export function periodLabel(period: string): string {
  if (period === "7d") return "Last 7 days";
  if (period === "30d") return "Last 30 days";
  if (period === "90d") return "Last 90 days";
  return period;
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
