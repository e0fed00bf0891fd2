// Every card and every explanation of a run page in the product's words, units and precision. The
// fixtures are real portal answers (GET /api/v1/portal/runs/{id}) for a 2-rank run with a slow rank,
// peers and a baseline, and for a run of a fraction of a cent (the demo's CPU runs).
import { fireEvent, render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter, Route, Routes } from "react-router";

import { SessionProvider } from "../../api/session";
import type { RunDetail } from "../../api/types";
import { ThemeProvider } from "../../lib/theme";
import { mockFetch } from "../../test/fixtures";
import bigRun from "../../test/run-fixture.json";
import tinyRun from "../../test/run-tiny-fixture.json";
import { RunDetailPage } from "../RunDetail";

vi.mock("../../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

const signedIn = { authenticated: true, user: { username: "ada", is_finance: false, is_org_admin: true, teams: [] }, csrf_token: "t" };

async function show(detail: unknown) {
  vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedIn, "/api/v1/portal/runs/": detail }).fn);
  render(
    <ThemeProvider>
      <SessionProvider>
        <MemoryRouter initialEntries={["/runs/r"]}>
          <Routes>
            <Route path="/runs/:id" element={<RunDetailPage />} />
          </Routes>
        </MemoryRouter>
      </SessionProvider>
    </ThemeProvider>,
  );
  await screen.findByTestId("breakdown");
}

afterEach(() => vi.unstubAllGlobals());

/** What a reader sees: the element's text without collapsed code (raw formulas, config, fixes). */
function visibleText(el: Element): string {
  const copy = el.cloneNode(true) as Element;
  copy.querySelectorAll("details, code, script, style").forEach((n) => n.remove());
  // Text nodes apart, as a reader sees separate elements ("$0.14" then "77.8% of cost", not "$0.1477.8%").
  const walker = document.createTreeWalker(copy, NodeFilter.SHOW_TEXT);
  const parts: string[] = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) parts.push(n.textContent ?? "");
  return parts.join(" ").replace(/\s+/g, " ");
}

