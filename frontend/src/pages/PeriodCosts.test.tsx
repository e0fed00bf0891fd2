import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { Leaderboard, RunTotals } from "../api/types";
import { periodFigure, wholeCost } from "../components/RunTable";
import { parseRunsQuery } from "../lib/urlState";
import { renderAt } from "../test/render";
import { mockFetch, runRow } from "../test/fixtures";
import { LeaderboardsPage } from "./Leaderboards";
import { RunsPage } from "./Runs";

const signedIn = { authenticated: true, user: { username: "ada", is_finance: true, is_org_admin: false, teams: [] }, csrf_token: "tok" };

afterEach(() => vi.unstubAllGlobals());

const totals: RunTotals = {
  runs: 109, gpu_hours: 900, cost_usd: 5337.5, whole_cost_usd: 5337.5, waste_usd: 2000, recoverable_usd: 800, waste_share: 0.3747,
  period_gpu_hours: 880.5, period_cost_usd: 5335.02, period_waste_usd: 1999, period_recoverable_usd: 799.1, period_waste_share: 0.3747,
};

// A run across the end of October: $14.63 of its $17.11 in October.
const crossing = runRow({ name: "crossing", cost_usd: 17.11, whole_cost_usd: 17.11, period_cost_usd: 14.63, period_recoverable_usd: 3.2, period_gpu_hours: 2.5, period_waste_usd: 5 });

describe("A list filtered by a period", () => {
  it("shows each run's cost in the period beside its whole cost, labelled, and a totals row over every page", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 109, page: 1, page_size: 50, pages: 3, period: { start: "2026-10-01", end: "2026-10-31" }, totals, results: [crossing] },
      "/api/v1/pricing/gpus": [],
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/runs?from=2026-10-01&to=2026-10-31", <RunsPage />, "/runs");
    const table = await screen.findByTestId("runs-table");
    const row = within(table).getByText("crossing").closest("tr")!;
    expect(within(table).getByRole("columnheader", { name: /In period/ })).toBeInTheDocument();
    expect(within(table).getByRole("columnheader", { name: /Whole run/ })).toBeInTheDocument();
    expect(row.querySelector('[data-col="period_cost_usd"]')).toHaveTextContent("$14.63");
    expect(row.querySelector('[data-col="cost_usd"]')).toHaveTextContent("$17.11");
    const foot = screen.getByTestId("runs-table-totals");
    expect(foot).toHaveTextContent("Total · 109 runs");
    expect(foot.querySelector('[data-col="period_cost_usd"]')).toHaveTextContent("$5,335.02");
    expect(foot.querySelector('[data-col="cost_usd"]')).toHaveTextContent("$5,337.50");
    expect(screen.getByTestId("runs-period-note")).toHaveTextContent("In period is each run's cost on those days");
    expect(screen.getByTestId("runs-shown")).toHaveTextContent("1–50 of 109");
    await userEvent.click(screen.getByRole("button", { name: /Sort by cost in the period/ }));
    expect(screen.getByTestId("location")).toHaveTextContent("sort=-period_cost_usd");
    expect(api.calls.filter((c) => c.url.includes("/portal/runs?")).at(-1)!.url).toContain("sort=-period_cost_usd");
  });

  it("without a period shows the whole cost alone, and totals it", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 109, page: 1, page_size: 50, pages: 3, period: null, totals, results: [runRow({ name: "crossing", cost_usd: 17.11, period_cost_usd: null })] },
      "/api/v1/pricing/gpus": [],
    }).fn);
    renderAt("/runs", <RunsPage />, "/runs");
    const table = await screen.findByTestId("runs-table");
    expect(within(table).queryByRole("columnheader", { name: /In period/ })).toBeNull();
    expect(screen.queryByTestId("runs-period-note")).toBeNull();
    expect(screen.getByTestId("runs-table-totals").querySelector('[data-col="cost_usd"]')).toHaveTextContent("$5,337.50");
  });

  it("reads a run's period and whole cost from either kind of row", () => {
    expect([periodFigure(crossing, "cost_usd"), wholeCost(crossing)]).toEqual([14.63, 17.11]);
    const boardRow = { key: "r1", name: "crossing", cost_usd: 14.63, recoverable_usd: 3.2, whole_cost_usd: 17.11 };
    expect([periodFigure(boardRow, "cost_usd"), periodFigure(boardRow, "recoverable_usd"), wholeCost(boardRow)]).toEqual([14.63, 3.2, 17.11]);
  });

  it("sorts by a period figure only while the list has billed days", () => {
    expect(parseRunsQuery(new URLSearchParams("sort=-period_cost_usd&from=2026-10-01")).sort).toBe("-period_cost_usd");
    expect(parseRunsQuery(new URLSearchParams("sort=-period_cost_usd")).sort).toBe("-cost_usd");
  });
});

