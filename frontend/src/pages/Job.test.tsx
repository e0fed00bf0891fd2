import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { JobAttempt, RunJobRef } from "../api/types";
import { jobAttempt, jobAttempts, jobDetail, leaderboard, mockFetch, runDetail, runRow } from "../test/fixtures";
import { renderAt } from "../test/render";
import { JobPage } from "./Job";
import { JobsPage } from "./Jobs";
import { LeaderboardsPage } from "./Leaderboards";
import { OverviewPage } from "./Overview";
import { ProjectPage } from "./Project";
import { RunDetailPage } from "./RunDetail";
import { RunsPage } from "./Runs";

vi.mock("../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

const member = { username: "ada", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "NLP", role: "member" }] };
const session = { authenticated: true, user: member, csrf_token: "tok" };

afterEach(() => vi.unstubAllGlobals());

function openJob(answer: unknown, url = "/jobs/42") {
  const api = mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/jobs/": answer });
  vi.stubGlobal("fetch", api.fn);
  renderAt(url, <JobPage />, "/jobs/:id");
  return api;
}

function withJob(job: RunJobRef | null) {
  const detail = runDetail();
  return { ...detail, run: { ...detail.run, job } };
}

const segs = (kind: string) => document.querySelectorAll(`[data-testid="job-timeline"] rect.seg.seg-${kind}`);

