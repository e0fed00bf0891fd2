import { fireEvent, screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { PriceAuditRow, PriceEntry } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";

const adminUser = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const viewer = { username: "vic", is_finance: false, is_org_admin: false, teams: [] };

function price(over: Partial<PriceEntry>): PriceEntry {
  return {
    id: 1,
    gpu: "H100-SXM",
    provider: "",
    region: "",
    tier: "on_demand",
    usd_per_gpu_hour: "2.5000",
    effective_from: "2025-01-01T00:00:00Z",
    effective_to: null,
    is_example: false,
    note: "",
    updated_at: "2026-01-01T00:00:00Z",
    ...over,
  };
}

function auditRow(over: Partial<PriceAuditRow>): PriceAuditRow {
  return { id: 1, entry_id: 1, action: "create", actor: "example seed", at: "2025-01-01T00:00:00Z", before: null, after: null, ...over };
}

type Handler = (url: string, init?: RequestInit) => unknown;
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

/** A price book behind a stubbed fetch: PATCH and DELETE change it and append to its audit trail, unless `detail` answers first. */
function priceServer({ admin = true, detail, audit }: { admin?: boolean; detail?: Handler; audit?: PriceAuditRow[] } = {}) {
  let prices = [
    price({ id: 7, provider: "aws", region: "us-east-1", is_example: true, note: "example: p5.48xlarge" }),
    price({ id: 8, gpu: "A100-80GB", usd_per_gpu_hour: "1.2000", note: "negotiated" }),
  ];
  let trail: PriceAuditRow[] = audit ?? [
    auditRow({ id: 2, entry_id: 8, after: { gpu: "A100-80GB", provider: "", region: "", tier: "on_demand", usd_per_gpu_hour: "1.2000" } }),
    auditRow({ id: 1, entry_id: 7, after: { gpu: "H100-SXM", provider: "aws", region: "us-east-1", tier: "on_demand", usd_per_gpu_hour: "2.5000" } }),
  ];
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: admin ? adminUser : viewer, csrf_token: "tok" },
    "/api/v1/pricing/gpus": [],
    "/api/v1/pricing/prices": () => prices,
    "/api/v1/pricing/audit": () => trail,
    "/api/v1/pricing/prices/": (url: string, init?: RequestInit) => {
      const answer = detail?.(url, init);
      if (answer !== undefined) return answer;
      const id = Number(url.split("/").pop());
      const entry = prices.find((p) => p.id === id)!;
      const next = trail.length + 10;
      if (init?.method === "DELETE") {
        prices = prices.filter((p) => p.id !== id);
        trail = [auditRow({ id: next, entry_id: id, action: "delete", actor: "ada", at: "2026-03-02T10:00:00Z", before: { ...entry, usd_per_gpu_hour: String(entry.usd_per_gpu_hour) } }), ...trail];
        return new Response(null, { status: 204 });
      }
      const changes = JSON.parse(String(init?.body));
      const updated = { ...entry, ...changes };
      prices = prices.map((p) => (p.id === id ? updated : p));
      trail = [
        auditRow({ id: next, entry_id: id, action: "update", actor: "ada", at: "2026-03-02T09:00:00Z", before: { ...entry, usd_per_gpu_hour: String(entry.usd_per_gpu_hour) }, after: updated }),
        ...trail,
      ];
      return updated;
    },
  });
  vi.stubGlobal("fetch", api.fn);
  const calls = (method: string, prefix: string) => api.calls.filter((c) => (c.init?.method ?? "GET") === method && c.url.startsWith(prefix));
  return { api, calls };
}

function renderPrices() {
  return renderAt("/settings?tab=prices", <SettingsPage />, "/settings");
}

const row = (id: number) => document.querySelector<HTMLElement>(`[data-testid="price-book"] tr[data-row-key="${id}"]`);

afterEach(() => vi.unstubAllGlobals());

