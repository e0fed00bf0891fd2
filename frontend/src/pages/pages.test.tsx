import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter } from "react-router";

import { AppRoutes } from "../App";
import { SessionProvider } from "../api/session";
import { ThemeProvider } from "../lib/theme";
import { renderAt, Where } from "../test/render";
import { analysis, leaderboard, mockFetch, PEER_RUN_IDS, recommendation, runDetail, runRow } from "../test/fixtures";
import { LeaderboardsPage } from "./Leaderboards";
import { RunDetailPage } from "./RunDetail";
import { RunsPage } from "./Runs";
import { SettingsPage } from "./Settings";
import { safeNext } from "./SignIn";

vi.mock("../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

const admin = { username: "ada", is_finance: false, is_org_admin: true, teams: [{ slug: "nlp", name: "NLP", role: "admin" }] };
const signedIn = { authenticated: true, user: admin, csrf_token: "tok" };

afterEach(() => vi.unstubAllGlobals());

describe("Runs page", () => {
  it("reads its filters from the URL, asks the API for them and shows them in the controls", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow({ status: "failed" })] },
      "/api/v1/pricing/gpus": [{ key: "H100-SXM", vendor: "NVIDIA", name: "H100", memory_bytes: 1, peak_tflops: {}, sources: [], notes: "" }],
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/runs?status=failed&q=pre", <RunsPage />, "/runs");
    expect(await screen.findByText("pretrain-a")).toBeInTheDocument();
    const runsCall = api.calls.find((c) => c.url.startsWith("/api/v1/portal/runs"))!;
    expect(runsCall.url).toBe("/api/v1/portal/runs?q=pre&status=failed&sort=-recoverable_usd&page=1&page_size=50");
    expect(screen.getByLabelText("Status")).toHaveValue("failed");
    expect(screen.getByLabelText("Search")).toHaveValue("pre");
    expect(screen.getByText("1 run matching 2 filters")).toBeInTheDocument();
  });

  it("puts a changed filter and sort into the URL", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow()] },
      "/api/v1/pricing/gpus": [],
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/runs", <RunsPage />, "/runs");
    await screen.findByText("pretrain-a");
    await userEvent.selectOptions(screen.getByLabelText("Status"), "running");
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?status=running");
    await userEvent.click(screen.getByRole("button", { name: "Sort by Cost" }));
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?status=running&sort=-cost_usd");
    await waitFor(() => expect(api.calls.some((c) => c.url.includes("status=running&sort=-cost_usd"))).toBe(true));
  });

  it("says so when no run matches", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 0, page: 1, page_size: 50, results: [] },
      "/api/v1/pricing/gpus": [],
    }).fn);
    renderAt("/runs?tag=none", <RunsPage />, "/runs");
    expect(await screen.findByText("No runs match these filters")).toBeInTheDocument();
  });

  it("says a day in the URL that is not one is left out, instead of quietly dropping it", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow()] },
      "/api/v1/pricing/gpus": [],
    }).fn);
    renderAt("/runs?from=yesterday&to=2026-11-30", <RunsPage />, "/runs");
    expect(await screen.findByTestId("param-notice")).toHaveTextContent("“yesterday” is not a day (YYYY-MM-DD) for “billed from”: that filter is left out.");
  });

  it("says a page past the last one is past it, and goes to the last page", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 359, page: 99, page_size: 50, pages: 8, results: [] },
      "/api/v1/pricing/gpus": [],
    }).fn);
    renderAt("/runs?page=99", <RunsPage />, "/runs");
    expect(await screen.findByText("Page 99 is past the last page")).toBeInTheDocument();
    expect(screen.queryByText("No runs yet")).not.toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "Go to page 8" }));
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?page=8");
  });

  it("links each run keeping the billed days filtered on, and exports what it lists", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow()] },
      "/api/v1/pricing/gpus": [],
    }).fn);
    renderAt("/runs?team=nlp&from=2026-11-01&to=2026-11-30", <RunsPage />, "/runs");
    const link = await screen.findByRole("link", { name: "pretrain-a" });
    expect(link).toHaveAttribute("href", "/runs/11111111-1111-4111-8111-111111111111?period=2026-11");
    expect(screen.getByTestId("runs-csv")).toHaveAttribute("href", "/api/v1/portal/runs.csv?team=nlp&from=2026-11-01&to=2026-11-30&sort=-recoverable_usd");
    expect(screen.getByText("8× H100-SXM")).toBeInTheDocument();
  });
});