describe("Job page", () => {
  it("reads the job from the jobs API and heads the page with its key, cost and lost dollars by cause", async () => {
    const api = openJob(jobDetail());
    expect(await screen.findByRole("heading", { name: "torchelastic/3f2a9c" })).toBeInTheDocument();
    expect(api.calls.some((c) => c.url === "/api/v1/portal/jobs/42")).toBe(true);
    expect(screen.getByTestId("job-attempts")).toHaveTextContent("3 attempts");
    expect(screen.getByTestId("job-cost")).toHaveTextContent("$810.00");
    expect(screen.getByTestId("job-lost")).toHaveTextContent("$92.25");
    expect(screen.getByTestId("job-lost")).toHaveTextContent("8.75 GPU-h");
    expect(screen.getByTestId("job-lost-rework")).toHaveTextContent("$63.00");
    expect(screen.getByTestId("job-lost-restart")).toHaveTextContent("$27.00");
    expect(screen.getByTestId("job-lost-checkpoint")).toHaveTextContent("$2.25");
    expect(screen.getByRole("link", { name: "llm" })).toHaveAttribute("href", "/projects/llm");
    expect(screen.queryByTestId("job-warnings")).not.toBeInTheDocument();
  });

  it("draws every segment of every attempt on one lane, shaded by kind, with a line where each attempt starts", async () => {
    openJob(jobDetail());
    await screen.findByTestId("job-timeline");
    expect(document.querySelectorAll('[data-testid="job-timeline"] rect.seg')).toHaveLength(11);
    expect(segs("restart")).toHaveLength(2);
    expect(segs("rework")).toHaveLength(2);
    expect(segs("checkpoint")).toHaveLength(2);
    expect(segs("work")).toHaveLength(5);
    expect(document.querySelectorAll('[data-testid="job-timeline"] line.timeline-boundary')).toHaveLength(3);
    expect(document.querySelector("line.timeline-boundary")).toHaveAttribute("y2", "36");
    // The segments lie in time order along the lane, from 0 to the drawing's width.
    const a2Restart = document.querySelector('rect.seg-restart[data-attempt="2"]')!;
    expect(Number(a2Restart.getAttribute("x"))).toBeCloseTo(1000 * (220 / 600), 0);
    expect(a2Restart.querySelector("title")).toHaveTextContent("Attempt 2 · restart · Nov 20, 2026, 03:40 UTC – Nov 20, 2026, 03:50 UTC (10 m 00 s)");
    // The legend: each kind with the job's dollars for it (work: the rest of the cost).
    const legend = screen.getByTestId("timeline-legend");
    expect(within(legend).getByText("Restart").closest("li")).toHaveTextContent("$27.00");
    expect(within(legend).getByText("Rework").closest("li")).toHaveTextContent("$63.00");
    expect(within(legend).getByText("Checkpoint").closest("li")).toHaveTextContent("$2.25");
    expect(within(legend).getByText("Work").closest("li")).toHaveTextContent("$717.75");
    expect(legend.querySelectorAll(".seg-swatch.seg-rework")).toHaveLength(1);
  });

  it("lists each attempt with its end cause, dollars by cause, restored step, checkpoints and a link to its run", async () => {
    openJob(jobDetail());
    const table = await screen.findByTestId("attempts-table");
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows).toHaveLength(3);
    const second = rows[1];
    expect(second).toHaveTextContent("crashed");
    expect(within(second).getByTestId("end-cause")).toHaveTextContent("killed (SIGKILL)");
    expect(second.querySelector('[data-col="rework"]')).toHaveTextContent("$42.00");
    expect(second.querySelector('[data-col="restart"]')).toHaveTextContent("$13.50");
    expect(second.querySelector('[data-col="checkpoint"]')).toHaveTextContent("$0.75");
    expect(second.querySelector('[data-col="restored"]')).toHaveTextContent("1,200");
    expect(second.querySelector('[data-col="restored"]')).toHaveTextContent("steps 1,200–2,999 again");
    expect(second.querySelector('[data-col="ckpt_count"]')).toHaveTextContent("40.0 GiB");
    expect(second.querySelector('[data-col="ckpt_blocking"]')).toHaveTextContent("1 m 00 s");
    expect(rows[0].querySelector('[data-col="end"]')).toHaveTextContent("out of memory");
    expect(rows[0].querySelector('[data-col="end"]')).toHaveTextContent("torch.OutOfMemoryError");
    expect(rows[2].querySelector('[data-col="attempt"]')).toHaveTextContent("–");
    expect(within(second).getByRole("link", { name: "pretrain-attempt-2" })).toHaveAttribute("href", `/runs/${jobAttempts()[1].run_id}`);
  });

  it("shows the failure rate with its evidence, and the advice: intervals, Young/Daly, saving and the curve", async () => {
    openJob(jobDetail());
    expect(await screen.findByTestId("failure-rate-evidence")).toHaveTextContent("2 failures in 10.0 hours of this job's attempts: one every 3.5 hours.");
    expect(screen.getByTestId("mtbf")).toHaveTextContent("3 h 30 m");
    const advice = screen.getByTestId("advice");
    expect(advice).toHaveTextContent("Checkpoint every 40 m instead of every 2 h");
    expect(screen.getByTestId("advice-current")).toHaveTextContent("2 h 00 m");
    expect(screen.getByTestId("advice-recommended")).toHaveTextContent("40 m 00 s");
    expect(screen.getByTestId("advice-young-daly")).toHaveTextContent("25 m 06 s");
    expect(screen.getByTestId("advice-saving")).toHaveTextContent("Saving a month$1,840.50");
    expect(screen.queryByTestId("advice-async-saving")).not.toBeInTheDocument();
    expect(within(advice).getByTestId("chart")).toHaveTextContent("now 2 h 00 m, recommended 40 m 00 s");
    expect(screen.queryByTestId("no-advice")).not.toBeInTheDocument();
  });

  it("gives the asynchronous saving where asynchronous checkpoints are advised", async () => {
    openJob(jobDetail({ advice: { ...jobDetail().advice!, kind: "both", async_saving_usd_per_month: 610 } }));
    expect(await screen.findByTestId("advice-async-saving")).toHaveTextContent("$610.00 / month with asynchronous checkpoints");
    expect(screen.getByText("interval and asynchronous checkpoints")).toBeInTheDocument();
  });

  it("advises asynchronous checkpoints alone without an interval to change", async () => {
    openJob(jobDetail({ advice: { ...jobDetail().advice!, kind: "async", recommended_interval_s: null, young_daly_s: null, async_saving_usd_per_month: 610, curve: [] } }));
    expect(await screen.findByTestId("advice-recommended")).toHaveTextContent("keep it");
    expect(screen.queryByTestId("advice-young-daly")).not.toBeInTheDocument();
    expect(within(screen.getByTestId("advice")).queryByTestId("chart")).not.toBeInTheDocument();
    expect(screen.getByTestId("advice-async-saving")).toHaveTextContent("$610.00");
  });

  it("draws the API's segments, the billed span as work with what was lost on top, and counts work net of them", async () => {
    const iso = (s: number) => new Date(Date.UTC(2026, 10, 20) + s * 1000).toISOString();
    const attempt = jobAttempt({
      index: 2,
      segments: [
        { kind: "work", start: iso(38), end: iso(65) },
        { kind: "restart", start: iso(38), end: iso(41) },
        { kind: "rework", start: iso(43), end: iso(53) },
        { kind: "checkpoint", start: iso(40), end: iso(42) },
        { kind: "restart", start: iso(63), end: iso(65) },
      ],
    });
    openJob(jobDetail({ attempts: [attempt] }));
    await screen.findByTestId("job-timeline");
    expect(segs("work")).toHaveLength(1);
    expect(segs("restart")).toHaveLength(2);
    // Lost time is drawn over work: the work rect comes first.
    expect(document.querySelector('[data-testid="job-timeline"] rect.seg')).toHaveClass("seg-work");
    const legend = screen.getByTestId("timeline-legend");
    // 27 s billed: restart 3 + 2, checkpoint 2 (1 s of it over the restart), rework 10: work 11 s.
    const time = (kind: string) => legend.querySelector(`li[data-kind="${kind}"] .muted`);
    expect(time("restart")).toHaveTextContent(/^5 s$/);
    expect(time("checkpoint")).toHaveTextContent(/^2 s$/);
    expect(time("rework")).toHaveTextContent(/^10 s$/);
    expect(time("work")).toHaveTextContent(/^11 s$/);
  });

  it("says there is no advice, and why in the failure rate's words, when the API gives none", async () => {
    const evidence = "No attempt of this job or its project failed in the last 30 days: there is no failure rate to plan checkpoints by.";
    openJob(jobDetail({ advice: null, failure_rate: { failures: 0, wall_hours: 10, mtbf_hours: null, source: null, evidence } }));
    const none = await screen.findByTestId("no-advice");
    expect(none).toHaveTextContent("No advice");
    expect(none).toHaveTextContent(evidence);
    expect(screen.queryByTestId("advice")).not.toBeInTheDocument();
    expect(screen.getByTestId("mtbf")).toHaveTextContent("no failure to measure it by");
  });

  it("shows the API's warnings at the top of the page", async () => {
    openJob(jobDetail({ warnings: ["The launcher's attempt numbers are out of start order: attempts are ordered by start."] }));
    const warnings = await screen.findByTestId("job-warnings");
    expect(warnings).toHaveTextContent("The launcher's attempt numbers are out of start order");
    expect(screen.queryByTestId("attempts-capped")).not.toBeInTheDocument();
  });

  it("draws and lists at most the attempts shown, and says how many of how many", async () => {
    const base = Date.UTC(2026, 10, 20);
    const iso = (minutes: number) => new Date(base + minutes * 60_000).toISOString();
    const many: JobAttempt[] = Array.from({ length: 200 }, (_, i) =>
      jobAttempt({
        index: i + 801,
        run_id: `run-${i}`,
        status: "failed",
        end_cause: "exception",
        billed_from: iso(i * 10),
        started_at: iso(i * 10),
        ended_at: iso(i * 10 + 8),
        segments: [
          { kind: "restart", start: iso(i * 10), end: iso(i * 10 + 1) },
          { kind: "work", start: iso(i * 10 + 1), end: iso(i * 10 + 8) },
        ],
      }),
    );
    openJob(jobDetail({ attempts: many, attempts_total: 1000, attempts_shown: 200, warnings: ["This job has 1,000 attempts: the latest 200 are shown."] }));
    expect(await screen.findByTestId("attempts-capped")).toHaveTextContent("Only 200 of this job's 1,000 attempts are drawn and listed (attempts 801–1,000)");
    expect(screen.getByTestId("job-warnings")).toHaveTextContent("This job has 1,000 attempts: the latest 200 are shown.");
    expect(screen.getByTestId("job-attempts")).toHaveTextContent("1,000 attempts");
    expect(document.querySelectorAll('[data-testid="job-timeline"] rect.seg')).toHaveLength(400);
    const lines = document.querySelectorAll('[data-testid="job-timeline"] line.timeline-boundary');
    expect(lines).toHaveLength(200);
    // So many starts are ticks above the lane, not lines across it.
    expect(Number(lines[0].getAttribute("y2"))).toBeLessThan(20);
    // Labels only where there is room: far fewer than the attempts.
    const labels = document.querySelectorAll(".timeline-label");
    expect(labels.length).toBeGreaterThan(5);
    expect(labels.length).toBeLessThan(40);
    expect(within(screen.getByTestId("attempts-table")).getAllByRole("row")).toHaveLength(201);
  });

  it("answers a job one may not see with a not-found state and ways back", async () => {
    openJob(new Response(JSON.stringify({ error: { code: "not_found", message: "No such job." } }), { status: 404 }), "/jobs/999");
    expect(await screen.findByText("Not found, or not visible to you")).toBeInTheDocument();
    expect(screen.getByRole("link", { name: "← All jobs" })).toHaveAttribute("href", "/jobs");
  });
});

