import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import { leaderboard, mockFetch, runDetail, runRow } from "../test/fixtures";
import { renderAt } from "../test/render";
import { LeaderboardsPage } from "./Leaderboards";
import { RunDetailPage } from "./RunDetail";
import { RunsPage } from "./Runs";
import { PrivacyCard } from "./SettingsPrivacy";
import { SessionProvider } from "../api/session";

vi.mock("../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

type User = { username: string; is_finance: boolean; is_org_admin: boolean; teams: { slug: string; name: string; role: string }[] };
const admin: User = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const member: User = { username: "mo", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "NLP", role: "viewer" }] };
const session = (user: User) => ({ authenticated: true, user, csrf_token: "tok" });
const settings = (on: boolean) => ({ target_mfu: 0.5, recoverability: {}, crash_after_s: 900, people_leaderboard: on, defaults: { target_mfu: 0.5, recoverability: {} } });
const teams = leaderboard([{ key: "nlp", name: "NLP", recoverable_usd: 30, cost_usd: 100 }]);
const people = {
  ...leaderboard([
    { key: "ann", name: "ann", recoverable_usd: 40, cost_usd: 200 },
    { key: "bob", name: "bob", recoverable_usd: 90, cost_usd: 150 },
  ]),
  unattributed: { runs: 2, gpu_hours: 1, cost_usd: 12.5, waste_usd: 3, recoverable_usd: 1.25, waste_share: 0.24, mfu: null },
};

afterEach(() => vi.unstubAllGlobals());

describe("People leaderboard", () => {
  it("has no People tab while the privacy setting is off", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session(admin), "/api/v1/portal/settings": settings(false), "/api/v1/portal/leaderboards/teams": teams }).fn);
    renderAt("/leaderboards", <LeaderboardsPage />, "/leaderboards");
    await screen.findByTestId("leaderboard-teams");
    const tabs = within(screen.getByRole("radiogroup", { name: "Leaderboard" })).getAllByRole("radio").map((t) => t.textContent);
    expect(tabs).toEqual(["Teams", "Projects", "Runs"]);
  });

  it("shows the tab when it is on, ranks people, names the runs with no launcher and opens a person's runs", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": session(admin),
      "/api/v1/portal/settings": settings(true),
      "/api/v1/portal/leaderboards/teams": teams,
      "/api/v1/portal/leaderboards/people": people,
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/leaderboards", <LeaderboardsPage />, "/leaderboards");
    await screen.findByTestId("leaderboard-teams");
    await userEvent.click(await screen.findByRole("radio", { name: "People" }));
    expect(screen.getByTestId("location")).toHaveTextContent("/leaderboards?kind=people");
    const table = await screen.findByTestId("leaderboard-people");
    const order = within(table).getAllByRole("row").slice(1, 3).map((r) => r.getAttribute("data-row-key"));
    expect(order).toEqual(["bob", "ann"]); // by recoverable spend, the default sort
    expect(screen.getByTestId("people-unattributed")).toHaveTextContent("2 runs whose agent did not say who launched them ($12.50 spend");
    await userEvent.click(within(table).getByText("ann"));
    expect(screen.getByTestId("location")).toHaveTextContent("/runs?launched_by=ann");
  });

  it("says what the server says when the board is switched off", async () => {
    const off = new Response(JSON.stringify({ error: { code: "not_found", message: "the people leaderboard is switched off for this organization" } }), { status: 404 });
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session(member), "/api/v1/portal/settings": settings(false), "/api/v1/portal/leaderboards/people": () => off.clone() }).fn);
    renderAt("/leaderboards?kind=people", <LeaderboardsPage />, "/leaderboards");
    expect(await screen.findByText(/switched off/)).toBeInTheDocument();
  });
});

describe("Who launched a run", () => {
  it("is shown on the run page, linking to the runs it launched", async () => {
    const detail = runDetail();
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session(member), "/api/v1/portal/runs/": { ...detail, run: { ...detail.run, launched_by: "ann" } } }).fn);
    renderAt("/runs/11111111-1111-4111-8111-111111111111", <RunDetailPage />, "/runs/:id");
    const shown = await screen.findByTestId("run-launched-by");
    expect(shown).toHaveTextContent("ann");
    expect(within(shown).getByRole("link")).toHaveAttribute("href", "/runs?launched_by=ann");
  });

  it("filters the runs list from the URL and the control", async () => {
    const api = mockFetch({
      "/api/v1/portal/session": session(member),
      "/api/v1/portal/runs": { count: 1, page: 1, page_size: 50, results: [runRow({ launched_by: "ann" })] },
      "/api/v1/pricing/gpus": [],
    });
    vi.stubGlobal("fetch", api.fn);
    renderAt("/runs?launched_by=ann", <RunsPage />, "/runs");
    await screen.findByText("pretrain-a");
    expect(api.calls.some((c) => c.url === "/api/v1/portal/runs?launched_by=ann&sort=-recoverable_usd&page=1&page_size=50")).toBe(true);
    expect(screen.getByLabelText("Launched by")).toHaveValue("ann");
  });
});

describe("Privacy settings", () => {
  it("lets an organization admin turn the people leaderboard on", async () => {
    let on = false;
    const api = mockFetch({
      "/api/v1/portal/session": session(admin),
      "/api/v1/portal/settings": (_url: string, init?: RequestInit) => {
        if (init?.method === "PUT") on = JSON.parse(String(init.body)).people_leaderboard;
        return settings(on);
      },
    });
    vi.stubGlobal("fetch", api.fn);
    render(
      <SessionProvider>
        <PrivacyCard />
      </SessionProvider>,
    );
    const toggle = await screen.findByTestId("people-leaderboard-toggle");
    expect(toggle).not.toBeChecked();
    await waitFor(() => expect(toggle).toBeEnabled());
    await userEvent.click(toggle);
    await waitFor(() => expect(screen.getByTestId("people-leaderboard-toggle")).toBeChecked());
    const put = api.calls.find((c) => c.init?.method === "PUT")!;
    expect(JSON.parse(String(put.init!.body))).toEqual({ people_leaderboard: true });
  });

  it("is read-only for everyone else", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": session(member), "/api/v1/portal/settings": settings(false) }).fn);
    render(
      <SessionProvider>
        <PrivacyCard />
      </SessionProvider>,
    );
    const toggle = await screen.findByTestId("people-leaderboard-toggle");
    await waitFor(() => expect(screen.getByText(/read-only/)).toBeInTheDocument());
    expect(toggle).toBeDisabled();
  });
});
