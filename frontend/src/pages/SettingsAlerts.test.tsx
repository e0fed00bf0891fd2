import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { AlertDeliveryRow, AlertRule, AlertRuleList, AlertStateRow } from "../api/types";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";
import { alertFieldName, fieldMessage, ruleBody, ruleFormErrors, ruleSummary, type FormState } from "./SettingsAlerts";

const adminUser = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

const KINDS: AlertRuleList["kinds"] = {
  waste_rate: [
    { name: "usd_per_hour", lo: 0, hi: 1e9, choices: [], help: "" },
    { name: "share", lo: 0, hi: 1, choices: [], help: "" },
  ],
  efficiency_drop: [
    { name: "metric", lo: 0, hi: 0, choices: ["mfu", "tokens_per_s"], help: "" },
    { name: "drop_pct", lo: 0, hi: 100, choices: [], help: "" },
  ],
  straggler: [{ name: "usd_per_hour", lo: 0, hi: 1e9, choices: [], help: "" }],
  silent_run: [],
  idle_gpu: [],
  forecast_over_budget: [{ name: "over_pct", lo: 0, hi: 1000, choices: [], help: "" }],
};

function rule(over: Partial<AlertRule> = {}): AlertRule {
  return {
    id: 1, name: "loader stall", kind: "waste_rate", scope: "project", team: "nlp", project: "llm", params: { share: 0.5 },
    for_s: 300, window_s: 120, webhook_url: "https://hooks.example.com/a", webhook_format: "slack", webhook_secret: "whsec_abc",
    email_to: ["oncall@example.com"], enabled: true, muted: false, snoozed_until: null, firing: 1, writable: true,
    created_at: "2026-11-30T10:00:00Z", updated_at: "2026-11-30T10:00:00Z", ...over,
  }; // prettier-ignore
}

const alertRow: AlertStateRow = {
  id: 9, rule: 1, rule_name: "loader stall", subject: "run:r1", subject_label: "pretrain-a (llm)", run_id: "r1", url: "https://x/runs/r1",
  state: "firing", value: 0.82, figure: "waste_share", threshold: 0.5, usd_per_hour: 29.7, evidence: {}, pending_since: "2026-11-30T10:00:00Z",
  fired_at: "2026-11-30T10:05:00Z", resolved_at: null, notified: true, muted: false, snoozed_until: null, evaluated_at: null, writable: true,
}; // prettier-ignore

const delivery: AlertDeliveryRow = {
  id: 4, rule: 1, rule_name: "loader stall", alert: 9, subject_label: "pretrain-a (llm)", event: "firing", channel: "webhook",
  target: "https://hooks.example.com/a", status: "pending", attempts: 2, status_code: 503, error: "HTTP 503 Service Unavailable",
  next_attempt_at: "2026-11-30T10:06:30Z", created_at: "2026-11-30T10:05:00Z", sent_at: null,
}; // prettier-ignore

function alertsServer(post?: (body: Record<string, unknown>) => Response | undefined) {
  let rules = [rule()];
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user: adminUser, csrf_token: "tok" },
    "/api/v1/alerts/rules": (url: string, init?: RequestInit) => {
      const method = init?.method ?? "GET";
      const body = init?.body ? JSON.parse(String(init.body)) : {};
      if (url.endsWith("/test")) return { deliveries: [{ ...delivery, event: "test", status: "sent", status_code: 200, attempts: 1, error: "" }] };
      if (method === "POST") {
        const answer = post?.(body);
        if (answer) return answer;
        const made = rule({ ...body, id: 2, firing: 0 });
        rules = [...rules, made];
        return json(201, made);
      }
      if (method === "PATCH") {
        const id = Number(url.split("/").pop());
        rules = rules.map((r) => (r.id === id ? { ...r, ...body } : r));
        return rules.find((r) => r.id === id);
      }
      return { rules, kinds: KINDS };
    },
    "/api/v1/alerts/alerts": (_url: string, init?: RequestInit) => (init?.method === "PATCH" ? { ...alertRow, ...JSON.parse(String(init.body)) } : { alerts: [alertRow] }),
    "/api/v1/alerts/deliveries": { deliveries: [delivery] },
  });
  vi.stubGlobal("fetch", api.fn);
  const calls = (method: string, prefix: string) => api.calls.filter((c) => (c.init?.method ?? "GET") === method && c.url.startsWith(prefix));
  return { calls };
}

