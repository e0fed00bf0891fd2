import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import { Layout } from "../components/Layout";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { AUDIT_API, AuditPage, auditQuery, auditValue, type AuditEntry, type AuditList as Page } from "./Audit";

const admin = { username: "root", is_finance: false, is_org_admin: true, teams: [] };
const finance = { username: "fin", is_finance: true, is_org_admin: false, teams: [] };
const KINDS = [
  { kind: "price", label: "Prices" },
  { kind: "month", label: "Month close and reopen" },
  { kind: "token", label: "Tokens" },
];

function entry(over: Partial<AuditEntry> = {}): AuditEntry {
  return {
    id: 40, at: "2026-12-05T06:01:00+00:00", actor: "root", address: "203.0.113.5", kind: "price", object_type: "price entry",
    object_id: "7", object: "H200 any provider on_demand: $3.50/GPU-h from 2026-07-01", action: "update",
    changes: [{ field: "usd_per_gpu_hour", before: "3.10", after: "3.50" }], ...over,
  };
}

function serve(user: typeof admin, pages: Record<string, Page>) {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user, csrf_token: "tok" },
    [AUDIT_API]: (url: string) => {
      const query = url.slice(AUDIT_API.length);
      return pages[query] ?? { entries: [], next: null, kinds: KINDS };
    },
  });
  vi.stubGlobal("fetch", api.fn);
  return api;
}

test("each entry shows when, who, the address, what and each field before → after", async () => {
  serve(admin, {
    "": {
      entries: [
        entry(),
        entry({ id: 39, actor: "SCIM", address: null, kind: "token", object_type: "api token", object: "phk_ab12cd34… (personal)", action: "create", changes: [{ field: "name", before: null, after: "ci" }] }),
      ],
      next: null,
      kinds: KINDS,
    },
  });
  renderAt("/audit", <AuditPage />, "/audit");
  const table = await screen.findByTestId("audit-table");
  const rows = within(table).getAllByRole("row").slice(1);
  expect(rows[0]).toHaveTextContent("Dec 5, 2026");
  expect(rows[0]).toHaveTextContent("root");
  expect(rows[0]).toHaveTextContent("203.0.113.5");
  expect(rows[0]).toHaveTextContent("changed price entry H200 any provider");
  expect(rows[0]).toHaveTextContent("usd_per_gpu_hour: 3.10 → 3.50");
  expect(rows[1]).toHaveTextContent("SCIM");
  expect(rows[1]).toHaveTextContent("created api token phk_ab12cd34… (personal)");
  expect(rows[1]).toHaveTextContent("name: ci");
  expect(rows[1]).not.toHaveTextContent("→");
});

test("the filters go into the URL, the request and the CSV link", async () => {
  const api = serve(admin, { "": { entries: [entry()], next: null, kinds: KINDS } });
  renderAt("/audit", <AuditPage />, "/audit");
  await screen.findByTestId("audit-table");
  await userEvent.selectOptions(screen.getByLabelText("What"), "token");
  await userEvent.type(screen.getByLabelText("Who"), "SCIM{Enter}");
  await waitFor(() => expect(screen.getByTestId("location")).toHaveTextContent("/audit?actor=SCIM&kind=token"));
  await waitFor(() => expect(api.calls.some((c) => c.url === `${AUDIT_API}?actor=SCIM&kind=token`)).toBe(true));
  expect(screen.getByTestId("audit-csv")).toHaveAttribute("href", `${AUDIT_API}.csv?actor=SCIM&kind=token`);
  await userEvent.click(screen.getByRole("button", { name: "Clear filters" }));
  await waitFor(() => expect(screen.getByTestId("location")).toHaveTextContent(/^\/audit$/));
});

test("older and newer pages follow the cursor", async () => {
  const api = serve(admin, {
    "": { entries: [entry({ id: 40 })], next: 40, kinds: KINDS },
    "?cursor=40": { entries: [entry({ id: 12, object: "older price" })], next: null, kinds: KINDS },
  });
  renderAt("/audit", <AuditPage />, "/audit");
  await screen.findByTestId("audit-table");
  expect(screen.getByRole("button", { name: "Newer" })).toBeDisabled();
  await userEvent.click(screen.getByRole("button", { name: "Older" }));
  expect(await screen.findByText("older price")).toBeInTheDocument();
  expect(api.calls.some((c) => c.url === `${AUDIT_API}?cursor=40`)).toBe(true);
  expect(screen.getByRole("button", { name: "Older" })).toBeDisabled();
  expect(screen.getByTestId("audit-page")).toHaveTextContent("Page 2");
  await userEvent.click(screen.getByRole("button", { name: "Newer" }));
  await waitFor(() => expect(screen.getByTestId("audit-page")).toHaveTextContent("Page 1"));
});

test("finance people are offered the kinds they may read", async () => {
  serve(finance, { "": { entries: [], next: null, kinds: KINDS.slice(0, 2) } });
  renderAt("/audit", <AuditPage />, "/audit");
  expect(await screen.findByText("No changes recorded yet")).toBeInTheDocument();
  const options = within(screen.getByLabelText("What")).getAllByRole("option").map((o) => o.textContent);
  expect(options).toEqual(["Everything", "Prices", "Month close and reopen"]);
});

test("a refusal is shown as such", async () => {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: { ...admin, is_org_admin: false }, csrf_token: "tok" },
    [AUDIT_API]: () => new Response(JSON.stringify({ error: { code: "forbidden", message: "the audit log is read by organization admins" } }), { status: 403 }),
  });
  vi.stubGlobal("fetch", api.fn);
  renderAt("/audit", <AuditPage />, "/audit");
  expect(await screen.findByText("You do not have access to this")).toBeInTheDocument();
});

test("values and queries", () => {
  expect(auditValue(null)).toBe("—");
  expect(auditValue("")).toBe("(empty)");
  expect(auditValue(0.4)).toBe("0.4");
  expect(auditValue(false)).toBe("false");
  expect(auditValue(["finance"])).toBe('["finance"]');
  expect(auditQuery({ q: "", actor: "a b", kind: "", action: "", object_id: "", from: "2026-09-01", to: "" }, 9)).toBe("?actor=a+b&from=2026-09-01&cursor=9");
});

test.each([
  ["an organization admin", admin, true],
  ["a finance person", finance, true],
  ["a team member", { username: "ann", is_finance: false, is_org_admin: false, teams: [] }, false],
])("the navigation offers the audit log to %s: %s", async (_who, user, offered) => {
  serve(user, {});
  renderAt("/", <Layout />, "/");
  expect(await screen.findByText(user.username)).toBeInTheDocument();
  const nav = screen.getByRole("navigation", { name: "Main" });
  if (offered) expect(within(nav).getByRole("link", { name: "Audit log" })).toHaveAttribute("href", "/audit");
  else expect(within(nav).queryByRole("link", { name: "Audit log" })).not.toBeInTheDocument();
});