describe("Price book: editing", () => {
  it("sends only the changed fields, then re-reads the price book and the audit trail", async () => {
    const server = priceServer();
    renderPrices();
    const edit = await screen.findByRole("button", { name: "Edit price H100-SXM · aws · us-east-1 · on-demand · from Jan 1, 2025" });
    await screen.findByTestId("price-audit");
    await userEvent.click(edit);

    const dialog = screen.getByRole("dialog", { name: "Edit price" });
    const usd = within(dialog).getByLabelText("$ / GPU-hour");
    expect(usd).toHaveFocus();
    expect(usd).toHaveValue(2.5);
    expect(within(dialog).getByLabelText(/Example price/)).toBeChecked();
    await userEvent.clear(usd);
    await userEvent.type(usd, "2.75");
    fireEvent.change(within(dialog).getByLabelText("Effective to"), { target: { value: "2031-01-01" } });
    await userEvent.clear(within(dialog).getByLabelText("Note"));
    await userEvent.type(within(dialog).getByLabelText("Note"), "list price 2026");
    await userEvent.click(within(dialog).getByLabelText(/Example price/));
    await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));

    await waitFor(() => expect(screen.queryByRole("dialog")).not.toBeInTheDocument());
    const [patch] = server.calls("PATCH", "/api/v1/pricing/prices/");
    expect(patch.url).toBe("/api/v1/pricing/prices/7");
    expect(JSON.parse(String(patch.init!.body))).toEqual({ usd_per_gpu_hour: "2.75", effective_to: "2031-01-01T00:00:00Z", note: "list price 2026", is_example: false });
    expect((patch.init!.headers as Record<string, string>)["X-CSRFToken"]).toBe("tok");

    expect(await screen.findByTestId("price-notice")).toHaveTextContent("Saved H100-SXM · aws · us-east-1");
    await waitFor(() => expect(row(7)).toHaveTextContent("$2.75"));
    expect(row(7)).toHaveTextContent("Jan 1, 2031");
    expect(row(7)).toHaveTextContent("list price 2026");
    expect(server.calls("GET", "/api/v1/pricing/prices")).toHaveLength(2);
    const audit = screen.getByTestId("price-audit");
    await waitFor(() => expect(within(audit).getAllByRole("row")[1]).toHaveTextContent("update"));
    expect(within(audit).getAllByRole("row")[1]).toHaveTextContent("$2.50 → $2.75");
    expect(within(audit).getAllByRole("row")[1]).toHaveTextContent("to open → Jan 1, 2031; note; no longer example");
    // Focus goes back to the button that opened the dialog.
    expect(screen.getByRole("button", { name: /^Edit price H100-SXM · aws/ })).toHaveFocus();
  });

  it("shows it is saving, then the API's message, marks the field it names and stays open", async () => {
    let answer!: (r: Response) => void;
    const server = priceServer({ detail: (_url, init) => (init?.method === "PATCH" ? new Promise<Response>((resolve) => (answer = resolve)) : undefined) });
    renderPrices();
    await userEvent.click(await screen.findByRole("button", { name: /^Edit price A100-80GB/ }));
    const dialog = screen.getByRole("dialog", { name: "Edit price" });
    const to = within(dialog).getByLabelText("Effective to");
    fireEvent.change(to, { target: { value: "2024-06-01" } });
    await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));

    expect(within(dialog).getByRole("button", { name: "Saving…" })).toBeDisabled();
    // The disabled button drops the focus; the dialog keeps it, and Escape does not lose the answer.
    await waitFor(() => expect(dialog).toHaveFocus());
    await userEvent.keyboard("{Escape}");
    expect(screen.getByRole("dialog", { name: "Edit price" })).toBeInTheDocument();
    answer(json(400, { error: { code: "invalid", message: "effective_to: must be after effective_from", fields: { effective_to: "must be after effective_from" } } }));

    expect(await within(dialog).findByRole("alert")).toHaveTextContent("effective_to: must be after effective_from");
    expect(to).toHaveAttribute("aria-invalid", "true");
    expect(to).toHaveAccessibleDescription(/must be after effective_from/);
    expect(to).toHaveClass("is-invalid");
    expect(within(dialog).getByLabelText("$ / GPU-hour")).not.toHaveAttribute("aria-invalid");
    expect(within(dialog).getByRole("button", { name: "Save" })).toBeEnabled();
    expect(JSON.parse(String(server.calls("PATCH", "/api/v1/pricing/prices/")[0].init!.body))).toEqual({ effective_to: "2024-06-01T00:00:00Z" });
  });

  it("keeps Tab inside the dialog, closes on Escape without a request and returns focus", async () => {
    const server = priceServer();
    renderPrices();
    const edit = await screen.findByRole("button", { name: /^Edit price A100-80GB/ });
    edit.focus();
    await userEvent.keyboard("{Enter}");
    const dialog = screen.getByRole("dialog", { name: "Edit price" });
    expect(within(dialog).getByLabelText("$ / GPU-hour")).toHaveFocus();
    await userEvent.tab({ shift: true });
    expect(within(dialog).getByRole("button", { name: "Cancel" })).toHaveFocus();
    await userEvent.tab();
    expect(within(dialog).getByLabelText("$ / GPU-hour")).toHaveFocus();
    await userEvent.keyboard("{Escape}");
    expect(screen.queryByRole("dialog")).not.toBeInTheDocument();
    expect(edit).toHaveFocus();

    // Saving with nothing changed closes the dialog without asking the API.
    await userEvent.click(edit);
    await userEvent.click(within(screen.getByRole("dialog")).getByRole("button", { name: "Save" }));
    expect(screen.queryByRole("dialog")).not.toBeInTheDocument();
    expect(server.calls("PATCH", "/api/v1/pricing/prices/")).toHaveLength(0);
  });
});