describe("Leaderboards page", () => {
  const board = leaderboard([
    { key: "vision", name: "Vision", recoverable_usd: 120, cost_usd: 900 },
    { key: "nlp", name: "NLP", recoverable_usd: 300, cost_usd: 500 },
    { key: "speech", name: "Speech", recoverable_usd: 80, cost_usd: 1000 },
  ]);

  it("ranks teams by recoverable spend and re-sorts from a header button", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/leaderboards/teams": board }).fn);
    renderAt("/leaderboards", <LeaderboardsPage />, "/leaderboards");
    const table = await screen.findByTestId("leaderboard-teams");
    const order = () => within(table).getAllByRole("row").slice(1).map((r) => r.getAttribute("data-row-key"));
    expect(order()).toEqual(["nlp", "vision", "speech"]);
    await userEvent.click(screen.getByRole("button", { name: "Sort by Spend" }));
    expect(screen.getByTestId("location")).toHaveTextContent("sort=-cost_usd");
    expect(order()).toEqual(["speech", "vision", "nlp"]);
  });

  it("opens a team from its row", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/leaderboards/teams": board }).fn);
    renderAt("/leaderboards", <LeaderboardsPage />, "/leaderboards");
    await userEvent.click(await screen.findByText("Vision"));
    expect(screen.getByTestId("location")).toHaveTextContent("/teams/vision");
  });

  it("keeps the period on the way to the team, and moves between rows with the arrow keys", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/leaderboards/teams": board }).fn);
    renderAt("/leaderboards?period=2026-11", <LeaderboardsPage />, "/leaderboards");
    const table = await screen.findByTestId("leaderboard-teams");
    const rows = within(table).getAllByRole("row").slice(1);
    rows[0].focus();
    await userEvent.keyboard("{ArrowDown}");
    expect(rows[1]).toHaveFocus();
    await userEvent.keyboard("{End}");
    expect(rows[2]).toHaveFocus();
    expect(screen.getByTestId("leaderboard-csv")).toHaveAttribute("href", "/api/v1/portal/leaderboards/teams.csv?period=2026-11&sort=-recoverable_usd");
    await userEvent.keyboard("{ArrowUp}{Enter}");
    expect(screen.getByTestId("location")).toHaveTextContent("/teams/vision?period=2026-11");
  });

  it("says a period in the URL is not one, rather than quietly showing another", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/leaderboards/teams": board }).fn);
    renderAt("/leaderboards?period=bogus", <LeaderboardsPage />, "/leaderboards");
    expect(await screen.findByTestId("param-notice")).toHaveTextContent("“bogus” is not a period");
    expect(screen.getByTestId("param-notice")).toHaveTextContent("showing the last 30 days instead");
  });
});

