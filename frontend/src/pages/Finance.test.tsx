import { render, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter, Route, Routes } from "react-router";

import { SessionProvider } from "../api/session";
import type { FinanceReport } from "../api/types";
import { causeText, ClosedMonthNote } from "../components/ClosedMonthNote";
import { ThemeProvider } from "../lib/theme";
import { mockFetch } from "../test/fixtures";
import { FinancePage } from "./Finance";

const root = { username: "root", is_finance: false, is_org_admin: true, teams: [] };
const row = { team: "recsys", team_name: "Recsys", project: "diffusion", project_name: "diffusion", runs: 3, gpu_hours: 1.25, cost_usd: 37.54, waste_usd: 10, recoverable_usd: 4, categories_usd: {} };
const priceCause = { kind: "price", at: "2026-12-02T14:05:00Z", by: "root", action: "create", gpu: "B200", provider: "", region: "", tier: "on_demand", before_usd_per_gpu_hour: null, after_usd_per_gpu_hour: "45.0000" };

function report(over: Partial<FinanceReport>): FinanceReport {
  return {
    month: "2026-11", closed: false, closed_at: null, closed_by: null, rows: [row],
    totals: { runs: 3, gpu_hours: 1.25, cost_usd: 37.54, waste_usd: 10, recoverable_usd: 4, categories_usd: {} },
    price_entries: [], history: [], closable: { ok: true, reason: null }, adjustment: null,
    ...over,
  };
}

function renderFinance(answer: (url: string, init?: RequestInit) => unknown) {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: root, csrf_token: "tok" },
    "/api/v1/portal/finance/": answer,
  });
  vi.stubGlobal("fetch", api.fn);
  render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={["/finance?month=2026-11"]}>
          <Routes>
            <Route path="/finance" element={<FinancePage />} />
          </Routes>
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
  return api;
}

afterEach(() => vi.unstubAllGlobals());

test("a closed month shows its closed figures, the live adjustment and who caused it", async () => {
  renderFinance(() =>
    report({
      closed: true, closed_at: "2026-12-01T09:00:00Z", closed_by: "fin",
      adjustment: {
        as_of: "2026-12-03T10:00:00Z", differs: true,
        live_totals: { runs: 3, cost_usd: 45.06, waste_usd: 12, recoverable_usd: 4.8, gpu_hours: 1.25 },
        difference: { cost_usd: 7.52, waste_usd: 2, recoverable_usd: 0.8 },
        rows: [{ team: "recsys", project: "diffusion", frozen_cost_usd: 37.54, live_cost_usd: 45.06, difference: { cost_usd: 7.52, waste_usd: 2, recoverable_usd: 0.8 } }],
        causes: [priceCause],
      },
      history: [{ action: "close", by: "fin", at: "2026-12-01T09:00:00Z", reason: "", totals: { cost_usd: 37.54 } }],
    }),
  );
  expect(await screen.findByTestId("finance-spend")).toHaveTextContent("$37.54");
  expect(screen.getByTestId("finance-adjustment-total")).toHaveTextContent("+$7.52");
  expect(screen.getByTestId("finance-adjustment")).toHaveTextContent("Live figures now say $45.06");
  expect(screen.getByTestId("finance-adjustment-causes")).toHaveTextContent("root set the B200 price (any provider, on-demand) $45.00 per GPU-hour");
  expect(within(screen.getByTestId("finance-adjustment-rows")).getByText("$45.06")).toBeInTheDocument();
  expect(screen.getByTestId("finance-history")).toHaveTextContent("closed by fin");
});

test("a month that cannot be closed says why and offers no close", async () => {
  renderFinance(() => report({ closable: { ok: false, reason: "2026-11 has no spend: there is nothing to close" } }));
  expect(await screen.findByTestId("close-refusal")).toHaveTextContent("Cannot be closed: 2026-11 has no spend");
  expect(screen.getByRole("button", { name: "Close month" })).toBeDisabled();
});