describe("Price book: deleting", () => {
  it("asks first (Cancel has the focus), then deletes with the keyboard and says so", async () => {
    const server = priceServer();
    renderPrices();
    const del = await screen.findByRole("button", { name: "Delete price A100-80GB · any provider · any region · on-demand · from Jan 1, 2025" });
    del.focus();
    await userEvent.keyboard("{Enter}");
    let confirm = screen.getByRole("alertdialog", { name: "Delete price?" });
    expect(confirm).toHaveTextContent("A100-80GB · any provider · any region · on-demand · from Jan 1, 2025 at $1.20 per GPU-hour");
    expect(within(confirm).getByRole("button", { name: "Cancel" })).toHaveFocus();
    await userEvent.keyboard("{Enter}");
    expect(screen.queryByRole("alertdialog")).not.toBeInTheDocument();
    expect(server.calls("DELETE", "/api/v1/pricing/prices/")).toHaveLength(0);
    expect(del).toHaveFocus();

    await userEvent.keyboard("{Enter}");
    confirm = screen.getByRole("alertdialog", { name: "Delete price?" });
    await userEvent.tab({ shift: true });
    expect(within(confirm).getByRole("button", { name: "Delete price" })).toHaveFocus();
    await userEvent.keyboard("{Enter}");

    await waitFor(() => expect(screen.queryByRole("alertdialog")).not.toBeInTheDocument());
    expect(server.calls("DELETE", "/api/v1/pricing/prices/").map((c) => c.url)).toEqual(["/api/v1/pricing/prices/8"]);
    await waitFor(() => expect(row(8)).toBeNull());
    expect(row(7)).not.toBeNull();
    const notice = screen.getByTestId("price-notice");
    expect(notice).toHaveTextContent("Deleted A100-80GB");
    expect(notice).toHaveFocus();
    await waitFor(() => expect(within(screen.getByTestId("price-audit")).getAllByRole("row")[1]).toHaveTextContent(/delete.*A100-80GB.*\$1\.20 → –/));
  });

  it("shows why the API refused and keeps the price", async () => {
    const server = priceServer({
      detail: (_url, init) => (init?.method === "DELETE" ? json(403, { error: { code: "forbidden", message: "Only organization admins can change the price book.", fields: {} } }) : undefined),
    });
    renderPrices();
    await userEvent.click(await screen.findByRole("button", { name: /^Delete price H100-SXM/ }));
    const confirm = screen.getByRole("alertdialog", { name: "Delete price?" });
    await userEvent.click(within(confirm).getByRole("button", { name: "Delete price" }));
    expect(await within(confirm).findByRole("alert")).toHaveTextContent("Only organization admins can change the price book.");
    expect(within(confirm).getByRole("button", { name: "Delete price" })).toBeEnabled();
    expect(row(7)).not.toBeNull();
    expect(server.calls("GET", "/api/v1/pricing/prices")).toHaveLength(1);
  });
});