describe("Run page", () => {
  it("shows the cost, the six categories and the analysis' explanation of the cost", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/11111111-1111-4111-8111-111111111111", <RunDetailPage />, "/runs/:id");
    const breakdown = await screen.findByTestId("breakdown");
    // Header, six categories, an evidence line under each of the five waste categories, total.
    expect(within(breakdown).getAllByRole("row")).toHaveLength(1 + 6 + 5 + 1);
    expect(within(breakdown).getByText("Data stall").closest("tr")).toHaveTextContent("$25.00");
    expect(screen.getByTestId("run-cost")).toHaveTextContent("$104.00");
    expect(screen.getByText("GPUs wait for input batches")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "How cost is computed" }));
    expect(screen.getByRole("dialog")).toHaveTextContent("segment_0_usd_per_gpu_hour");
    expect(screen.getAllByTestId("chart").map((c) => c.textContent)).toEqual(
      expect.arrayContaining(["Step time by stage over the run", "MFU and GPU utilization over the run", "GPU memory over the run"]),
    );
  });

  it("shows each category's recoverable dollars with their range, and the headline's range under it", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    expect(screen.getByTestId("recoverable-data_stall")).toHaveTextContent("$20.10");
    expect(screen.getByTestId("recoverable-range-data_stall")).toHaveTextContent("$15.00–$22.00");
    expect(screen.getByTestId("run-recoverable")).toHaveTextContent("$33.50");
    expect(screen.getByTestId("run-recoverable-range")).toHaveTextContent("range $25.20–$38.50");
    expect(screen.getByTestId("recoverable-range-total")).toHaveTextContent("$25.20–$38.50");
  });

  it("says \"no evidence\" for a category without any, not $0.00 as if it had been measured", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    const comm = screen.getByTestId("recoverable-comm_exposed");
    expect(comm).toHaveTextContent("no evidence");
    expect(comm).not.toHaveTextContent("$");
    expect(comm.closest("tr")).not.toHaveTextContent("$0.00");
    const line = document.querySelector('[data-evidence-for="comm_exposed"]')!;
    expect(line).toHaveTextContent("no evidence");
    expect(line).toHaveTextContent("No stretch of the run overlapped communication with compute");
  });

  it("names each category's evidence in product words with its summary, and only shows a cap that matters", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    const line = (c: string) => document.querySelector(`[data-evidence-for="${c}"]`)!;
    expect(within(line("data_stall") as HTMLElement).getByText("best stretch")).toHaveClass("badge");
    expect(line("data_stall")).toHaveTextContent("The run's best 200-step stretch waited 2.1 ms per step for data");
    expect(line("data_stall")).toHaveTextContent("0:01–0:03 into the run, 200 steps");
    expect(line("compute_inefficiency")).toHaveTextContent("peer runs");
    expect(line("host_overhead")).toHaveTextContent("target");
    expect(line("idle")).toHaveTextContent("project median");
    expect(line("idle")).toHaveTextContent("reference 1 m 10 s (range 1 m 00 s to 1 m 30 s)");
    // The cap column appears because host overhead's 50% cap cut its figure; 100% caps stay blank.
    expect(screen.getByRole("columnheader", { name: "Cap" })).toBeInTheDocument();
    expect(screen.getByTestId("cap-host_overhead")).toHaveTextContent("50%applied");
    expect(screen.queryByTestId("cap-data_stall")).not.toBeInTheDocument();
    expect(screen.queryByTestId("cap-useful_compute")).not.toBeInTheDocument();
    // No internal names in what the page says.
    expect(screen.getByTestId("breakdown").textContent).not.toMatch(/[a-z]+_[a-z]+/);
  });

  it("leaves the cap column out when every cap is 100% and none cut a figure", async () => {
    const a = analysis();
    a.categories.host_overhead = { ...a.categories.host_overhead, cap: 1, evidence: { ...a.categories.host_overhead.evidence, capped: false } };
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: a }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    expect(screen.queryByRole("columnheader", { name: "Cap" })).not.toBeInTheDocument();
  });

  it("names peer runs by their names where the analysis gives them", async () => {
    const d = runDetail();
    d.analysis!.categories.compute_inefficiency.evidence.peer_runs = PEER_RUN_IDS.map((id, i) => ({ id, name: `pretrain-peer-${i}` }));
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": d }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    const peers = within(document.querySelector('[data-evidence-for="compute_inefficiency"]') as HTMLElement).getAllByRole("link");
    expect(peers.map((l) => l.textContent)).toEqual(["pretrain-peer-0", "pretrain-peer-1"]);
  });

  it("says in plain words that the analysis failed, why, and when it tries again", async () => {
    const error = { message: "allocation_start is outside 2000-01-01..2100-01-01", failures: 3, retry_at: null };
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: null, analysis_status: "failed", analysis_error: error }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const failed = await screen.findByTestId("analysis-failed");
    expect(failed).toHaveTextContent("The analysis of this run failed");
    expect(failed).toHaveTextContent(error.message);
    expect(failed).toHaveTextContent("failed 3 times; it is tried again when new telemetry arrives");
    expect(screen.queryByText("Analysis pending")).not.toBeInTheDocument();
  });

  it("keeps older figures when only the latest re-analysis failed, and says so", async () => {
    const error = { message: "boom", failures: 1, retry_at: "2099-01-01T10:30:00Z" };
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: analysis({ analysis_error: error }) }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const notice = await screen.findByTestId("reanalysis-failed");
    expect(notice).toHaveTextContent("The latest re-analysis of this run failed (boom); it has failed once; it is tried again at Jan 1, 10:30 UTC");
    expect(screen.getByTestId("breakdown")).toBeInTheDocument();
  });

  it("foots every column of the breakdown: the rows add up to the total shown", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const breakdown = await screen.findByTestId("breakdown");
    const money = (t: string) => Number((/\$([\d,]+\.\d\d)/.exec(t)?.[1] ?? "0").replace(/,/g, ""));
    const rows = Array.from(breakdown.querySelectorAll("tr[data-category]"));
    const total = breakdown.querySelector('[data-testid="breakdown-total"]')!;
    for (const col of [2, 3, 4]) {
      const cells = rows.map((r) => r.children[col].textContent ?? "");
      const sum = cells.reduce((a, t) => a + (col === 3 ? Number.parseFloat(t) || 0 : money(t)), 0);
      const shown = total.children[col].textContent ?? "";
      expect(Math.round(sum * 100)).toBe(Math.round((col === 3 ? Number.parseFloat(shown) : money(shown)) * 100));
    }
  });

  it("leaves a way back when the run is not there", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn }).fn);
    renderAt("/runs/nope?period=7d", <RunDetailPage />, "/runs/:id");
    expect(await screen.findByText("Not found, or not visible to you")).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "← All runs" })).toHaveAttribute("href", expect.stringMatching(/^\/runs\?from=.*&to=/));
    expect(screen.getByRole("link", { name: "Overview" })).toHaveAttribute("href", "/?period=7d");
  });

  it("links each peer run, keeping the period the page was opened with", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r?period=7d", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    const peers = within(document.querySelector('[data-evidence-for="compute_inefficiency"]') as HTMLElement).getAllByRole("link");
    expect(peers.map((l) => l.getAttribute("href"))).toEqual(PEER_RUN_IDS.map((id) => `/runs/${id}?period=7d`));
    expect(peers[0]).toHaveTextContent("22222222");
    await userEvent.click(peers[1]);
    expect(screen.getByTestId("location")).toHaveTextContent(`/runs/${PEER_RUN_IDS[1]}?period=7d`);
  });

  it("highlights the best stretch on the step-time chart from the data-stall row, and clears it", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    const control = screen.getByRole("button", { name: "Highlight the data stall stretch on the step-time chart" });
    expect(control).toHaveAttribute("aria-pressed", "false");
    // Only own-stretch evidence has a window to highlight.
    expect(screen.getAllByRole("button", { name: /^Highlight the/ })).toHaveLength(1);
    await userEvent.click(control);
    expect(control).toHaveAttribute("aria-pressed", "true");
    expect(screen.getByTestId("chart-highlight")).toHaveTextContent("highlighted: data stall: best stretch, 0:01–0:03");
    expect(screen.getByText("Step time by stage over the run, with data stall: best stretch highlighted")).toBeInTheDocument();
    await userEvent.click(within(screen.getByTestId("chart-highlight")).getByRole("button", { name: "Clear" }));
    expect(control).toHaveAttribute("aria-pressed", "false");
    expect(screen.queryByTestId("chart-highlight")).not.toBeInTheDocument();
  });

  it("gives a recurring recommendation's saving per run and per month at the project's volume", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const rec = await screen.findByTestId("rec-DATA_STALL");
    expect(within(rec).getByTestId("rec-saving")).toHaveTextContent("saves $20.10 on this run");
    expect(within(rec).getByTestId("rec-monthly")).toHaveTextContent("$1,256.25 / month at this project's volume in the last 30 days (1,000 GPU-h)");
    expect(rec).toHaveTextContent("data stall share of billed GPU time");
    expect(document.body.textContent).not.toMatch(/× 730|run hours/);
    // No cost "per month at this rate" either: a one-off run is not a monthly bill.
    expect(screen.getByTestId("run-cost")).toHaveTextContent("$6.50 per GPU-hour");
    expect(screen.getByTestId("run-cost")).not.toHaveTextContent(/month/);
  });

  it("says a one-off run has no monthly figure, and a diagnostic has no saving", async () => {
    const oneOff = recommendation({ saving_usd_per_month: null, recurrence: { kind: "one_off", project_gpu_hours_30d: 16, other_runs_30d: 0, run_gpu_hours: 16 } });
    const diagnostic = recommendation({ code: "OOM", title: "Out of memory", category: "memory", saving_usd: null, claims: {}, saving_usd_per_month: null, explain: null });
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: analysis({ recommendations: [oneOff, diagnostic] }) }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const rec = await screen.findByTestId("rec-DATA_STALL");
    expect(within(rec).getByTestId("rec-saving")).toHaveTextContent("saves $20.10 on this run");
    expect(within(rec).getByTestId("rec-monthly")).toHaveTextContent("no monthly figure: no other run of this project in the last 30 days");
    expect(rec).not.toHaveTextContent("/ month");
    const oom = screen.getByTestId("rec-OOM");
    expect(screen.queryAllByTestId("rec-monthly")).toHaveLength(1);
    expect(oom).toHaveTextContent("a diagnostic: no saving priced on its own");
    expect(oom).not.toHaveTextContent("$");
  });

  it("says why a recommendation saves nothing, in the server's words, never \"no saving left to claim\"", async () => {
    // The server issues no $0 saving: a rule with nothing recoverable is an unpriced finding saying why.
    const reason = "not priced separately: nothing of its comm_exposed is recoverable: no stretch of this run, comparable finished run or target demonstrates a better level";
    const unpriced = recommendation({ code: "COMM_EXPOSED", category: "comm_exposed", severity: "high", saving_usd: null, claims: {}, saving_usd_per_month: null, explain: { value: null, unit: "USD", formula: reason, inputs: {} } });
    const tiny = recommendation({ code: "HOST_OVERHEAD", category: "host_overhead", severity: "high", saving_usd: null, claims: {}, saving_usd_per_month: null, explain: { value: null, unit: "USD", formula: "not priced separately: its host overhead cost under a cent on this run: too little to price a saving", inputs: {} } });
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: analysis({ recommendations: [unpriced, tiny] }) }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const comm = await screen.findByTestId("rec-COMM_EXPOSED");
    expect(within(comm).getByTestId("rec-saving-none")).toHaveTextContent("no saving priced on this run: nothing of its exposed communication is recoverable");
    expect(comm).not.toHaveTextContent("$0.00");
    expect(within(screen.getByTestId("rec-HOST_OVERHEAD")).getByTestId("rec-saving-none")).toHaveTextContent("its host overhead cost under a cent on this run");
    expect(document.body.textContent).not.toMatch(/no saving left to claim/);
    expect(screen.getByTestId("headline-recommendations")).toHaveTextContent("Recommendations: none is priced on this run (2 findings without a saving of their own).");
  });

  it("shows dropped rows and warnings in plain words, pointed at from the top of the page", async () => {
    const a = analysis({
      dropped_rows: { non_rising_start: 3, reused_step: 120 },
      warnings: ["8 ranks reported but world_size is 1: GPU time is scaled by the ranks seen."],
    });
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: a }) }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    const notes = await screen.findByTestId("data-quality");
    const items = within(notes).getAllByRole("listitem").map((li) => li.textContent);
    expect(items[0]).toMatch(/^3 steps left out: each started no later than the step before it/);
    expect(items[1]).toMatch(/^120 steps refused: each reused a step number/);
    expect(items[2]).toBe("8 ranks reported but world size is 1: GPU time is scaled by the ranks seen.");
    expect(screen.getByTestId("data-quality-notice")).toHaveTextContent("3 notes on this run's telemetry may affect its figures");
  });

  it("shows no data-quality notes when nothing was dropped and nothing warned", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/r", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("breakdown");
    expect(screen.queryByTestId("data-quality")).not.toBeInTheDocument();
    expect(screen.queryByTestId("data-quality-notice")).not.toBeInTheDocument();
  });

  it("says the analysis is pending instead of showing zeros", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail({ analysis: null, series: null }) }).fn);
    renderAt("/runs/x", <RunDetailPage />, "/runs/:id");
    expect(await screen.findByText("Analysis pending")).toBeInTheDocument();
    expect(screen.queryByTestId("breakdown")).not.toBeInTheDocument();
  });

  it("answers a run one may not see with a not-found state", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn }).fn);
    renderAt("/runs/x", <RunDetailPage />, "/runs/:id");
    expect(await screen.findByText("Not found, or not visible to you")).toBeInTheDocument();
  });
});

