import { render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter } from "react-router";

import type { InvoiceReconciliation } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { INVOICES_API, InvoiceCard, type InvoiceImport } from "./FleetInvoice";

function job(over: Partial<InvoiceImport> = {}): InvoiceImport {
  return {
    id: 7, filename: "sept.csv", status: "running", lines: 62000, lines_checked: 12000, lines_new: 0, matched_lines: 0,
    errors: [], error_count: 0, imported_at: "2026-12-03T18:00:00Z", updated_at: "2026-12-03T18:00:05Z", sha256: "ab".repeat(32),
    ...over,
  };
}

const invoice = (unmatched: number | null): InvoiceReconciliation => ({
  rows: [], totals: { billed_usd: 0, measured_usd: 0, unexplained_usd: 0 }, unmatched_billed_usd: unmatched, lines: 0,
});

function renderCard(unmatched: number | null, answers: unknown[]) {
  let call = 0;
  const api = mockFetch({ [INVOICES_API]: () => answers[Math.min(call++, answers.length - 1)] });
  vi.stubGlobal("fetch", api.fn);
  render(
    <MemoryRouter>
      <InvoiceCard month="2026-09" invoice={invoice(unmatched)} />
    </MemoryRouter>,
  );
  return api;
}

test("a running import shows its progress and is asked for again until it is done", async () => {
  renderCard(0, [[job()], [job({ status: "done", lines_checked: 62000, lines_new: 61990, matched_lines: 120 })]]);
  expect(await screen.findByText(/12,000 of 62,000 lines checked/)).toBeInTheDocument();
  await waitFor(() => expect(screen.getByTestId("invoice-import-7")).toHaveTextContent("62,000 lines, 61,990 new, 120 matched to nodes"), { timeout: 5000 });
  expect(within(screen.getByTestId("invoice-import-7")).getByText("done")).toBeInTheDocument();
});

test("a refused import lists its first errors and counts the rest", async () => {
  const errors = Array.from({ length: 20 }, (_, i) => `line ${i + 2}: BillingCurrency: 'JPY' is not the organization's currency USD`);
  renderCard(0, [[job({ status: "failed", errors, error_count: 62000 })]]);
  const list = await screen.findByTestId("invoice-import-errors-7");
  expect(within(list).getAllByRole("listitem")).toHaveLength(21);
  expect(list).toHaveTextContent("… and 61,980 more");
  expect(screen.getByTestId("invoice-import-7")).toHaveTextContent("nothing imported: 62,000 errors");
});

test("people who read only their teams' invoice rows do not ask for the imports", async () => {
  const api = renderCard(null, [[job()]]);
  expect(screen.getByText(/No invoice GPU lines/)).toBeInTheDocument();
  await new Promise((r) => setTimeout(r, 50));
  expect(api.calls.some((c) => c.url.startsWith(INVOICES_API))).toBe(false);
  expect(screen.queryByTestId("invoice-imports")).not.toBeInTheDocument();
});