describe("Jobs list", () => {
  const list = {
    count: 2,
    results: [
      { id: 42, key: "torchelastic/3f2a9c", source: "torchelastic", project: "llm", team: "nlp", attempts: 3, failures: 2, cost_usd: 810, lost_usd: 92.25, started_at: "2026-11-20T00:00:00Z", last_started_at: "2026-11-20T07:05:00Z", status: "finished" },
      { id: 43, key: "slurm/77120", source: "slurm", project: "llm", team: "nlp", attempts: 1, failures: 0, cost_usd: 1200, lost_usd: 0, started_at: "2026-11-21T00:00:00Z", last_started_at: "2026-11-21T00:00:00Z", status: "running" },
    ],
  };

  it("lists jobs by lost dollars from the list endpoint, re-sorts on the server and opens a job", async () => {
    const api = mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/jobs": list });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/jobs?project=llm", <JobsPage />, "/jobs");
    const table = await screen.findByTestId("jobs-table");
    expect(api.calls.some((c) => c.url === "/api/v1/portal/jobs?project=llm&sort=lost&limit=50&offset=0")).toBe(true);
    expect(screen.getByTestId("jobs-scope")).toHaveTextContent("Jobs of project llm");
    expect(screen.getByTestId("jobs-count")).toHaveTextContent("2 jobs");
    const first = within(table).getAllByRole("row")[1];
    expect(first.querySelector('[data-col="lost_usd"]')).toHaveTextContent("$92.25");
    expect(within(table).getByRole("columnheader", { name: /Lost to failures/ })).toHaveAttribute("aria-sort", "descending");
    await userEvent.click(screen.getByRole("button", { name: "Sort by Cost" }));
    expect(screen.getByTestId("location")).toHaveTextContent("/jobs?project=llm&sort=cost");
    expect(api.calls.some((c) => c.url === "/api/v1/portal/jobs?project=llm&sort=cost&limit=50&offset=0")).toBe(true);
    await userEvent.click(within(table).getByText("torchelastic/3f2a9c"));
    expect(screen.getByTestId("location")).toHaveTextContent("/jobs/42");
  });

  it("says so when there are no jobs", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/jobs": { count: 0, results: [] } }).fn);
    renderAt("/jobs", <JobsPage />, "/jobs");
    expect(await screen.findByText("No jobs yet")).toBeInTheDocument();
  });
});