describe("Settings: waste model", () => {
  it("calls the per-category factors caps on what is called recoverable, and saves them", async () => {
    const caps = { useful_compute: 0, compute_inefficiency: 1, data_stall: 0.5, comm_exposed: 1, host_overhead: 1, idle: 1 };
    const api = mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/settings": { target_mfu: 0.5, recoverability: caps, crash_after_s: 900, defaults: { target_mfu: 0.5, recoverability: { ...caps, data_stall: 1 } } },
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/settings", <SettingsPage />, "/settings");
    const input = await screen.findByLabelText("Cap on the recoverable share of data stall");
    await waitFor(() => expect(input).toHaveValue(0.5));
    expect(input.closest("tr")).toHaveTextContent("at most 50%");
    expect(input.closest("tr")).toHaveTextContent("100%");
    expect(screen.getByRole("columnheader", { name: "Cap on recoverable share (0–1)" })).toBeInTheDocument();
    expect(screen.queryByLabelText(/useful compute/)).not.toBeInTheDocument();
    expect(document.body.textContent).not.toMatch(/recoverability/i);
    await userEvent.clear(input);
    await userEvent.type(input, "0.8");
    await userEvent.click(screen.getByRole("button", { name: "Save" }));
    await waitFor(() => expect(api.calls.some((c) => c.init?.method === "PUT")).toBe(true));
    const body = JSON.parse(String(api.calls.find((c) => c.init?.method === "PUT")!.init!.body));
    expect(body.recoverability).toEqual({ ...caps, data_stall: 0.8 });
  });

  it("names a refused cap as the form does, not by its API field", async () => {
    const caps = { useful_compute: 0, compute_inefficiency: 1, data_stall: 1, comm_exposed: 1, host_overhead: 1, idle: 1 };
    const refusal = { error: { code: "invalid", message: "recoverability.idle: Ensure this value is less than or equal to 1.", fields: { "recoverability.idle": "Ensure this value is less than or equal to 1." } } };
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/settings": (_url: string, init?: RequestInit) =>
        init?.method === "PUT" ? new Response(JSON.stringify(refusal), { status: 400 }) : { target_mfu: 0.5, recoverability: caps, crash_after_s: 900, defaults: { target_mfu: 0.5, recoverability: caps } },
    }).fn);
    renderAt("/settings", <SettingsPage />, "/settings");
    const input = await screen.findByLabelText("Cap on the recoverable share of idle");
    await waitFor(() => expect(input).toHaveValue(1));
    await userEvent.click(screen.getByRole("button", { name: "Save" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("Cap on idle: Ensure this value is less than or equal to 1.");
    expect(screen.getByRole("alert")).not.toHaveTextContent("recoverability");
    expect(input).toHaveClass("is-invalid");
  });
});

