import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { ApiTokenRow } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";
import { tokenKindsFor, tokenStateText } from "./SettingsTokens";

const lead = { username: "lea", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "NLP", role: "admin" }] };

function tokenRow(over: Partial<ApiTokenRow>): ApiTokenRow {
  return {
    id: 1,
    prefix: "phk_aaaaaaaa",
    kind: "project",
    project: "llm",
    user: null,
    owner: "lea",
    name: "cluster",
    created_at: "2026-11-01T10:00:00Z",
    expires_at: null,
    last_used_at: "2026-12-01T09:30:00Z",
    last_used_address: "203.0.113.9",
    revoked_at: null,
    state: "active",
    replaced_by: null,
    overlap_ends_at: null,
    ends_at: null,
    hostnames: [],
    ...over,
  };
}

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

/** A token list behind a stubbed fetch: create, rotate and revoke change it as the server would. */
function tokenServer() {
  let rows: ApiTokenRow[] = [tokenRow({})];
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: lead, csrf_token: "tok" },
    "/api/v1/portal/tokens": (url: string, init?: RequestInit) => {
      const method = init?.method ?? "GET";
      const tail = url.replace(/^.*\/portal\/tokens/, "");
      if (method === "GET") return rows;
      if (method === "POST" && tail === "") {
        const body = JSON.parse(String(init?.body));
        if (!body.name) return json(400, { error: { code: "invalid", message: "name: This field is required.", fields: { name: "This field is required." } } });
        const made = tokenRow({ id: 2, prefix: "phk_bbbbbbbb", name: body.name, project: body.project, expires_at: "2027-01-30T10:00:00Z", last_used_at: null, last_used_address: null });
        rows = [made, ...rows];
        return json(201, { ...made, token: "phk_bbbbbbbb-the-secret" });
      }
      const id = Number(tail.split("/")[1]);
      if (method === "POST" && tail.endsWith("/rotate")) {
        const old = rows.find((r) => r.id === id)!;
        const successor = tokenRow({ ...old, id: 3, prefix: "phk_cccccccc", last_used_at: null, last_used_address: null });
        const ends = "2099-12-02T10:00:00Z";
        const rotated = { ...old, state: "rotated" as const, replaced_by: 3, overlap_ends_at: ends, ends_at: ends };
        rows = [successor, ...rows.map((r) => (r.id === id ? rotated : r))];
        return json(201, { token: { ...successor, token: "phk_cccccccc-the-secret" }, old: rotated });
      }
      if (method === "DELETE") {
        rows = rows.map((r) => (r.id === id ? { ...r, state: "revoked" as const, revoked_at: "2026-12-05T10:00:00Z", ends_at: "2026-12-05T10:00:00Z" } : r));
        return new Response(null, { status: 204 });
      }
      return json(405, { error: { code: "method_not_allowed", message: method, fields: {} } });
    },
  });
  vi.stubGlobal("fetch", api.fn);
  const calls = (method: string, suffix: string) => api.calls.filter((c) => (c.init?.method ?? "GET") === method && c.url.endsWith(suffix));
  return { calls };
}

function renderTokens() {
  return renderAt("/settings?tab=tokens", <SettingsPage />, "/settings");
}

const rowOf = (prefix: string) => within(screen.getByRole("table", { name: "API tokens" })).getByText(`${prefix}…`, { selector: "code" }).closest("tr")!;

afterEach(() => vi.unstubAllGlobals());