describe("Run page: its job", () => {
  it("says which attempt of which job the run is, linking to the job", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/runs/": withJob({ id: 42, key: "torchelastic/3f2a9c", index: 2, attempts_total: 3 }) }).fn);
    renderAt("/runs/11111111-1111-4111-8111-111111111111", <RunDetailPage />, "/runs/:id");
    const line = await screen.findByTestId("run-job");
    expect(line).toHaveTextContent("Attempt 2 of 3 of job torchelastic/3f2a9c");
    expect(within(line).getByRole("link", { name: "torchelastic/3f2a9c" })).toHaveAttribute("href", "/jobs/42");
  });

  it("says nothing of a job for a run that is none's attempt", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/runs/": withJob(null) }).fn);
    renderAt("/runs/11111111-1111-4111-8111-111111111111", <RunDetailPage />, "/runs/:id");
    await screen.findByTestId("run-cost");
    expect(screen.queryByTestId("run-job")).not.toBeInTheDocument();
  });
});

describe("Lost to failures beside recoverable", () => {
  it("adds the column to the leaderboards, with its total, sortable like the others", async () => {
    const board = leaderboard([
      { key: "vision", name: "Vision", recoverable_usd: 120, cost_usd: 900 },
      { key: "nlp", name: "NLP", recoverable_usd: 300, cost_usd: 500 },
      { key: "speech", name: "Speech", recoverable_usd: 80, cost_usd: 1000 },
    ]);
    board.rows = board.rows.map((r, i) => ({ ...r, lost_usd: [55.5, 10, 300.25][i] }));
    board.totals = { runs: 9, gpu_hours: 30, cost_usd: 2400, waste_usd: 1200, recoverable_usd: 500, waste_share: 0.5, mfu: 0.3, lost_usd: 365.75 };
    board.count = 3;
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/leaderboards/teams": board }).fn);
    renderAt("/leaderboards", <LeaderboardsPage />, "/leaderboards");
    const table = await screen.findByTestId("leaderboard-teams");
    const headers = within(table).getAllByRole("columnheader").map((h) => h.textContent);
    expect(headers.indexOf("Lost to failures↕")).toBe(headers.indexOf("Recoverable↓") + 1);
    expect(table.querySelector('tr[data-row-key="vision"] [data-col="lost_usd"]')).toHaveTextContent("$55.50");
    expect(screen.getByTestId("leaderboard-teams-totals").querySelector('[data-col="lost_usd"]')).toHaveTextContent("$365.75");
    await userEvent.click(screen.getByRole("button", { name: "Sort by Lost to failures" }));
    expect(screen.getByTestId("location")).toHaveTextContent("sort=-lost_usd");
    const order = within(table).getAllByRole("row").slice(1, -1).map((r) => r.getAttribute("data-row-key"));
    expect(order).toEqual(["speech", "vision", "nlp"]);
  });
});