describe("signing in", () => {
  function app(url: string) {
    return render(
      <ThemeProvider>
        <SessionProvider>
          <MemoryRouter initialEntries={[url]}>
            <AppRoutes />
            <Where />
          </MemoryRouter>
        </SessionProvider>
      </ThemeProvider>,
    );
  }

  it("sends a signed-out visitor to the sign-in page and back to where they were going", async () => {
    let authenticated = false;
    const api = mockFetch({
      "/api/v1/portal/session": (_url: string, init?: RequestInit) => {
        if (init?.method === "POST") {
          const body = JSON.parse(String(init.body));
          if (body.password !== "right") return new Response(JSON.stringify({ error: { code: "invalid_credentials", message: "no" } }), { status: 400 });
          authenticated = true;
        }
        return authenticated ? signedIn : { authenticated: false, user: null, csrf_token: "tok" };
      },
      "/api/v1/portal/runs": { count: 0, page: 1, page_size: 50, results: [] },
      "/api/v1/pricing/gpus": [],
    });
    vi.stubGlobal("fetch", api.fn);
    app("/runs?status=failed");
    await screen.findByRole("heading", { name: "Sign in" });
    expect(screen.getByTestId("location")).toHaveTextContent("/login?next=%2Fruns%3Fstatus%3Dfailed");

    await userEvent.type(screen.getByLabelText("Username"), "ada");
    await userEvent.type(screen.getByLabelText("Password"), "wrong");
    await userEvent.click(screen.getByRole("button", { name: "Sign in" }));
    expect(await screen.findByRole("alert")).toHaveTextContent("That username and password do not match.");

    await userEvent.clear(screen.getByLabelText("Password"));
    await userEvent.type(screen.getByLabelText("Password"), "right");
    await userEvent.click(screen.getByRole("button", { name: "Sign in" }));
    await screen.findByRole("heading", { name: "Runs" });
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?status=failed");
    const post = api.calls.find((c) => c.init?.method === "POST")!;
    expect((post.init!.headers as Record<string, string>)["X-CSRFToken"]).toBe("tok");
  });

  it("follows only same-site paths after signing in", () => {
    expect(safeNext("/runs?x=1")).toBe("/runs?x=1");
    expect(safeNext("//evil.example")).toBe("/");
    expect(safeNext("https://evil.example")).toBe("/");
    expect(safeNext("/\\evil.example")).toBe("/");
    expect(safeNext(null)).toBe("/");
  });
});
