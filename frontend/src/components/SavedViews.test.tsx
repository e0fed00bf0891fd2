import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import { savedViewPage, suggestedName, type SavedView } from "../lib/savedViews";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SavedViewsNav, SaveViewButton } from "./SavedViews";

const ann = { username: "ann", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "NLP", role: "member" }] };

function view(over: Partial<SavedView>): SavedView {
  return {
    id: 1, name: "v", page: "runs", query: "", url: "/runs", team: null, team_name: null, owner: "ann", mine: true, can_delete: true,
    created_at: "2026-12-01T00:00:00Z", updated_at: "2026-12-01T00:00:00Z", ...over,
  };
}

/** A server holding `views`: GET lists them, POST adds one (or answers `refuse`), DELETE removes one. */
function server(views: SavedView[], refuse?: { status: number; fields: Record<string, string>; message: string }) {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: ann, csrf_token: "tok" },
    "/api/v1/portal/views": (url: string, init?: RequestInit) => {
      const method = init?.method ?? "GET";
      if (method === "POST") {
        if (refuse) return new Response(JSON.stringify({ error: { code: "invalid", message: refuse.message, fields: refuse.fields } }), { status: refuse.status });
        const body = JSON.parse(String(init?.body));
        const made = view({ id: views.length + 10, name: body.name, page: body.page, query: body.query, url: `/${body.page}?${body.query}`, team: body.team, team_name: body.team ? "NLP" : null });
        views.push(made);
        return new Response(JSON.stringify(made), { status: 201 });
      }
      if (method === "PATCH") {
        const body = JSON.parse(String(init?.body));
        const changed = views.find((v) => v.id === Number(url.split("/").pop()));
        Object.assign(changed!, { name: body.name ?? changed!.name, team: body.team, team_name: body.team ? "NLP" : null });
        return { ...changed };
      }
      if (method === "DELETE") {
        const id = Number(url.split("/").pop());
        views.splice(views.findIndex((v) => v.id === id), 1);
        return new Response(null, { status: 204 });
      }
      return { views: [...views] };
    },
  });
  vi.stubGlobal("fetch", api.fn);
  return api;
}

afterEach(() => vi.unstubAllGlobals());

function Page() {
  return (
    <>
      <SaveViewButton />
      <SavedViewsNav />
    </>
  );
}

test("saving a filtered runs list sends its page and query, shared with the chosen team, and the sidebar lists it", async () => {
  const api = server([]);
  renderAt("/runs?team=nlp&status=failed", <Page />, "/runs");
  expect(screen.queryByRole("navigation", { name: "Saved views" })).toBeNull();
  await userEvent.click(screen.getByRole("button", { name: "Save view" }));
  const dialog = screen.getByRole("dialog", { name: "Save view" });
  const name = within(dialog).getByLabelText("Name");
  expect(name).toHaveValue("Runs: team=nlp, status=failed");
  await userEvent.clear(name);
  await userEvent.type(name, "Failed NLP");
  await waitFor(() => expect(within(dialog).getByRole("option", { name: "Team NLP" })).toBeInTheDocument());
  await userEvent.selectOptions(within(dialog).getByLabelText("Share with"), "nlp");
  await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));
  expect(await within(dialog).findByRole("status")).toHaveTextContent("Saved “Failed NLP”, shared with NLP.");
  const post = api.calls.find((c) => c.init?.method === "POST");
  expect(JSON.parse(String(post?.init?.body))).toEqual({ name: "Failed NLP", page: "runs", query: "team=nlp&status=failed", team: "nlp" });
  const nav = await screen.findByRole("navigation", { name: "Saved views" });
  expect(within(nav).getByRole("link", { name: /Failed NLP/ })).toHaveAttribute("href", "/runs?team=nlp&status=failed");
});

test("a refusal names its field in the dialog and saves nothing", async () => {
  const views: SavedView[] = [];
  server(views, { status: 409, fields: { name: "you already have a view named 'x'" }, message: "name: you already have a view named 'x'" });
  renderAt("/finance?month=2026-11", <Page />, "/finance");
  await userEvent.click(screen.getByRole("button", { name: "Save view" }));
  const dialog = screen.getByRole("dialog", { name: "Save view" });
  await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));
  expect(await within(dialog).findByRole("alert")).toHaveTextContent("name: you already have a view named 'x'");
  expect(within(dialog).getByLabelText("Name")).toHaveClass("is-invalid");
  expect(views).toEqual([]);
});

test("the sidebar offers delete only where the reader may, and the view is gone after", async () => {
  const api = server([
    view({ id: 1, name: "Mine", url: "/finance?month=2026-11", page: "finance" }),
    view({ id: 2, name: "Bob's", team: "nlp", team_name: "NLP", owner: "bob", mine: false, can_delete: false }),
  ]);
  renderAt("/runs", <Page />, "/runs");
  const nav = await screen.findByRole("navigation", { name: "Saved views" });
  await within(nav).findByRole("link", { name: /Bob's/ });
  expect(within(nav).queryByRole("button", { name: "Delete saved view Bob's" })).toBeNull();
  await userEvent.click(within(nav).getByRole("button", { name: "Delete saved view Mine" }));
  await userEvent.click(within(screen.getByRole("alertdialog")).getByRole("button", { name: "Delete" }));
  await waitFor(() => expect(within(nav).queryByRole("link", { name: /Mine/ })).toBeNull());
  expect(api.calls.some((c) => c.init?.method === "DELETE" && c.url.endsWith("/views/1"))).toBe(true);
});

test("views are saved from the three filter pages only, named after their filters", () => {
  expect([savedViewPage("/runs"), savedViewPage("/leaderboards"), savedViewPage("/finance"), savedViewPage("/runs/abc")]).toEqual(["runs", "leaderboards", "finance", null]);
  expect(suggestedName("leaderboards", "?kind=projects&page=2")).toBe("Leaderboards: kind=projects");
  expect(suggestedName("finance", "")).toBe("Finance");
});

test("its owner renames and unshares a view; a view of someone else offers no edit", async () => {
  const views = [view({ id: 1, name: "Mine", team: "nlp", team_name: "NLP" }), view({ id: 2, name: "Bob's", owner: "bob", mine: false, can_delete: false })];
  const api = server(views);
  renderAt("/runs", <Page />, "/runs");
  const nav = await screen.findByRole("navigation", { name: "Saved views" });
  await within(nav).findByRole("link", { name: /Bob's/ });
  expect(within(nav).queryByRole("button", { name: "Rename or share saved view Bob's" })).toBeNull();
  await userEvent.click(within(nav).getByRole("button", { name: "Rename or share saved view Mine" }));
  const dialog = screen.getByRole("dialog", { name: "Rename or share view" });
  await waitFor(() => expect(within(dialog).getByLabelText("Share with")).toHaveValue("nlp"));
  await userEvent.clear(within(dialog).getByLabelText("Name"));
  await userEvent.type(within(dialog).getByLabelText("Name"), "Renamed");
  await userEvent.selectOptions(within(dialog).getByLabelText("Share with"), "");
  await userEvent.click(within(dialog).getByRole("button", { name: "Save" }));
  await within(nav).findByRole("link", { name: /Renamed/ });
  const patch = api.calls.find((c) => c.init?.method === "PATCH");
  expect(patch?.url).toMatch(/\/views\/1$/);
  expect(JSON.parse(String(patch?.init?.body))).toEqual({ name: "Renamed", team: null });
  expect(views[0].team).toBeNull();
});