describe("Settings: API tokens", () => {
  it("lists each token's state, expiry, owner and last use with its address", async () => {
    tokenServer();
    renderTokens();
    const row = await waitFor(() => rowOf("phk_aaaaaaaa"));
    expect(within(row).getByText("active")).toHaveClass("badge-ok");
    expect(within(row).getByText("lea")).toBeInTheDocument();
    expect(within(row).getByText("never")).toBeInTheDocument(); // no expiry
    expect(row).toHaveTextContent("from 203.0.113.9");
  });

  it("creates a token with a name and an expiry, and shows it once", async () => {
    const server = tokenServer();
    renderTokens();
    await waitFor(() => rowOf("phk_aaaaaaaa"));
    await userEvent.click(screen.getByRole("radio", { name: "Project (ingest)" }));
    await userEvent.type(screen.getByLabelText("Project slug"), "llm");
    await userEvent.type(screen.getByLabelText("Name"), "ci");
    await userEvent.selectOptions(screen.getByLabelText("Expires"), "90");
    await userEvent.click(screen.getByRole("button", { name: "Create token" }));
    expect(await screen.findByTestId("issued-token")).toHaveTextContent("phk_bbbbbbbb-the-secret");
    const [post] = server.calls("POST", "/portal/tokens");
    expect(JSON.parse(String(post.init?.body))).toEqual({ kind: "project", name: "ci", project: "llm", expires_in_days: 90 });
    await waitFor(() => expect(rowOf("phk_bbbbbbbb")).toHaveTextContent("ci"));
  });

  it("rotates with the chosen overlap, shows the new token once and when the old one stops", async () => {
    const server = tokenServer();
    renderTokens();
    await waitFor(() => rowOf("phk_aaaaaaaa"));
    await userEvent.click(screen.getByRole("button", { name: "Rotate phk_aaaaaaaa…" }));
    const dialog = screen.getByRole("dialog", { name: "Rotate token?" });
    await userEvent.selectOptions(within(dialog).getByLabelText("Old token keeps working for"), "3600");
    await userEvent.click(within(dialog).getByRole("button", { name: "Rotate token" }));
    const issued = await screen.findByTestId("issued-token");
    expect(issued).toHaveTextContent("phk_cccccccc-the-secret");
    expect(issued).toHaveTextContent(/It replaces phk_aaaaaaaa…, which keeps working until/);
    expect(JSON.parse(String(server.calls("POST", "/tokens/1/rotate")[0].init?.body))).toEqual({ overlap_s: 3600 });
    await waitFor(() => expect(within(rowOf("phk_aaaaaaaa")).getByText(/rotated; works until/)).toHaveClass("badge-info"));
    expect(within(rowOf("phk_aaaaaaaa")).queryByRole("button", { name: /Rotate/ })).toBeNull(); // rotated once only
  });

  it("revokes only after confirming", async () => {
    const server = tokenServer();
    renderTokens();
    await waitFor(() => rowOf("phk_aaaaaaaa"));
    await userEvent.click(screen.getByRole("button", { name: "Revoke phk_aaaaaaaa…" }));
    const dialog = screen.getByRole("alertdialog", { name: "Revoke token?" });
    await userEvent.click(within(dialog).getByRole("button", { name: "Cancel" }));
    expect(server.calls("DELETE", "/tokens/1")).toHaveLength(0);
    await userEvent.click(screen.getByRole("button", { name: "Revoke phk_aaaaaaaa…" }));
    await userEvent.click(within(screen.getByRole("alertdialog")).getByRole("button", { name: "Revoke token" }));
    await waitFor(() => expect(within(rowOf("phk_aaaaaaaa")).getByText(/^revoked/)).toHaveClass("badge-bad"));
    expect(server.calls("DELETE", "/tokens/1")).toHaveLength(1);
    expect(within(rowOf("phk_aaaaaaaa")).queryByRole("button")).toBeNull();
  });

  it("shows the field the server names when a token is refused", async () => {
    tokenServer();
    renderTokens();
    await waitFor(() => rowOf("phk_aaaaaaaa"));
    const name = screen.getByLabelText("Name");
    name.removeAttribute("required");
    await userEvent.click(screen.getByRole("button", { name: "Create token" }));
    expect(await screen.findByText(/This field is required/)).toBeInTheDocument();
  });
});

describe("token words", () => {
  it("says what each state means and when", () => {
    const now = new Date("2026-12-05T12:00:00Z");
    expect(tokenStateText(tokenRow({ state: "rotated", ends_at: "2026-12-06T12:00:00Z" }), now)).toMatch(/^rotated; works until /);
    expect(tokenStateText(tokenRow({ state: "rotated", ends_at: "2026-12-04T12:00:00Z" }), now)).toMatch(/^rotated; stopped /);
    expect(tokenStateText(tokenRow({ state: "expiring", ends_at: "2026-12-08T12:00:00Z" }), now)).toMatch(/^expires /);
    expect(tokenStateText(tokenRow({ state: "expired", ends_at: "2026-12-01T12:00:00Z" }), now)).toMatch(/^expired /);
  });

  it("offers the kinds a person may create", () => {
    expect(tokenKindsFor(lead)).toEqual(["personal", "project"]);
    expect(tokenKindsFor({ ...lead, teams: [] })).toEqual(["personal"]);
    expect(tokenKindsFor({ ...lead, teams: [], is_org_admin: true })).toEqual(["personal", "project", "node", "scim"]);
    expect(tokenKindsFor({ ...lead, teams: [], is_finance: true })).toEqual(["personal"]); // finance manages no organization token
  });
});