describe("Lost to failures on the overview", () => {
  it("shows the period's lost dollars beside recoverable spend, with its change", async () => {
    const totals = { runs: 9, gpu_hours: 30, cost_usd: 2400, waste_usd: 1200, recoverable_usd: 500, waste_share: 0.5, mfu: 0.3, lost_usd: 120 };
    const overview = { period: { start: "2026-11-01", end: "2026-11-30" }, totals, previous_totals: { ...totals, lost_usd: 150 }, by_day: [], by_category: {}, by_gpu: [], worst_runs: [] };
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/overview": overview }).fn);
    renderAt("/", <OverviewPage />, "/");
    const stat = await screen.findByTestId("stat-lost");
    expect(stat).toHaveTextContent("$120.00");
    expect(stat).toHaveTextContent("−$30.00");
    expect(stat).toHaveTextContent("5.0% of spend");
  });
});

describe("Lost to failures in the runs list", () => {
  const totals = { runs: 2, gpu_hours: 32, cost_usd: 208.64, whole_cost_usd: 208.64, waste_usd: 80.2, recoverable_usd: 43, lost_usd: 12.5, waste_share: 0.38, period_gpu_hours: null, period_cost_usd: null, period_waste_usd: null, period_recoverable_usd: null, period_waste_share: null };

  it("shows each run's lost dollars beside recoverable with their total, and sorts by them on the server", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": session,
      "/api/v1/portal/runs": { count: 2, page: 1, page_size: 50, results: [runRow({ lost_usd: 12.5 }), runRow({ id: "r2", name: "other", lost_usd: 0 })], totals },
      "/api/v1/pricing/gpus": [],
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/runs", <RunsPage />, "/runs");
    const table = await screen.findByTestId("runs-table");
    const headers = within(table).getAllByRole("columnheader").map((h) => h.textContent);
    expect(headers.indexOf("Lost to failures↕")).toBe(headers.indexOf("Recoverable↓") + 1);
    expect(table.querySelector('tr[data-row-key="11111111-1111-4111-8111-111111111111"] [data-col="lost_usd"]')).toHaveTextContent("$12.50");
    expect(screen.getByTestId("runs-table-totals").querySelector('[data-col="lost_usd"]')).toHaveTextContent("$12.50");
    await userEvent.click(screen.getByRole("button", { name: "Sort by Lost to failures" }));
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?sort=-lost_usd");
    await waitFor(() => expect(api.calls.some((c) => c.url.includes("sort=-lost_usd"))).toBe(true));
  });

  it("leaves the column out for a server that does not price lost work", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow()] }, "/api/v1/pricing/gpus": [] }).fn);
    renderAt("/runs", <RunsPage />, "/runs");
    const table = await screen.findByTestId("runs-table");
    expect(within(table).queryByText("Lost to failures")).not.toBeInTheDocument();
  });
});

