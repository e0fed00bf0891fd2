import {
  activeFilterCount,
  isDay,
  parsePeriodParam,
  periodDates,
  periodLabel,
  rangePeriod,
  currentMonth,
  DEFAULT_SORT,
  EMPTY_RUNS_QUERY,
  parsePeriod,
  parseRunsQuery,
  recentMonths,
  runsApiPath,
  runsQueryToParams,
  shiftMonth,
  sortRows,
  toggleSort,
  updateRunsQuery,
} from "./urlState";

describe("runs filters in the URL", () => {
  it("reads filters, sort and page from the query string", () => {
    const q = parseRunsQuery(new URLSearchParams("team=nlp&status=failed&gpu=H100-SXM&from=2026-11-01&sort=-cost_usd&page=3&q=%20bert%20"));
    expect(q).toMatchObject({ team: "nlp", status: "failed", gpu: "H100-SXM", from: "2026-11-01", sort: "-cost_usd", page: 3, q: "bert" });
  });

  it("falls back to defaults for malformed values instead of sending them to the API", () => {
    const q = parseRunsQuery(new URLSearchParams("status=exploded&from=yesterday&sort=-name&page=-2"));
    expect(q.status).toBe("");
    expect(q.from).toBe("");
    expect(q.sort).toBe(DEFAULT_SORT);
    expect(q.page).toBe(1);
  });

  it("writes only what differs from the defaults, in a stable order", () => {
    expect(runsQueryToParams(EMPTY_RUNS_QUERY).toString()).toBe("");
    const params = runsQueryToParams({ ...EMPTY_RUNS_QUERY, status: "running", q: "llm", sort: "mfu", page: 2 });
    expect(params.toString()).toBe("q=llm&status=running&sort=mfu&page=2");
  });

  it("survives a round trip through the URL", () => {
    const query = { ...EMPTY_RUNS_QUERY, team: "vision", tag: "ddp", to: "2026-11-30", sort: "-started_at", page: 4 };
    expect(parseRunsQuery(runsQueryToParams(query))).toEqual(query);
  });

  it("starts again at page 1 when a filter or the sort changes, not when the page does", () => {
    const q = { ...EMPTY_RUNS_QUERY, page: 5 };
    expect(updateRunsQuery(q, { status: "failed" }).page).toBe(1);
    expect(updateRunsQuery(q, { sort: "mfu" }).page).toBe(1);
    expect(updateRunsQuery(q, { page: 6 }).page).toBe(6);
  });

  it("always gives the API the sort, page and page size", () => {
    expect(runsApiPath(EMPTY_RUNS_QUERY)).toBe("runs?sort=-recoverable_usd&page=1&page_size=50");
    expect(runsApiPath({ ...EMPTY_RUNS_QUERY, team: "nlp" }, 20)).toBe("runs?team=nlp&sort=-recoverable_usd&page=1&page_size=20");
  });

  it("counts active filters", () => {
    expect(activeFilterCount({ ...EMPTY_RUNS_QUERY, team: "a", q: "  " , status: "failed"})).toBe(2);
  });
});

describe("sorting", () => {
  it("sorts descending first, then flips", () => {
    expect(toggleSort("-recoverable_usd", "cost_usd")).toBe("-cost_usd");
    expect(toggleSort("-cost_usd", "cost_usd")).toBe("cost_usd");
    expect(toggleSort("cost_usd", "cost_usd")).toBe("-cost_usd");
  });

  it("sorts rows with nulls last in both directions and keeps ties in order", () => {
    const rows = [
      { k: "a", v: 2 },
      { k: "b", v: null },
      { k: "c", v: 5 },
      { k: "d", v: 2 },
    ];
    expect(sortRows(rows, "-v").map((r) => r.k)).toEqual(["c", "a", "d", "b"]);
    expect(sortRows(rows, "v").map((r) => r.k)).toEqual(["a", "d", "c", "b"]);
    expect(rows.map((r) => r.k)).toEqual(["a", "b", "c", "d"]);
  });

  it("sorts text naturally and through an accessor", () => {
    const rows = [{ n: "run-10" }, { n: "run-9" }, { n: "Run-1" }];
    expect(sortRows(rows, "n").map((r) => r.n)).toEqual(["Run-1", "run-9", "run-10"]);
    const nested = [{ c: { x: 1 } }, { c: { x: 3 } }];
    expect(sortRows(nested, "-x", (r, key) => r.c[key as "x"]).map((r) => r.c.x)).toEqual([3, 1]);
  });
});

describe("periods and months", () => {
  it("accepts 7d, 30d, 90d and months, and defaults to 30d", () => {
    expect(parsePeriod("7d")).toBe("7d");
    expect(parsePeriod("2026-11")).toBe("2026-11");
    expect(parsePeriod("2026-13")).toBe("30d");
    expect(parsePeriod("12d")).toBe("30d");
    expect(parsePeriod(null)).toBe("30d");
  });

  it("takes a range of days as a period, and says what was not a period instead of ignoring it", () => {
    expect(parsePeriodParam("2026-11-03..2026-11-17")).toEqual({ period: "2026-11-03..2026-11-17", invalid: null });
    expect(parsePeriodParam("bogus")).toEqual({ period: "30d", invalid: "bogus" });
    expect(parsePeriodParam("2026-13").invalid).toBe("2026-13");
    expect(parsePeriodParam("2026-11-17..2026-11-03").invalid).toBe("2026-11-17..2026-11-03");
    expect(parsePeriodParam("2025-01-01..2026-06-01").invalid).not.toBeNull(); // more than 366 days
    expect(parsePeriodParam("").invalid).toBeNull();
    expect(isDay("2026-02-30")).toBe(false);
  });

  it("resolves every kind of period to its days, and names it", () => {
    const now = new Date("2026-11-30T12:00:00Z");
    expect(periodDates("7d", now)).toEqual({ start: "2026-11-24", end: "2026-11-30" });
    expect(periodDates("2026-02", now)).toEqual({ start: "2026-02-01", end: "2026-02-28" });
    expect(periodDates("2026-11-03..2026-11-17", now)).toEqual({ start: "2026-11-03", end: "2026-11-17" });
    expect(rangePeriod("2026-11-01", "2026-11-30")).toBe("2026-11");
    expect(rangePeriod("2026-11-01", "2026-11-29")).toBe("2026-11-01..2026-11-29");
    expect(periodLabel("2026-11-03..2026-11-17")).toBe("Nov 3 – Nov 17, 2026");
    expect(periodLabel("2025-12-20..2026-01-05")).toBe("Dec 20, 2025 – Jan 5, 2026");
    expect(periodLabel("2026-11")).toBe("November 2026");
  });

  it("steps through months across years", () => {
    expect(shiftMonth("2026-01", -1)).toBe("2025-12");
    expect(shiftMonth("2026-12", 1)).toBe("2027-01");
    expect(recentMonths("2026-02", 3)).toEqual(["2026-02", "2026-01", "2025-12"]);
    expect(currentMonth(new Date("2026-12-01T00:30:00Z"))).toBe("2026-12");
  });
});