test("reopening asks why and sends the reason", async () => {
  const api = renderFinance((_url, init) => (init?.method === "POST" ? report({}) : report({ closed: true, closed_at: "2026-12-01T09:00:00Z", closed_by: "fin" })));
  await userEvent.click(await screen.findByRole("button", { name: "Reopen month" }));
  const confirm = screen.getByRole("alertdialog");
  const go = within(confirm).getByRole("button", { name: "Reopen month" });
  expect(go).toBeDisabled();
  await userEvent.type(within(confirm).getByLabelText("Reason"), "late invoice");
  await userEvent.click(go);
  await waitFor(() => expect(api.calls.some((c) => c.init?.method === "POST")).toBe(true));
  const post = api.calls.find((c) => c.init?.method === "POST")!;
  expect(post.url).toBe("/api/v1/portal/finance/2026-11/reopen");
  expect(JSON.parse(String(post.init!.body))).toEqual({ reason: "late invoice" });
});

test("the closed-month note on other pages says which figures these are and what differs", () => {
  render(
    <ClosedMonthNote
      note={{
        month: "2026-11", closed_at: "2026-12-01T09:00:00Z", closed_by: "fin", differs: true, as_of: "2026-12-03T10:00:00Z",
        frozen: { cost_usd: 2984.28, waste_usd: 0, recoverable_usd: 0 }, live: { cost_usd: 2991.8, waste_usd: 0, recoverable_usd: 0 },
        difference: { cost_usd: 7.52, waste_usd: 0, recoverable_usd: 0 }, causes: [priceCause],
      }}
    />,
  );
  const note = screen.getByTestId("closed-month-note");
  expect(note).toHaveTextContent("November 2026 is closed: these are the figures it was closed with on Dec 1, 2026 by fin.");
  expect(note).toHaveTextContent("Live figures differ by +$7.52 (live $2,991.80");
  expect(note).toHaveTextContent("root set the B200 price");
});

test("a policy change is named in words", () => {
  expect(causeText({ kind: "policy", at: "2026-12-02T10:00:00Z", by: "root", before: { target_mfu: 0.5 }, after: { target_mfu: 0.9 } })).toMatch(
    /root changed the waste model settings \(target MFU 50\.0% → 90\.0%\)$/,
  );
});

test("finance shows the dollars lost to failures beside recoverable, per row and in the total row, and sorts by them", async () => {
  const other = { ...row, project: "asr", project_name: "asr", cost_usd: 10, lost_usd: 7.25 };
  renderFinance(() => report({ rows: [{ ...row, lost_usd: 2.5 }, other], totals: { runs: 6, gpu_hours: 2.5, cost_usd: 47.54, waste_usd: 20, recoverable_usd: 8, categories_usd: {}, lost_usd: 9.75 } }));
  const table = await screen.findByTestId("finance-table");
  const headers = within(table).getAllByRole("columnheader").map((h) => h.textContent);
  expect(headers.indexOf("Lost to failures↕")).toBe(headers.indexOf("Recoverable↕") + 1);
  expect(table.querySelector('tr[data-row-key="recsys/diffusion"] [data-col="lost_usd"]')).toHaveTextContent("$2.50");
  expect(screen.getByTestId("finance-total").querySelector('[data-col="lost_usd"]')).toHaveTextContent("$9.75");
  expect(screen.getByTestId("finance-lost")).toHaveTextContent("$9.75");
  await userEvent.click(screen.getByRole("button", { name: "Sort by Lost to failures" }));
  const order = within(table).getAllByRole("row").slice(1, -1).map((r) => r.getAttribute("data-row-key"));
  expect(order).toEqual(["recsys/asr", "recsys/diffusion"]);
});

test("the review downloads as CSV and as a PDF for sign-off, both for the month shown", async () => {
  renderFinance(() => report({}));
  await screen.findByTestId("finance-spend");
  expect(screen.getByRole("link", { name: "Download CSV" })).toHaveAttribute("href", "/api/v1/portal/finance/2026-11.csv");
  const pdf = screen.getByRole("link", { name: "Download PDF" });
  expect(pdf).toHaveAttribute("href", "/api/v1/portal/finance/2026-11.pdf");
  expect(pdf).toHaveAttribute("download", "phantomhub-finance-2026-11.pdf");
  await userEvent.click(screen.getByRole("button", { name: "Previous month" }));
  expect(await screen.findByRole("link", { name: "Download PDF" })).toHaveAttribute("href", "/api/v1/portal/finance/2026-10.pdf");
});