describe("Project page: failure causes", () => {
  it("reads the month's failures of the project and lists them by lost dollars", async () => {
    const entity = { period: { start: "2026-11-01", end: "2026-11-30" }, project: { slug: "llm", name: "llm", team: "nlp" }, totals: { runs: 3, gpu_hours: 10, cost_usd: 810, waste_usd: 100, recoverable_usd: 50, waste_share: 0.12, mfu: 0.3 }, by_day: [], by_category: {}, top_runs: [] };
    const failures = {
      month: "2026-11",
      rows: [
        { end_cause: "sigkill", end_detail: "", host: "node-3", attempts: 1, rework_usd: 42, restart_usd: 13.5, lost_usd: 55.5 },
        { end_cause: "oom", end_detail: "torch.OutOfMemoryError", host: "node-1", attempts: 2, rework_usd: 60, restart_usd: 20, lost_usd: 80 },
        { end_cause: "finished", end_detail: "", host: "node-2", attempts: 4, rework_usd: 0, restart_usd: 0, lost_usd: 0 },
      ],
    };
    const api = mockFetch({ "/api/v1/portal/session": session, "/api/v1/portal/projects/llm": entity, "/api/v1/portal/projects/llm/failures": failures });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/projects/llm?period=2026-11", <ProjectPage />, "/projects/:slug");
    const table = await screen.findByTestId("project-failures");
    expect(api.calls.some((c) => c.url === "/api/v1/portal/projects/llm/failures?month=2026-11")).toBe(true);
    expect(screen.getByRole("heading", { name: "Failures in November 2026" })).toBeInTheDocument();
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows[0]).toHaveTextContent("out of memory");
    expect(rows[0]).toHaveTextContent("torch.OutOfMemoryError");
    expect(rows[0].querySelector('[data-col="lost_usd"]')).toHaveTextContent("$80.00");
    expect(rows[1]).toHaveTextContent("killed (SIGKILL)");
    expect(rows).toHaveLength(2);
    expect(screen.getByTestId("project-failures-note")).toHaveTextContent("4 attempts finished cleanly.");
    expect(screen.getByTestId("project-jobs-link")).toHaveAttribute("href", "/jobs?project=llm");
  });
});