function renderAlerts() {
  return renderAt("/settings?tab=alerts", <SettingsPage />, "/settings");
}

afterEach(() => vi.unstubAllGlobals());

describe("Settings → Alerts", () => {
  it("lists rules, alerts and the delivery log with attempts, status code and next retry", async () => {
    alertsServer();
    renderAlerts();
    const rules = await screen.findByTestId("alert-rules");
    expect(rules).toHaveTextContent("loader stall");
    expect(rules).toHaveTextContent("waste share > 50% for 5 min");
    expect(rules).toHaveTextContent("webhook (slack), oncall@example.com");
    expect(rules).toHaveTextContent("1 firing");
    const states = await screen.findByTestId("alert-states");
    expect(states).toHaveTextContent("pretrain-a (llm)");
    expect(states).toHaveTextContent("82.0% waste");
    expect(states).toHaveTextContent("$29.70/h");
    expect(within(states).getByRole("link", { name: "pretrain-a (llm)" })).toHaveAttribute("href", "/runs/r1");
    const log = await screen.findByTestId("alert-deliveries");
    const row = within(log).getAllByRole("row")[1];
    expect(row).toHaveTextContent("webhook");
    expect(row).toHaveTextContent("pending");
    expect(row).toHaveTextContent("503");
    expect(row).toHaveTextContent("HTTP 503 Service Unavailable");
  });

  it("creates a rule: minutes become seconds, and the API's error names the field", async () => {
    let first = true;
    const server = alertsServer(() => {
      if (!first) return undefined;
      first = false;
      return json(400, { error: { code: "invalid", message: "params.share: must be above 0 and at most 1", fields: { "params.share": "must be above 0 and at most 1" } } });
    });
    renderAlerts();
    await userEvent.click(await screen.findByRole("button", { name: "New rule" }));
    const form = screen.getByTestId("alert-rule-form");
    await userEvent.type(within(form).getByLabelText("Name"), "stall");
    await userEvent.type(within(form).getByLabelText("Waste share above (0–1)"), "1.5");
    await userEvent.clear(within(form).getByLabelText("For (minutes)"));
    await userEvent.type(within(form).getByLabelText("For (minutes)"), "0.5");
    await userEvent.type(within(form).getByLabelText("Webhook URL"), "https://hooks.example.com/b");
    await userEvent.click(within(form).getByRole("button", { name: "Create rule" }));
    expect(await within(form).findByRole("alert")).toHaveTextContent("Check: Waste share above (0–1).");
    expect(within(form).getByTestId("field-error-params.share")).toHaveTextContent("Must be above 0 and at most 1");
    expect(within(form).getByLabelText("Waste share above (0–1)")).toHaveAttribute("aria-invalid", "true");
    expect(within(form).getByLabelText("Waste share above (0–1)")).toHaveAccessibleDescription("Must be above 0 and at most 1");
    const [sent] = server.calls("POST", "/api/v1/alerts/rules");
    expect(JSON.parse(String(sent.init!.body))).toMatchObject({ name: "stall", kind: "waste_rate", scope: "org", params: { share: 1.5 }, for_s: 30, window_s: 300, webhook_url: "https://hooks.example.com/b" });

    await userEvent.clear(within(form).getByLabelText("Waste share above (0–1)"));
    await userEvent.type(within(form).getByLabelText("Waste share above (0–1)"), "0.6");
    await userEvent.click(within(form).getByRole("button", { name: "Create rule" }));
    expect(await screen.findByTestId("alert-notice")).toHaveTextContent("Saved stall.");
    await waitFor(() => expect(screen.getByTestId("alert-rules")).toHaveTextContent("waste share > 60% for 0.5 min"));
  });

  it("sends a test, mutes and snoozes a rule, and snoozes one alert", async () => {
    const server = alertsServer();
    renderAlerts();
    await userEvent.click(await screen.findByRole("button", { name: "Send a test of loader stall" }));
    expect(await screen.findByTestId("alert-notice")).toHaveTextContent("webhook to https://hooks.example.com/a: sent (HTTP 200)");
    await userEvent.click(screen.getByRole("button", { name: "Mute loader stall" }));
    await waitFor(() => expect(server.calls("PATCH", "/api/v1/alerts/rules/1")).toHaveLength(1));
    expect(JSON.parse(String(server.calls("PATCH", "/api/v1/alerts/rules/1")[0].init!.body))).toEqual({ muted: true });
    await screen.findByRole("button", { name: "Unmute loader stall" });
    await userEvent.click(screen.getByRole("button", { name: "Snooze for an hour loader stall" }));
    await waitFor(() => expect(server.calls("PATCH", "/api/v1/alerts/rules/1")).toHaveLength(2));
    const until = Date.parse(JSON.parse(String(server.calls("PATCH", "/api/v1/alerts/rules/1")[1].init!.body)).snoozed_until);
    expect(Math.abs(until - Date.now() - 3600_000)).toBeLessThan(60_000);
    await userEvent.click(await screen.findByRole("button", { name: "Snooze for an hour pretrain-a (llm)" }));
    await waitFor(() => expect(server.calls("PATCH", "/api/v1/alerts/alerts/9")).toHaveLength(1));
  });
});