function runsBoard(page: number, size: number): Leaderboard {
  const n = size >= 109 ? 109 : page === 1 ? 100 : 9;
  const offset = size >= 109 ? 0 : (page - 1) * 100;
  return {
    period: { start: "2026-10-01", end: "2026-10-31", label: "2026-10" },
    previous: { start: "2026-09-01", end: "2026-09-30" },
    count: 109,
    page,
    page_size: size,
    pages: size >= 109 ? 1 : 2,
    totals: { runs: 109, gpu_hours: 880.5, cost_usd: 5335.02, waste_usd: 1999, recoverable_usd: 799.1, waste_share: 0.3747, mfu: 0.3 },
    rows: Array.from({ length: n }, (_, i) => ({
      key: `run-${offset + i}`, name: `run ${offset + i}`, team: "nlp", project: "llm", runs: 1, gpu_hours: 1, cost_usd: 200 - offset - i,
      period_cost_usd: 200 - offset - i, whole_cost_usd: 210 - offset - i, waste_usd: 1, recoverable_usd: 1, waste_share: 0.1, mfu: 0.3,
      previous: null, change: null,
    })),
  };
}

describe("The runs leaderboard", () => {
  it("says 100 of 109, pages to the rest, shows all on request and totals every row", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/leaderboards/runs": (url: string) => {
        const params = new URL(url, "http://x").searchParams;
        return runsBoard(Number(params.get("page")), Number(params.get("page_size")));
      },
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/leaderboards?kind=runs&period=2026-10", <LeaderboardsPage />, "/leaderboards");
    const table = await screen.findByTestId("leaderboard-runs");
    expect(screen.getByTestId("leaderboard-count")).toHaveTextContent("100 of 109 runs");
    expect(screen.getByTestId("leaderboard-shown")).toHaveTextContent("1–100 of 109");
    expect(within(table).getByRole("columnheader", { name: /In period/ })).toBeInTheDocument();
    expect(within(table).getByRole("columnheader", { name: /Whole run/ })).toBeInTheDocument();
    expect(screen.getByTestId("leaderboard-runs-totals")).toHaveTextContent("Total · 109 runs");
    expect(screen.getByTestId("leaderboard-runs-totals").querySelector('[data-col="cost_usd"]')).toHaveTextContent("$5,335.02");
    const boardCalls = () => api.calls.filter((c) => c.url.includes("/leaderboards/runs"));
    expect(boardCalls().at(-1)!.url).toContain("page=1&page_size=100");

    await userEvent.click(screen.getByRole("button", { name: "Next" }));
    expect(await screen.findByText("run 108")).toBeInTheDocument();
    expect(screen.getByTestId("location")).toHaveTextContent("page=2");
    expect(screen.getByTestId("leaderboard-shown")).toHaveTextContent("101–109 of 109");

    await userEvent.click(screen.getByTestId("leaderboard-show-all"));
    expect(await screen.findByText("run 0")).toBeInTheDocument();
    expect(screen.getByTestId("location")).toHaveTextContent("all=1");
    expect(screen.getByTestId("location")).not.toHaveTextContent("page=");
    expect(boardCalls().at(-1)!.url).toContain("page=1&page_size=1000");
    expect(within(screen.getByTestId("leaderboard-runs")).getAllByRole("row")).toHaveLength(1 + 109 + 1);
    expect(screen.getByTestId("leaderboard-count")).toHaveTextContent("109 runs");
  });
});