// Code that must never reach a reader: unit factors, price segments by index, internal names,
// four-decimal dollars for computed figures, a hyphen for a minus, a bare 0.0% for a real share.
const CODE_TOKENS: [string, RegExp][] = [
  ["a unit factor", /10⁹|10⁶|\b1e\d\b|\/ ?3600\b|3\.6e12/],
  ["a price segment by index", /\bsegment[ _]\d/],
  ["a nanosecond name", /\w_ns\b|_ns_/],
  ["a snake_case name", /\b[a-z]+_[a-z_]+\b/],
  // "$7.9100": a computed figure printed to the price book's four decimals (a tiny run's $0.0017 is fine).
  ["four-decimal dollars", /\$\d[\d,]*\.(?!0000)\d\d00(?!\d)|\$\d[\d,]*\.\d{5,}/],
  ["a hyphen as a minus", /(^|[\s(])-\d[\d.,]*\s?(%|pp|ms|s\b)/],
  ["round_half_up", /round_half_up/],
];

function codeIn(text: string): string[] {
  return CODE_TOKENS.filter(([, re]) => re.test(text)).map(([what, re]) => `${what}: …${text.slice(Math.max(0, text.search(re) - 40), text.search(re) + 40)}…`);
}

/** Opens every ƒ popover in turn and returns what each says (its collapsed raw text left out). */
async function everyExplanation(): Promise<{ label: string; text: string }[]> {
  const out: { label: string; text: string }[] = [];
  const buttons = screen.getAllByRole("button", { name: /^How .* is computed$/ });
  expect(buttons.length).toBeGreaterThan(10);
  for (const button of buttons) {
    fireEvent.click(button);
    const dialog = screen.getByRole("dialog");
    out.push({ label: button.getAttribute("aria-label") ?? "", text: visibleText(dialog) });
    fireEvent.keyDown(dialog, { key: "Escape" });
  }
  return out;
}

describe("a run page in product words", () => {
  it("says no code in any card or explanation of a real multi-rank run", async () => {
    await show(bigRun);
    const page = visibleText(document.body);
    expect(codeIn(page)).toEqual([]);
    for (const { label, text } of await everyExplanation()) {
      expect({ label, code: codeIn(text) }).toEqual({ label, code: [] });
    }
  });

  it("writes each quantity the same way in the cards, the sentences and the popovers", async () => {
    const detail = bigRun as unknown as RunDetail;
    const a = detail.analysis!;
    await show(bigRun);
    // The price per GPU-hour is the price, from unrounded dollars (the rounded cost over hours is not).
    expect(screen.getByTestId("run-cost")).toHaveTextContent("$7.91 per GPU-hour");
    // One straggler cost on every line: the callout and its recommendation agree to the cent.
    const rec = a.recommendations.find((r) => r.code === "STRAGGLER")!;
    expect(screen.getByTestId("straggler-cost")).toHaveTextContent(`$${rec.saving_usd!.toFixed(2)}`);
    expect(within(screen.getByTestId("rec-STRAGGLER")).getByTestId("rec-saving")).toHaveTextContent(`$${rec.saving_usd!.toFixed(2)}`);
    // The GPU-hours card and the breakdown's total are one figure.
    const card = screen.getByTestId("run-gpu-hours").querySelector(".stat-value")!.textContent!.replace("GPU-h", "").trim();
    expect(within(screen.getByTestId("breakdown-total")).getByText(`${card} GPU-h`)).toBeInTheDocument();
    // A baseline's MFU difference reads in points in its popover as in its table.
    const mfuRow = within(screen.getByTestId("baseline-table")).getByText("MFU over step time").closest("tr")!;
    const tableDelta = /[+−]\d+\.\d pp/.exec(mfuRow.textContent ?? "")?.[0];
    expect(tableDelta).toBeTruthy();
    await userEvent.click(within(mfuRow).getByRole("button"));
    expect(screen.getByRole("dialog")).toHaveTextContent(tableDelta!);
    fireEvent.keyDown(screen.getByRole("dialog"), { key: "Escape" });
  });

  it("relates recoverable, the recommendations, the monthly figure and the baseline in one sentence each", async () => {
    await show(bigRun);
    const a = (bigRun as unknown as RunDetail).analysis!;
    const claimed = a.recommendations.reduce((sum, r) => sum + (r.saving_usd ?? 0), 0);
    expect(screen.getByTestId("headline-recoverable")).toHaveTextContent(`Recoverable: $${a.recoverable_usd.toFixed(2)} of this run's`);
    expect(screen.getByTestId("headline-recommendations")).toHaveTextContent(
      claimed >= a.recoverable_usd - 0.005 ? "claim all of it, each dollar once" : `claim $${claimed.toFixed(2)} of it`,
    );
    // Its project ran after it: the month is as of reading, never "one-off".
    expect(screen.getByTestId("headline-monthly")).toHaveTextContent(/^Per month: \$\d+\.\d\d if the fixes hold .* in the 30 days to /);
    expect(document.body.textContent).not.toMatch(/one-off/);
    expect(screen.getByTestId("headline-baseline")).toHaveTextContent("it is not part of the recoverable dollars above");
  });

  it("shows a run of a fraction of a cent with its split, and words that follow its figures", async () => {
    const a = (tinyRun as unknown as RunDetail).analysis!;
    expect(a.cost_usd).toBe(0); // rounds to nothing: every card and row read $0.00 before
    await show(tinyRun);
    const cost = screen.getByTestId("run-cost");
    expect(cost).toHaveTextContent(/\$0\.00\d\d\b/);
    expect(cost).toHaveTextContent("$0.82 per GPU-hour");
    const rows = ["useful_compute", "compute_inefficiency", "data_stall", "comm_exposed", "host_overhead", "idle"].map(
      (c) => document.querySelector(`tr[data-category="${c}"] td:nth-child(3)`)!.textContent!,
    );
    const dollars = rows.map((t) => Number(/\$([\d.]+)/.exec(t)![1]));
    const total = Number(/\$([\d.]+)/.exec(within(screen.getByTestId("breakdown-total")).getAllByRole("cell")[1].textContent!)![1]);
    expect(dollars.reduce((x, y) => x + y, 0)).toBeCloseTo(total, 9); // the split foots to its total
    expect(Number(/\$([\d.]+)/.exec(rows[2])![1])).toBeGreaterThan(0); // data stall: 58% of step time is not $0.00
    const card = screen.getByTestId("run-gpu-hours").querySelector(".stat-value")!.textContent!.replace("GPU-h", "").trim();
    expect(within(screen.getByTestId("breakdown-total")).getByText(`${card} GPU-h`)).toBeInTheDocument();
    const text = visibleText(document.body);
    expect(text).not.toMatch(/Nothing spent on (waiting for data|data stall)|No start-up|no saving left to claim/);
    expect(screen.getByTestId("rec-DATA_STALL")).toHaveTextContent("no saving priced on this run: its data stall cost under a cent on this run");
    expect(screen.getByTestId("headline-recoverable")).toHaveTextContent("no category's waste reached a cent");
    expect(codeIn(text)).toEqual([]);
    for (const { label, text: said } of await everyExplanation()) {
      expect({ label, code: codeIn(said) }).toEqual({ label, code: [] });
      expect({ label, said: /^\S+ \$0\.00(?!\d)/.test(said) }).toEqual({ label, said: false });
    }
  });
});