describe("Price book: who sees what", () => {
  it("hides add, edit, delete and the audit trail from members who are not organization admins", async () => {
    const server = priceServer({ admin: false });
    renderPrices();
    await waitFor(() => expect(row(7)).not.toBeNull());
    expect(screen.queryByRole("button", { name: /^Edit price/ })).not.toBeInTheDocument();
    expect(screen.queryByRole("button", { name: /^Delete price/ })).not.toBeInTheDocument();
    expect(screen.queryByRole("heading", { name: "Set a price" })).not.toBeInTheDocument();
    expect(screen.queryByRole("heading", { name: "Audit trail" })).not.toBeInTheDocument();
    expect(server.calls("GET", "/api/v1/pricing/audit")).toHaveLength(0);
  });

  it("lists the latest 50 changes: when, who, what, and the price before and after", async () => {
    const many = Array.from({ length: 60 }, (_, i) =>
      auditRow({ id: 100 - i, entry_id: 3, action: "update", actor: "bob", at: "2026-02-01T00:00:00Z", before: { gpu: "L4", usd_per_gpu_hour: "0.8000" }, after: { gpu: "L4", usd_per_gpu_hour: "0.8000", note: "x" } }),
    );
    const trail = [
      auditRow({ id: 300, entry_id: 9, action: "create", actor: "ada", at: "2026-03-01T12:30:00Z", after: { gpu: "B200", provider: "aws", region: "us-west-2", tier: "spot", usd_per_gpu_hour: "3.0000" } }),
      auditRow({
        id: 299,
        entry_id: 4,
        action: "close",
        actor: "ada",
        at: "2026-03-01T12:30:00Z",
        before: { gpu: "B200", provider: "aws", tier: "spot", usd_per_gpu_hour: "3.5000", effective_to: null },
        after: { gpu: "B200", provider: "aws", tier: "spot", usd_per_gpu_hour: "3.5000", effective_to: "2026-03-01T12:30:00+00:00" },
      }),
      ...many,
    ];
    priceServer({ audit: trail });
    renderPrices();
    const table = await screen.findByTestId("price-audit");
    const rows = within(table).getAllByRole("row").slice(1);
    expect(rows).toHaveLength(50);
    expect(within(table).getAllByRole("columnheader").map((h) => h.textContent)).toEqual(["When", "Who", "Action", "GPU", "Provider · region", "Tier", "$/GPU-hour"]);
    const cells = (r: HTMLElement) => within(r).getAllByRole("cell").map((c) => c.textContent);
    expect(cells(rows[0])).toEqual(["Mar 1, 2026, 12:30 UTC", "ada", "create", "B200", "aws · us-west-2", "spot", "– → $3.00"]);
    expect(cells(rows[1])).toEqual(["Mar 1, 2026, 12:30 UTC", "ada", "close", "B200", "aws", "spot", "$3.50 → $3.50to open → Mar 1, 2026"]);
    expect(cells(rows[2])).toEqual(["Feb 1, 2026, 00:00 UTC", "bob", "update", "L4", "any", "–", "$0.80 → $0.80note"]);
    expect(screen.getByRole("table", { name: "Price book audit trail, latest 50 changes" })).toBeInTheDocument();
  });
});

describe("Price book: a change reaching into a closed month", () => {
  const refusal = json(409, {
    error: {
      code: "closed_month",
      message:
        "this change reprices closed month 2026-11: their closed figures stay, and finance shows the difference as an adjustment. Send confirm_closed=1 to go ahead",
      fields: { confirm_closed: "required: reaches closed 2026-11" },
    },
  });

  it("warns in the dialog and saves only when confirmed", async () => {
    const server = priceServer({
      detail: (url, init) => {
        if (init?.method !== "PATCH") return undefined;
        return url.includes("confirm_closed=1") ? price({ id: 8, gpu: "A100-80GB", usd_per_gpu_hour: "1.5000" }) : refusal.clone();
      },
    });
    renderPrices();
    await userEvent.click(await screen.findByRole("button", { name: /^Edit price A100-80GB/ }));
    const dialog = screen.getByRole("dialog", { name: "Edit price" });
    const usd = within(dialog).getByLabelText("$ / GPU-hour");
    await userEvent.clear(usd);
    await userEvent.type(usd, "1.5");
    await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));

    const warning = await within(dialog).findByTestId("closed-month-warning");
    expect(warning).toHaveTextContent("This change reaches into a closed month.");
    expect(warning).toHaveTextContent("reprices closed month 2026-11");
    expect(warning).not.toHaveTextContent("confirm_closed");
    expect(screen.getByRole("dialog", { name: "Edit price" })).toBeInTheDocument();
    await userEvent.click(within(warning).getByRole("button", { name: "Change anyway" }));

    await waitFor(() => expect(screen.queryByRole("dialog")).not.toBeInTheDocument());
    const patches = server.calls("PATCH", "/api/v1/pricing/prices/");
    expect(patches.map((c) => c.url)).toEqual(["/api/v1/pricing/prices/8", "/api/v1/pricing/prices/8?confirm_closed=1"]);
    expect(JSON.parse(String(patches[1].init!.body))).toEqual({ usd_per_gpu_hour: "1.5" });
  });

  it("asks again before a delete, and Don’t change sends nothing more", async () => {
    const server = priceServer({ detail: (_url, init) => (init?.method === "DELETE" ? refusal.clone() : undefined) });
    renderPrices();
    await userEvent.click(await screen.findByRole("button", { name: /^Delete price A100-80GB/ }));
    const confirm = screen.getByRole("alertdialog", { name: "Delete price?" });
    await userEvent.click(within(confirm).getByRole("button", { name: "Delete price" }));
    const warning = await within(confirm).findByTestId("closed-month-warning");
    await userEvent.click(within(warning).getByRole("button", { name: "Don’t change" }));
    expect(within(confirm).queryByTestId("closed-month-warning")).not.toBeInTheDocument();
    expect(server.calls("DELETE", "/api/v1/pricing/prices/")).toHaveLength(1);
  });
});