describe("Settings → Alerts for people who may not write rules", () => {
  it("offers no new rule and no buttons on rules it may not change", async () => {
    const member = { username: "mia", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "member" }] };
    const api = mockFetch({
      "/api/v1/portal/session": { authenticated: true, user: member, csrf_token: "tok" },
      "/api/v1/alerts/rules": { rules: [rule({ writable: false, webhook_secret: null, webhook_url: null, email_to: null })], kinds: KINDS },
      "/api/v1/alerts/alerts": { alerts: [{ ...alertRow, writable: false }] },
      "/api/v1/alerts/deliveries": { deliveries: [] },
    });
    vi.stubGlobal("fetch", api.fn);
    renderAlerts();
    expect(await screen.findByTestId("alert-rules")).toHaveTextContent("loader stall");
    expect(screen.queryByRole("button", { name: "New rule" })).not.toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Edit loader stall" })).not.toBeInTheDocument();
    expect(await screen.findByTestId("alert-states")).toHaveTextContent("pretrain-a (llm)");
    expect(screen.queryByRole("button", { name: /Mute pretrain-a/ })).not.toBeInTheDocument();
    expect(await screen.findByText("Nothing sent yet")).toBeInTheDocument();
  });

  it("shows the rules and the log when the API hides where they send", async () => {
    const member = { username: "mia", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "nlp", role: "member" }] };
    const hidden = rule({ writable: false, webhook_secret: null, webhook_url: null, email_to: null });
    const api = mockFetch({
      "/api/v1/portal/session": { authenticated: true, user: member, csrf_token: "tok" },
      "/api/v1/alerts/rules": { rules: [hidden], kinds: KINDS },
      "/api/v1/alerts/alerts": { alerts: [] },
      "/api/v1/alerts/deliveries": { deliveries: [{ ...delivery, target: null }] },
    });
    vi.stubGlobal("fetch", api.fn);
    renderAlerts();
    const rules = await screen.findByTestId("alert-rules");
    expect(rules).toHaveTextContent("loader stall");
    expect(rules).toHaveTextContent("hidden");
    expect(rules).not.toHaveTextContent("nowhere");
    const log = await screen.findByTestId("alert-deliveries");
    expect(log).toHaveTextContent("hidden");
    expect(log).not.toHaveTextContent("hooks.example.com");
  });
});

