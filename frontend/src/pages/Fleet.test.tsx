import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter, Route, Routes } from "react-router";

import { SessionProvider } from "../api/session";
import type { SessionUser } from "../api/types";
import { ThemeProvider } from "../lib/theme";
import { mockFetch } from "../test/fixtures";
import { FleetPage, heldFor, type FleetSummary } from "./Fleet";
import { InvoiceCard } from "./FleetInvoice";
import { SettingsPage } from "./Settings";
import { rulesBody } from "./SettingsAttribution";

const admin = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const viewer = { username: "vic", is_finance: false, is_org_admin: false, teams: [] };

function summary(over: Partial<FleetSummary> = {}): FleetSummary {
  const cls = (usd: number, h: number) => ({ usd, gpu_hours: h });
  return {
    period: { start: "2026-09-01", end: "2026-09-30", label: "2026-09" },
    billed_gpu_hours: 4,
    instrumented_gpu_hours: 1,
    coverage: 0.25,
    cost_usd: 14.4,
    classes: { instrumented: cls(3.6, 1), busy_uninstrumented: cls(3.61, 1), idle_held: cls(3.59, 1), empty: cls(3.6, 1), unknown: cls(0, 0.5) },
    nodes: [
      { node: "gpu-a-17", gpu_model: "H100-SXM", gpu_count: 4, provider: "aws", region: "us-east-1", billed_gpu_hours: 4, coverage: 0.25, cost_usd: 14.4,
        instrumented_usd: 3.6, busy_uninstrumented_usd: 3.61, idle_held_usd: 3.59, empty_usd: 3.6, unknown_gpu_hours: 0.5, last_seen_at: null,
        counters: {}, counters_at: null, collector_sent: null, collector_spooled: null, collector_dropped: null },
    ],
    holders: [{ holder: "slurm job 12345 (alice, vision)", kind: "slurm", team: "vision", project: null, gpu_hours: 1, busy_uninstrumented_usd: 0, idle_held_usd: 3.59, cost_usd: 3.59 }],
    teams: [],
    idle_held_now: [{ node: "gpu-a-17", gpu_index: 2, holder: "pod ml/notebook-7", team: null, project: null, since: "2026-09-21T10:00:15Z", held_minutes: 125, usd_per_hour: 3.6 }],
    node_count: 1,
    ...over,
  };
}

function renderAt(path: string, routes: Record<string, unknown>, user: SessionUser = admin) {
  const api = mockFetch({ "/api/v1/portal/session": { authenticated: true, user, csrf_token: "tok" }, ...routes });
  vi.stubGlobal("fetch", api.fn);
  render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={[path]}>
          <Routes>
            <Route path="/fleet" element={<FleetPage />} />
            <Route path="/settings" element={<SettingsPage />} />
          </Routes>
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
  return api;
}

afterEach(() => vi.unstubAllGlobals());

test("held-for reads as people say it", () => {
  expect(heldFor(0.4)).toBe("under a minute");
  expect(heldFor(42.9)).toBe("42 min");
  expect(heldFor(125)).toBe("2 h 05 min");
  expect(heldFor(60 * 50)).toBe("2 days 2 h");
});

test("the Fleet page shows coverage, the four classes, idle-held GPUs now, nodes and holders for the period asked", async () => {
  const api = renderAt("/fleet?period=2026-09", { "/api/v1/fleet/summary": summary() });
  expect(await screen.findByTestId("fleet-coverage")).toHaveTextContent("25.0%");
  expect(screen.getByTestId("fleet-class-busy_uninstrumented")).toHaveTextContent("$3.61");
  expect(screen.getByTestId("fleet-class-idle_held")).toHaveTextContent("$3.59");
  expect(screen.getByTestId("fleet-unknown")).toHaveTextContent("not reporting");
  const idle = screen.getByTestId("fleet-idle-now");
  expect(within(idle).getByText("pod ml/notebook-7")).toBeInTheDocument();
  expect(within(idle).getByText("2 h 05 min")).toBeInTheDocument();
  expect(within(idle).getByText("unattributed")).toBeInTheDocument();
  expect(within(idle).getByText("$7.50")).toBeInTheDocument(); // 3.60 $/h for 125 min
  expect(within(screen.getByTestId("fleet-nodes")).getByText("gpu-a-17")).toBeInTheDocument();
  expect(within(screen.getByTestId("fleet-holders")).getByText("vision")).toBeInTheDocument();
  expect(screen.getByTestId("fleet-nodes-csv")).toHaveAttribute("href", "/api/v1/fleet/nodes.csv?period=2026-09");
  expect(api.calls.some((c) => c.url === "/api/v1/fleet/summary?period=2026-09")).toBe(true);
});

