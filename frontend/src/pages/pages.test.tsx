import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter, Route, Routes, useLocation } from "react-router";

import { AppRoutes } from "../App";
import { SessionProvider } from "../api/session";
import { ThemeProvider } from "../lib/theme";
import { leaderboard, mockFetch, runDetail, runRow } from "../test/fixtures";
import { LeaderboardsPage } from "./Leaderboards";
import { RunDetailPage } from "./RunDetail";
import { RunsPage } from "./Runs";
import { safeNext } from "./SignIn";

vi.mock("../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

const admin = { username: "ada", is_finance: false, is_org_admin: true, teams: [{ slug: "nlp", name: "NLP", role: "admin" }] };
const signedIn = { authenticated: true, user: admin, csrf_token: "tok" };

function Where() {
  const location = useLocation();
  return <output data-testid="location">{location.pathname + location.search}</output>;
}

function renderAt(url: string, element: React.ReactNode, path: string) {
  return render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={[url]}>
          <Routes>
            <Route path={path} element={element} />
            <Route path="*" element={null} />
          </Routes>
          <Where />
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
}

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
});

describe("Run page", () => {
  it("shows the cost, the six categories and the analysis' explanation of the cost", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": runDetail() }).fn);
    renderAt("/runs/11111111-1111-4111-8111-111111111111", <RunDetailPage />, "/runs/:id");
    const breakdown = await screen.findByTestId("breakdown");
    expect(within(breakdown).getAllByRole("row")).toHaveLength(1 + 6 + 1);
    expect(within(breakdown).getByText("Data stall").closest("tr")).toHaveTextContent("$25.00");
    expect(screen.getByTestId("run-cost")).toHaveTextContent("$104.00");
    expect(screen.getByText("GPUs wait for input batches")).toBeInTheDocument();
    expect(screen.getByText("$9,388.93")).toBeInTheDocument();
    await userEvent.click(screen.getByRole("button", { name: "How cost is computed" }));
    expect(screen.getByRole("dialog")).toHaveTextContent("segment_0_usd_per_gpu_hour");
    expect(screen.getAllByTestId("chart").map((c) => c.textContent)).toEqual(
      expect.arrayContaining(["Step time by stage over the run", "MFU and GPU utilization over the run", "GPU memory over the run"]),
    );
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
