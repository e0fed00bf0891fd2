import { screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { GroupMappingView, MappingChange, PeoplePage } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";
import { changeSentence, changeSentences, mappingBody, mappingFieldName } from "./SettingsIdentity";

const change = (over: Partial<MappingChange>): MappingChange => ({ action: "join", grant: "team_member", team: "nlp", people: [], count: 1, ...over });
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

describe("the group mapping's changes in words", () => {
  it("says what would happen, in the singular and the plural", () => {
    expect(changeSentence(change({ count: 14 }))).toBe("14 people would join nlp as members");
    expect(changeSentence(change({ count: 1 }))).toBe("1 person would join nlp as a member");
    expect(changeSentence(change({ grant: "team_lead", count: 3 }))).toBe("3 people would join nlp as leads");
    expect(changeSentence(change({ action: "role", grant: "team_viewer", count: 2 }))).toBe("2 people would become viewers of nlp");
    expect(changeSentence(change({ action: "role", grant: "team_lead", count: 1 }))).toBe("1 person would become a lead of nlp");
    expect(changeSentence(change({ action: "leave", count: 2 }))).toBe("2 members would leave nlp");
    expect(changeSentence(change({ action: "leave", grant: "team_lead", count: 1 }))).toBe("1 lead would leave nlp");
    expect(changeSentence(change({ action: "leave", grant: "finance", team: null, count: 2 }))).toBe("2 people would lose finance");
    expect(changeSentence(change({ action: "join", grant: "org_admin", team: null, count: 1 }))).toBe("1 person would gain organization admin");
    expect(changeSentence(change({ count: 1200 }))).toBe("1,200 people would join nlp as members");
  });

  it("says what a save did, and when nothing changes", () => {
    expect(changeSentence(change({ count: 14 }), true)).toBe("14 people joined nlp as members");
    expect(changeSentence(change({ action: "leave", grant: "finance", team: null, count: 2 }), true)).toBe("2 people lost finance");
    expect(changeSentence(change({ action: "role", grant: "team_lead", count: 2 }), true)).toBe("2 people became leads of nlp");
    expect(changeSentences([])).toEqual(["Nobody's access would change."]);
    expect(changeSentences([], true)).toEqual(["Nobody's access changed."]);
  });

  it("names refused fields by the row as the editor numbers it, and sends no team for organization grants", () => {
    expect(mappingFieldName("rules[3].team")).toBe("Row 4: team");
    expect(mappingFieldName("rules[0]")).toBe("Row 1");
    expect(mappingFieldName("rules")).toBe("Rules");
    expect(mappingBody([{ pattern: " admins ", grant: "org_admin", team: "nlp" }, { pattern: "x", grant: "team_lead", team: "" }])).toEqual({
      rules: [{ pattern: "admins", grant: "org_admin", team: null }, { pattern: "x", grant: "team_lead", team: null }],
    });
  });
});

const adminUser = { username: "root", is_finance: false, is_org_admin: true, teams: [] as { slug: string; name: string; role: string }[] };
const leadUser = { username: "lee", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "admin" }] };
const MAPPING: GroupMappingView = { rules: [{ pattern: "nlp-*", grant: "team_member", team: "nlp", matches: ["nlp-research"] }], groups: [{ name: "nlp-research", members: 14 }], teams: ["nlp", "vision"] };
const REFUSAL = "ada's lead role in nlp comes from the identity provider's group nlp-leads (rule nlp-* → team lead); change the group or the mapping";
const PEOPLE: PeoplePage = {
  count: 1, page: 1, page_size: 100, can_edit_flags: true, teams: [{ slug: "nlp", name: "nlp" }],
  people: [{
    username: "ada", name: "Ada L", email: "ada@example.com", is_active: true, from_directory: true, synced_at: null, groups: ["nlp-leads"],
    flags: [{ flag: "is_org_admin", on: false, source: null, origin: null }, { flag: "is_finance", on: false, source: null, origin: null }],
    memberships: [{ team: "nlp", team_name: "nlp", role: "admin", source: "directory", origin: "the identity provider's group nlp-leads (rule nlp-* → team lead)" }],
  }],
};

function serve(user: typeof adminUser | typeof leadUser = adminUser) {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user, csrf_token: "tok" },
    "/api/v1/portal/group-mapping/preview": { ...MAPPING, changes: [{ action: "join", grant: "team_member", team: "nlp", people: [], count: 14 }, { action: "leave", grant: "finance", team: null, people: ["a", "b"], count: 2 }], people: [] },
    "/api/v1/portal/group-mapping": MAPPING,
    "/api/v1/portal/people/ada/memberships/nlp": () => json(409, { error: { code: "synced", message: REFUSAL, fields: { role: REFUSAL } } }),
    "/api/v1/portal/people": PEOPLE,
  });
  vi.stubGlobal("fetch", api.fn);
  return api;
}

function renderTab() {
  return renderAt("/settings?tab=people", <SettingsPage />, "/settings");
}

afterEach(() => vi.unstubAllGlobals());

describe("Settings → People & groups", () => {
  it("previews the mapping in sentences, and clears the preview on an edit", async () => {
    serve();
    renderTab();
    expect(await screen.findByTestId("mapping-row-0-matches")).toHaveTextContent("matches nlp-research");
    await userEvent.click(screen.getByTestId("mapping-preview-button"));
    const preview = await screen.findByTestId("mapping-preview");
    expect(within(preview).getByText("14 people would join nlp as members")).toBeInTheDocument();
    expect(within(preview).getByText("2 people would lose finance")).toBeInTheDocument();
    await userEvent.type(screen.getByLabelText("Row 1 group pattern"), "x");
    expect(screen.queryByTestId("mapping-preview")).not.toBeInTheDocument();
    expect(screen.queryByTestId("mapping-row-0-matches")).not.toBeInTheDocument();
  });

  it("shows where a synced membership comes from, and the refusal when it is edited", async () => {
    const api = serve();
    renderTab();
    const row = await screen.findByTestId("membership-ada-nlp");
    expect(within(row).getByTestId("source")).toHaveTextContent("directory");
    expect(row).toHaveTextContent("from the identity provider's group nlp-leads (rule nlp-* → team lead)");
    await userEvent.selectOptions(screen.getByLabelText("ada's role in nlp"), "member");
    expect(await screen.findByTestId("people-error")).toHaveTextContent(REFUSAL);
    const put = api.calls.find((c) => c.init?.method === "PUT");
    expect(put?.url).toBe("/api/v1/portal/people/ada/memberships/nlp");
    expect(JSON.parse(String(put?.init?.body))).toEqual({ role: "member" });
  });

  it("shows a team's lead the people list without the mapping, and someone else neither", async () => {
    serve(leadUser);
    const view = renderTab();
    expect(await screen.findByTestId("people")).toBeInTheDocument();
    expect(screen.queryByTestId("group-mapping")).not.toBeInTheDocument();
    view.unmount();
    serve({ ...leadUser, teams: [{ slug: "nlp", name: "nlp", role: "member" }] });
    renderTab();
    expect(await screen.findByText(/Ask one of them to change your access/)).toBeInTheDocument();
    expect(screen.queryByTestId("people")).not.toBeInTheDocument();
  });
});
