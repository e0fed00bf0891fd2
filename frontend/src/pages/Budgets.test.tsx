import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { SessionUser } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { BUDGETS_API, BudgetsCard, BudgetsPage, budgetBody, cutText, maySetBudget, verdict, type Budget, type BudgetStatusRow, type MaySet } from "./Budgets";

const finance: SessionUser = { username: "fin", is_finance: true, is_org_admin: false, teams: [] };
const lead: SessionUser = { username: "lead", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "admin" }] };
const member: SessionUser = { username: "ann", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "member" }] };

function budget(over: Partial<Budget> = {}): Budget {
  return {
    id: 3, scope: "project", team: "nlp", project: "llm-pretrain", gpu_key: "", amount_usd: "1000.00", effective_from: "2026-01",
    effective_to: null, note: "", updated_at: null, ...over,
  };
}

function row(over: Partial<BudgetStatusRow> = {}): BudgetStatusRow {
  return {
    budget: budget(), month: "2026-12", state: "open", budget_usd: 1000, spent_usd: 700, spent_share: 0.7,
    forecast: { point_usd: 1500, p10_usd: 1210.5, p90_usd: 1789.5, daily_mean_usd: 50, daily_sd_usd: 5, basis: "closed_days" },
    over: true, over_by_usd: 500, burn_usd_per_hour: 12.5, live_runs: 2, recoverable_usd: 280, recoverable_ahead_usd: 320,
    cut_usd: 320, cut_enough: false, ...over,
  };
}

function serve(user: SessionUser, may: MaySet, rows: BudgetStatusRow[], budgets: Budget[]) {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user, csrf_token: "tok" },
    [`${BUDGETS_API}/status`]: { month: { start: "2026-12-01", end: "2026-12-31", label: "2026-12" }, as_of: "2026-12-15T12:00:00Z", rows, may_set: may },
    [BUDGETS_API]: (_url: string, init?: RequestInit) =>
      init?.method === "POST"
        ? new Response(JSON.stringify(budget({ id: 9, scope: "team", team: "vision", project: null })), { status: 201 })
        : { budgets, may_set: may, max_amount_usd: "1000000000" },
  });
  vi.stubGlobal("fetch", api.fn);
  return api;
}

test("each budget shows its spend, the forecast with its interval, and what would bring it under", async () => {
  serve(member, { any: false, teams: [] }, [row(), row({ budget: budget({ id: 4, scope: "team", project: null, gpu_key: "" }), over: false, over_by_usd: 0, cut_usd: 0 })], [budget()]);
  renderAt("/budgets?month=2026-12", <BudgetsPage />, "/budgets");
  const table = await screen.findByTestId("budget-status");
  const [first, second] = within(table).getAllByRole("row").slice(1);
  expect(first).toHaveTextContent("project llm-pretrain");
  expect(first).toHaveTextContent("$1,000");
  expect(first).toHaveTextContent("$700");
  expect(first).toHaveTextContent("$1,500");
  expect(first).toHaveTextContent("$1,210.50 – $1,789.50");
  expect(first).toHaveTextContent("over by $500.00");
  expect(first).toHaveTextContent("all $320.00 recoverable ahead is not enough");
  expect(second).toHaveTextContent("team nlp");
  expect(second).toHaveTextContent("within budget");
  expect(screen.getByTestId("budgets-over")).toHaveTextContent("1");
  // A member reads; no form, no edit or delete.
  expect(screen.queryByTestId("budget-form")).toBeNull();
  expect(await screen.findByTestId("budget-list")).not.toHaveTextContent("Delete");
});

test("finance sets a team budget through the form", async () => {
  const api = serve(finance, { any: true, teams: [] }, [], []);
  renderAt("/budgets?month=2026-12", <BudgetsPage />, "/budgets");
  const form = await screen.findByTestId("budget-form");
  await userEvent.type(within(form).getByLabelText("Team (slug)"), "vision");
  await userEvent.type(within(form).getByLabelText("$ / month"), "2500");
  await userEvent.click(within(form).getByRole("button", { name: "Set budget" }));
  await waitFor(() => expect(screen.getByTestId("budget-notice")).toHaveTextContent("Set a budget for team vision."));
  const post = api.calls.find((c) => c.init?.method === "POST");
  expect(JSON.parse(String(post?.init?.body))).toEqual({
    scope: "team", team: "vision", gpu_key: "", amount_usd: "2500", effective_from: "2026-12", effective_to: null, note: "",
  });
});

test("a lead is offered project budgets only, and the edit controls of their teams' projects", async () => {
  serve(lead, { any: false, teams: ["nlp"] }, [], [budget(), budget({ id: 5, team: "vision", project: "detector" })]);
  renderAt("/budgets", <BudgetsPage />, "/budgets");
  const form = await screen.findByTestId("budget-form");
  expect(within(form).getByLabelText("Scope")).toHaveDisplayValue("project");
  expect(within(form).queryByRole("option", { name: "team" })).toBeNull();
  const list = await screen.findByTestId("budget-list");
  expect(within(list).getByRole("button", { name: "Delete the budget of project llm-pretrain" })).toBeInTheDocument();
  expect(within(list).queryByRole("button", { name: "Delete the budget of project detector" })).toBeNull();
});

test("the helpers: who may set, the body, the verdict", () => {
  expect(maySetBudget({ any: false, teams: ["nlp"] }, { scope: "team", team: "nlp" })).toBe(false);
  expect(maySetBudget({ any: false, teams: ["nlp"] }, { scope: "project", team: "nlp" })).toBe(true);
  expect(maySetBudget({ any: true, teams: [] }, { scope: "team", team: "x" })).toBe(true);
  expect(budgetBody({ scope: "project", target: " p1 ", gpu_key: "", amount_usd: "1", effective_from: "2026-01", effective_to: "", note: "" })).toMatchObject({ project: "p1", effective_to: null });
  expect(verdict(row())).toBe("over by $500.00");
  expect(cutText(row({ cut_enough: true, cut_usd: 500 }))).toBe("recovering $500.00 of recoverable spend brings it under");
  expect(cutText(row({ cut_usd: 0 }))).toBe("nothing recoverable ahead");
  expect(cutText(row({ over: false }))).toBe("");
  expect(verdict(row({ forecast: null }))).toBe("not begun");
});

test("a team's page shows its budgets this month, and nothing where none is in force", async () => {
  const api = serve(member, { any: false, teams: [] }, [row()], [budget()]);
  const { unmount } = renderAt("/teams/nlp", <BudgetsCard team="nlp" />, "/teams/:slug");
  const table = await screen.findByTestId("entity-budgets");
  expect(table).toHaveTextContent("project llm-pretrain");
  expect(table).toHaveTextContent("over by $500.00");
  expect(api.calls.some((c) => c.url.includes("/status?month=") && c.url.endsWith("&team=nlp"))).toBe(true);
  unmount();
  const none = serve(member, { any: false, teams: [] }, [], []);
  renderAt("/projects/x", <BudgetsCard project="x" />, "/projects/:slug");
  await waitFor(() => expect(none.calls.some((c) => c.url.endsWith("&project=x"))).toBe(true));
  await new Promise((resolve) => setTimeout(resolve, 20)); // the answer rendered
  expect(screen.queryByText(/Budgets in/)).toBeNull();
  expect(screen.queryByTestId("entity-budgets")).toBeNull();
});
