import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter, Route, Routes, useLocation } from "react-router";

import { SessionProvider } from "../api/session";
import type { CompareResult, CompareSide } from "../api/types";
import { ThemeProvider } from "../lib/theme";
import { mockFetch, runRow } from "../test/fixtures";
import { compareIds, comparePath, ComparePage } from "./Compare";
import { RunsPage } from "./Runs";

const admin = { username: "ada", is_finance: false, is_org_admin: true, teams: [{ slug: "nlp", name: "NLP", role: "admin" }] };
const signedIn = { authenticated: true, user: admin, csrf_token: "tok" };
const A = "11111111-1111-4111-8111-111111111111";
const B = "44444444-4444-4444-8444-444444444444";

function Where() {
  const location = useLocation();
  return <output data-testid="location">{location.pathname + location.search}</output>;
}

function renderAt(url: string) {
  return render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={[url]}>
          <Routes>
            <Route path="/runs" element={<RunsPage />} />
            <Route path="/compare" element={<ComparePage />} />
          </Routes>
          <Where />
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
}

function side(id: string, name: string, dataMs: number): CompareSide {
  const step = dataMs + 90;
  return {
    run: { ...runRow({ id, name }), world_size: 8, nodes: 1, dtype: "bf16" },
    analysis_status: "analysed",
    analysis: {
      cost_usd: 100,
      waste_usd: 40,
      recoverable_usd: 10,
      gpu_hours: 16,
      categories: { useful_compute: { usd: 60, share: 0.6, gpu_seconds: 1 }, data_stall: { usd: 40, share: 0.4, gpu_seconds: 1 } },
      composition: {
        step_ms: step,
        parts_ms: { data: dataMs, forward: 30, backward: 50, optimizer: 5, comm: 0, host: 5 },
        shares: { data: dataMs / step, forward: 30 / step, backward: 50 / step, optimizer: 5 / step, comm: 0, host: 5 / step },
        mfu_step_time: 0.3,
      },
      mfu: 0.25,
      mfu_step_time: 0.3,
      target_mfu: 0.5,
      tokens_per_s: null,
      memory: { capacity_bytes: null, peak_bytes_max: 22 * 2 ** 30, peak_rank: 0, peak_fraction_of_capacity: null, headroom_bytes: null, reserved_bytes_max: null, allocated_bytes_max: null, fragmentation_mean: 0.1, alloc_retries_total: 0, alloc_retries_per_1k_steps: 0, oom_count: 0 },
      stragglers: name === "b" ? [{ rank: 3, host: "node-0", slow_step_share: 0.4, blamed_steps: 80, caused_wait_usd: 12.5 }] : [],
      straggler_wait_usd: name === "b" ? 12.5 : 0,
      ranks_reporting: 8,
      steps: 800,
      complete: true,
    },
  };
}

const RESULT: CompareResult = {
  runs: [side(A, "a", 10), side(B, "b", 30)],
  parts: ["data", "forward", "backward", "optimizer", "comm", "host"],
  config: { differences: [{ key: "optimizer.lr", values: [{ present: true, value: 0.1 }, { present: true, value: 0.2 }] }, { key: "amp", values: [{ present: false, value: null }, { present: true, value: true }] }], same: 2 },
  environment: { differences: [], same: 3 },
};

afterEach(() => vi.unstubAllGlobals());

describe("Comparing runs", () => {
  it("reads and writes the runs of the shareable URL", () => {
    expect(compareIds(new URLSearchParams("runs=a, b,,a,c"))).toEqual(["a", "b", "c"]);
    expect(comparePath(["a", "b"])).toBe("/compare?runs=a,b");
    expect(comparePath(["a", "b"], "2026-11-03..2026-11-09")).toBe("/compare?runs=a,b&period=2026-11-03..2026-11-09");
  });

  it("ticks runs in the table and opens the comparison, keeping the period", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/runs": { count: 2, page: 1, page_size: 50, results: [runRow({ id: A, name: "a" }), runRow({ id: B, name: "b" })] },
      "/api/v1/pricing/gpus": [],
      "/api/v1/portal/compare": RESULT,
    }).fn);
    renderAt("/runs?from=2026-11-01&to=2026-11-30");
    await screen.findByText("a");
    const compare = screen.getByTestId("compare-action");
    expect(compare).toBeDisabled();
    await userEvent.click(screen.getByLabelText("Select a to compare"));
    expect(compare).toBeDisabled(); // one run is not a comparison
    await userEvent.click(screen.getByLabelText("Select b to compare"));
    expect(screen.getByTestId("compare-picked")).toHaveTextContent("2 selected");
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?from=2026-11-01&to=2026-11-30"); // ticking opened no run
    await userEvent.click(compare);
    expect(screen.getByTestId("location")).toHaveTextContent(`/compare?runs=${A},${B}&period=2026-11`);
    expect(await screen.findByRole("heading", { name: "Compare runs" })).toBeInTheDocument();
  });

  it("shows the runs side by side and what differs in their config", async () => {
    const api = mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/compare": RESULT });
    vi.stubGlobal("fetch", api.fn);
    renderAt(`/compare?runs=${A},${B}`);
    const steps = await screen.findByTestId("compare-steps");
    expect(api.calls.some((c) => c.url === `/api/v1/portal/compare?runs=${A},${B}`)).toBe(true);
    const step = within(steps).getByText("Step time").closest("tr")!;
    expect(step).toHaveTextContent("100 ms");
    expect(step).toHaveTextContent("120 ms");
    const data = within(steps).getByText("Data wait").closest("tr")!;
    expect(data).toHaveTextContent("10.0 ms (10%)");
    expect(data).toHaveTextContent("30.0 ms (25%)");
    const money = screen.getByTestId("compare-money");
    expect(within(money).getByText("Data stall").closest("tr")).toHaveTextContent("$40.00 (40%)");
    const eff = screen.getByTestId("compare-efficiency");
    expect(within(eff).getByText("Stragglers").closest("tr")).toHaveTextContent("rank 3 · $12.50 waited");
    expect(within(eff).getByText("Peak memory").closest("tr")).toHaveTextContent("22.0 GiB");
    const config = screen.getByTestId("compare-config");
    expect(within(config).getByText("optimizer.lr").closest("tr")).toHaveTextContent("0.10.2");
    expect(within(config).getByText("amp").closest("tr")).toHaveTextContent("not settrue");
    expect(screen.getByText("2 keys differ · 2 the same in all")).toBeInTheDocument();
    expect(screen.getByText("Every key has the same value in these runs.")).toBeInTheDocument();
  });

  it("asks for two to four runs before asking the API", async () => {
    const api = mockFetch({ "/api/v1/portal/session": signedIn });
    vi.stubGlobal("fetch", api.fn);
    renderAt(`/compare?runs=${A}`);
    expect(await screen.findByText("Pick 2 to 4 runs to compare")).toBeInTheDocument();
    await waitFor(() => expect(api.calls.every((c) => !c.url.includes("/compare"))).toBe(true));
  });

  it("says so when a run is not there or not visible", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": signedIn,
      "/api/v1/portal/compare": () => new Response(JSON.stringify({ error: { code: "not_found", message: `run ${B} not found`, fields: { runs: `run ${B} not found` } } }), { status: 404 }),
    }).fn);
    renderAt(`/compare?runs=${A},${B}`);
    expect(await screen.findByText("Not found, or not visible to you")).toBeInTheDocument();
  });
});