test("the nodes table highlights a collector that dropped requests, and says nothing of one that reports no counters", async () => {
  const base = summary().nodes[0];
  const reported = { counters_at: "2026-09-21T11:00:00Z", collector_sent: 240 };
  const nodes = [
    { ...base, node: "gpu-drops", ...reported, collector_spooled: 12, collector_dropped: 3, counters: { dropped_samples: 2, spool_dropped_batches: 1 } },
    { ...base, node: "gpu-clean", ...reported, collector_spooled: 0, collector_dropped: 0, counters: { sent_batches: 240 } },
    { ...base, node: "gpu-silent" },
  ];
  renderAt("/fleet", { "/api/v1/fleet/summary": summary({ nodes, node_count: 3 }) });
  const table = await screen.findByTestId("fleet-nodes");
  const drops = within(table).getByTestId("collector-gpu-drops");
  expect(within(drops).getByText("dropped 3")).toHaveClass("badge-bad");
  expect(drops).toHaveTextContent("spooled 12");
  const clean = within(table).getByTestId("collector-gpu-clean");
  expect(clean).toHaveTextContent("none dropped");
  expect(clean.querySelector(".badge-bad")).toBeNull();
  expect(clean).not.toHaveTextContent("spooled");
  expect(within(table).queryByTestId("collector-gpu-silent")).toBeNull();
  expect(within(table).getAllByTitle("this node's collector reports no counters")).toHaveLength(1);
});

test("a fleet with no nodes says how to start the collector", async () => {
  renderAt("/fleet", { "/api/v1/fleet/summary": summary({ node_count: 0, nodes: [], holders: [], idle_held_now: [] }) });
  expect(await screen.findByText("No node reports yet")).toBeInTheDocument();
});

test("rules are sent without blank fields", () => {
  expect(rulesBody([{ match: "k8s_label", key: " team ", pattern: "nlp", team: "nlp", project: "" }])).toEqual({
    rules: [{ match: "k8s_label", key: "team", pattern: "nlp", team: "nlp" }],
  });
});

test("an admin previews rules on the last day before saving, and a refused rule names its field", async () => {
  const preview = {
    day: "2026-09-21",
    holders: [{ holder: "pod ml-team/train-abc", kind: "k8s", gpu_hours: 1, usd: 3.6, rule: 0, team: "nlp", project: null, current_team: null, current_project: null }],
    totals: [{ team: "nlp", project: null, gpu_hours: 1, usd: 3.6 }],
  };
  const api = renderAt("/settings?tab=attribution", {
    "/api/v1/fleet/rules/preview": (_url: string, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body));
      if (!body.rules[0].team) return new Response(JSON.stringify({ error: { code: "invalid", message: "rules[0].team: a rule names a team, a project, or both", fields: {} } }), { status: 400 });
      return preview;
    },
    "/api/v1/fleet/rules": { rules: [] },
  });
  const user = userEvent.setup();
  await user.click(await screen.findByRole("button", { name: "Add rule" }));
  await user.type(screen.getByLabelText("Rule 1 pattern"), "ml-*");
  await user.click(screen.getByTestId("rules-preview"));
  expect(await screen.findByRole("alert")).toHaveTextContent("Rule 1: team: a rule names a team, a project, or both");
  await user.type(screen.getByLabelText("Rule 1 team"), "nlp");
  await user.click(screen.getByTestId("rules-preview"));
  const result = await screen.findByTestId("rules-preview-result");
  expect(within(result).getByText("pod ml-team/train-abc")).toBeInTheDocument();
  expect(within(result).getByText("unattributed", { exact: false })).toBeInTheDocument(); // "(now unattributed)"
  const sent = api.calls.filter((c) => c.url === "/api/v1/fleet/rules/preview").pop();
  expect(JSON.parse(String(sent?.init?.body))).toEqual({ rules: [{ match: "k8s_namespace", pattern: "ml-*", team: "nlp" }] });
  expect(api.calls.some((c) => c.init?.method === "PUT")).toBe(false);
});

test("people who are not admins read the rules but cannot change them", async () => {
  renderAt("/settings?tab=attribution", { "/api/v1/fleet/rules": { rules: [{ match: "slurm_account", key: "", pattern: "vision", team: "vision", project: null }] } }, viewer);
  expect(await screen.findByLabelText("Rule 1 pattern")).toBeDisabled();
  await waitFor(() => expect(screen.queryByRole("button", { name: "Save rules" })).not.toBeInTheDocument());
});

test("with no GPU idle-held now, the page says when the latest report came", async () => {
  renderAt("/fleet", { "/api/v1/fleet/summary": summary({ idle_held_now: [], last_report_at: "2026-11-10T12:00:07Z" }) });
  expect(await screen.findByText("No GPU is idle-held right now")).toBeInTheDocument();
  expect(screen.getByText(/latest node report came/)).toBeInTheDocument();
});

test("the invoice card shows billed, measured and unexplained per team with the unmatched rest apart", () => {
  render(
    <MemoryRouter>
      <InvoiceCard
        month="2026-09"
        invoice={{
          rows: [
            { team: "nlp", team_name: "NLP", billed_usd: 8, measured_usd: 7.2, unexplained_usd: 0.8 },
            { team: null, team_name: "unattributed", billed_usd: 4, measured_usd: 3.6, unexplained_usd: 0.4 },
          ],
          totals: { billed_usd: 12, measured_usd: 10.8, unexplained_usd: 1.2 },
          unmatched_billed_usd: 3,
          lines: 3,
        }}
      />
    </MemoryRouter>,
  );
  const table = screen.getByTestId("finance-invoice");
  expect(within(table).getByText("NLP")).toBeInTheDocument();
  expect(within(table).getByText("unattributed")).toBeInTheDocument();
  expect(screen.getByTestId("finance-invoice-total")).toHaveTextContent("$12.00$10.80$1.20");
  expect(screen.getByTestId("finance-invoice-unmatched")).toHaveTextContent("$3.00 of the invoice matches no node");
});