describe("alert rule helpers", () => {
  it("says each kind of rule in words", () => {
    expect(ruleSummary({ kind: "waste_rate", params: { usd_per_hour: 25, share: 0.5 }, for_s: 120 })).toBe("waste > $25.00/h or waste share > 50% for 2 min");
    expect(ruleSummary({ kind: "efficiency_drop", params: { metric: "tokens_per_s", drop_pct: 20 }, for_s: 60 })).toBe("tokens/s > 20% below baseline for 1 min");
    expect(ruleSummary({ kind: "silent_run", params: {}, for_s: 600 })).toBe("no telemetry for 10 min while running");
    expect(ruleSummary({ kind: "forecast_over_budget", params: { over_pct: 10 }, for_s: 300 })).toBe("month-end forecast > budget by 10% for 5 min");
    expect(ruleSummary({ kind: "forecast_over_budget", params: {}, for_s: 300 })).toBe("month-end forecast > budget for 5 min");
  });

  it("names the API's fields as the form labels them", () => {
    expect(alertFieldName("params.drop_pct")).toBe("% below baseline");
    expect(alertFieldName("for_s")).toBe("For (minutes)");
    expect(alertFieldName("email_to[0]")).toBe("Email to");
  });

  it("never sends destinations the API hid, so saving cannot clear them", () => {
    const form = { name: "x", kind: "silent_run" as const, scope: "org" as const, team: "", project: "", params: {}, forMin: "10", windowMin: "5", webhookUrl: "", webhookFormat: "generic" as const, emails: "", enabled: true, rotate: false, destinationsHidden: true };
    const body = ruleBody(form, KINDS.silent_run);
    expect(body).not.toHaveProperty("webhook_url");
    expect(body).not.toHaveProperty("email_to");
    expect(ruleBody({ ...form, destinationsHidden: false }, KINDS.silent_run)).toMatchObject({ webhook_url: "", email_to: [] });
  });

  it("leaves text that is no number for the API to judge", () => {
    const body = ruleBody({ name: "x", kind: "straggler", scope: "team", team: "nlp", project: "", params: { usd_per_hour: "lots" }, forMin: "soon", windowMin: "5", webhookUrl: "", webhookFormat: "generic", emails: "a@x.com, b@x.com", enabled: true, rotate: false }, KINDS.straggler);
    expect(body).toMatchObject({ params: { usd_per_hour: "lots" }, for_s: "soon", window_s: 300, team: "nlp", project: null, email_to: ["a@x.com", "b@x.com"] });
  });
});

describe("alert rule form errors", () => {
  const form: FormState = {
    name: "", kind: "waste_rate", scope: "project", team: "", project: "", params: { share: "x" }, forMin: "0", windowMin: "5",
    webhookUrl: "", webhookFormat: "generic", emails: "", enabled: true, rotate: false,
  }; // prettier-ignore

  it("finds every problem at once, each by its field, in words", () => {
    expect(ruleFormErrors(form, KINDS.waste_rate, 20)).toEqual({
      name: "Required: give the rule a name.",
      "params.share": "Enter a number.",
      for_s: "At least 0.333 min (20 s): rules are checked every 20 s, so a shorter condition is never seen to hold.",
      project: "Required for a rule that applies to one project.",
    });
    expect(ruleFormErrors({ ...form, name: "n", params: { share: "0.5" }, forMin: "1", project: "llm" }, KINDS.waste_rate, 60)).toEqual({});
    expect(ruleFormErrors({ ...form, name: "n", params: {}, forMin: "0.5", project: "llm" }, KINDS.waste_rate, 60).for_s).toMatch(/^At least 1 min:/);
  });

  it("turns the API's messages into words", () => {
    expect(fieldMessage("This field may not be blank.")).toBe("Required.");
    expect(fieldMessage("A valid number is required.")).toBe("Enter a number.");
    expect(fieldMessage("Ensure this value is greater than or equal to 0.")).toBe("Must be at least 0.");
    expect(fieldMessage("must be at least one evaluation interval (20 s): rules are checked every 20 s")).toBe("Must be at least one evaluation interval (20 s): rules are checked every 20 s");
  });

  it("shows each error beside its field and sends nothing for 'for 0 min' or a blank name", async () => {
    const server = alertsServer();
    renderAlerts();
    await userEvent.click(await screen.findByRole("button", { name: "New rule" }));
    const f = screen.getByTestId("alert-rule-form");
    await userEvent.clear(within(f).getByLabelText("For (minutes)"));
    await userEvent.type(within(f).getByLabelText("For (minutes)"), "0");
    await userEvent.click(within(f).getByRole("button", { name: "Create rule" }));
    expect(await within(f).findByRole("alert")).toHaveTextContent("Check these 2 fields: Name, For (minutes).");
    expect(within(f).getByLabelText("Name")).toHaveAccessibleDescription("Required: give the rule a name.");
    expect(within(f).getByLabelText("For (minutes)")).toHaveAccessibleDescription(/^At least 0.333 min \(20 s\)/);
    expect(f).not.toHaveTextContent("This field may not be blank");
    expect(server.calls("POST", "/api/v1/alerts/rules")).toHaveLength(0);
  });
});
