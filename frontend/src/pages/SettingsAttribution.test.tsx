import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";
import { ruleErrorWords, ruleFieldName, type AttributionRule } from "./SettingsAttribution";

const adminUser = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

const RULES: AttributionRule[] = [1, 2, 3, 4, 5].map((n) => ({ match: "k8s_namespace", key: "", pattern: `ns-${n}`, team: "nlp", project: null }));

const PREVIEW = {
  day: "2026-11-30",
  holders: [{ holder: "k8s:ns-1/pod-a", gpu_hours: 2, usd: 8, before_team: null, before_project: null, team: "nlp", project: null, rule: 0 }],
  totals: [{ team: "nlp", project: null, gpu_hours: 2, usd: 8 }],
};

function serve() {
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: adminUser, csrf_token: "tok" },
    "/api/v1/fleet/rules/preview": (_url: string, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body ?? "{}"));
      if (body.rules?.[4]?.team === "nope") {
        return json(400, { error: { code: "invalid", message: "rules[4].team: no team 'nope'", fields: { "rules[4].team": "no team 'nope'" } } });
      }
      return PREVIEW;
    },
    "/api/v1/fleet/rules": { rules: RULES, job: null },
  });
  vi.stubGlobal("fetch", api.fn);
  return api;
}

function renderAttribution() {
  return renderAt("/settings?tab=attribution", <SettingsPage />, "/settings");
}

afterEach(() => vi.unstubAllGlobals());

describe("Settings → Attribution", () => {
  it("names a refused field by the rule's number as the page shows it", () => {
    expect(ruleFieldName("rules[4].team")).toBe("Rule 5: team");
    expect(ruleFieldName("rules[0].key")).toBe("Rule 1: label name");
    expect(ruleFieldName("rules[2]")).toBe("Rule 3");
    expect(ruleFieldName("rules")).toBe("Rules");
    expect(ruleErrorWords("rules[4].team: no team 'nope'")).toBe("Rule 5: team: no team 'nope'");
    expect(ruleErrorWords("a k8s_label rule names its label")).toBe("a Kubernetes pod label rule names its label");
  });

  it("says 'Rule 5: team' for the fifth rule's team and marks that field", async () => {
    serve();
    renderAttribution();
    const team = await screen.findByLabelText("Rule 5 team");
    await userEvent.clear(team);
    await userEvent.type(team, "nope");
    await userEvent.click(screen.getByTestId("rules-preview"));
    const errors = await screen.findByTestId("rules-errors");
    expect(errors).toHaveTextContent("Rule 5: team: no team 'nope'");
    expect(errors).not.toHaveTextContent("rules[4]");
    expect(screen.getByLabelText("Rule 5 team")).toHaveAttribute("aria-invalid", "true");
    expect(screen.getByLabelText("Rule 4 team")).not.toHaveAttribute("aria-invalid");
  });

  it("clears a preview as soon as the rules are edited, so it never shows rules that are gone", async () => {
    serve();
    renderAttribution();
    await screen.findByLabelText("Rule 1 pattern");
    await userEvent.click(screen.getByTestId("rules-preview"));
    expect(await screen.findByTestId("rules-preview-result")).toBeInTheDocument();
    await userEvent.type(screen.getByLabelText("Rule 1 pattern"), "x");
    await waitFor(() => expect(screen.queryByTestId("rules-preview-result")).not.toBeInTheDocument());
    await userEvent.click(screen.getByTestId("rules-preview"));
    expect(await screen.findByTestId("rules-preview-result")).toBeInTheDocument();
    await userEvent.click(within(screen.getByTestId("rule-4")).getByRole("button", { name: "Remove rule 5" }));
    expect(screen.queryByTestId("rules-preview-result")).not.toBeInTheDocument();
  });
});