const member = { username: "mo", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "member" }] };
const teamAdmin = { username: "lee", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "admin" }] };

test("Settings offers each person only the token kinds they may create: a member no node token", async () => {
  renderAt("/settings?tab=tokens", { "/api/v1/portal/tokens": [] }, member);
  expect(await screen.findByRole("button", { name: "Create token" })).toBeInTheDocument();
  expect(screen.queryByText("Node (collector)")).not.toBeInTheDocument();
  expect(screen.queryByText("Project (ingest)")).not.toBeInTheDocument();
  expect(screen.queryByLabelText("Hostnames it reports for")).not.toBeInTheDocument();
});

test("a team admin is offered project tokens but no node token", async () => {
  renderAt("/settings?tab=tokens", { "/api/v1/portal/tokens": [] }, teamAdmin);
  expect(await screen.findByText("Project (ingest)")).toBeInTheDocument();
  expect(screen.queryByText("Node (collector)")).not.toBeInTheDocument();
});

test("an admin makes a node token for the hostnames it names, and the list shows them", async () => {
  const issued = { id: 3, prefix: "phk_abcdefgh", kind: "node", project: null, name: "rack a", created_at: "2026-12-01T00:00:00Z",
    last_used_at: null, revoked_at: null, hostnames: ["gpu-a-17", "gpu-b-*"], token: "phk_secret" };
  const api = renderAt("/settings?tab=tokens", {
    "/api/v1/portal/tokens": (_url: string, init?: RequestInit) => (init?.method === "POST" ? issued : [issued]),
  });
  const user = userEvent.setup();
  await user.click(await screen.findByText("Node (collector)"));
  await user.type(screen.getByLabelText("Hostnames it reports for"), "gpu-a-17, gpu-b-*");
  await user.type(screen.getByLabelText("Name"), "rack a");
  await user.click(screen.getByRole("button", { name: "Create token" }));
  expect(await screen.findByText("phk_secret")).toBeInTheDocument();
  const sent = api.calls.find((c) => c.init?.method === "POST");
  expect(JSON.parse(String(sent?.init?.body))).toEqual({ kind: "node", name: "rack a", hostnames: ["gpu-a-17", "gpu-b-*"] });
  expect(await screen.findByText("gpu-a-17, gpu-b-*")).toBeInTheDocument();
});

test("a member's Fleet page names their teams' holders and shows the others summed", async () => {
  const holders = [
    { holder: "pod ml-team/train-abc", kind: "k8s", team: "nlp", project: null, gpu_hours: 1, busy_uninstrumented_usd: 3.6, idle_held_usd: 0, cost_usd: 3.6, aggregated: false },
    { holder: "other teams", kind: null, team: null, project: null, gpu_hours: 1, busy_uninstrumented_usd: 0, idle_held_usd: 3.59, cost_usd: 3.59, aggregated: true },
  ];
  renderAt("/fleet", { "/api/v1/fleet/summary": summary({ holders, sees_all_teams: false }) }, member);
  const table = await screen.findByTestId("fleet-holders");
  expect(within(table).getByText("other teams, summed")).toBeInTheDocument();
  expect(within(table).getByText("pod ml-team/train-abc")).toBeInTheDocument();
  expect(screen.getByText(/other teams' summed/)).toBeInTheDocument();
});

test("saving rules answers with a job whose progress the card follows until it is done", async () => {
  const job = (status: string, done: number, moved: number) => ({ id: 9, status, owners_total: 10000, owners_done: done, owners_moved: moved,
    error: null, created_at: "2026-12-01T00:00:00Z", started_at: null, finished_at: null });
  let polls = 0;
  renderAt("/settings?tab=attribution", {
    "/api/v1/fleet/rules": (_url: string, init?: RequestInit) =>
      init?.method === "PUT" ? new Response(JSON.stringify({ rules: [], hidden: 0, job: job("queued", 0, 0) }), { status: 202 }) : { rules: [], hidden: 0, job: null },
    "/api/v1/fleet/rules/jobs/9": () => (++polls < 2 ? job("running", 4000, 4000) : job("done", 10000, 10000)),
  });
  const user = userEvent.setup();
  await user.click(await screen.findByTestId("rules-save"));
  expect(await screen.findByText(/Re-attribution queued: 10,000 holders/)).toBeInTheDocument();
  expect(await screen.findByText(/Re-attributing: 4,000 of 10,000 holders/, {}, { timeout: 3000 })).toBeInTheDocument();
  expect(await screen.findByText(/Re-attributed: 10,000 of 10,000 holders moved/, {}, { timeout: 3000 })).toBeInTheDocument();
});
