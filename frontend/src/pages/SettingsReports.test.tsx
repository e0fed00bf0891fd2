import { screen, waitFor, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import type { ReportDeliveryRow, ReportSubscription } from "../api/types";
import { ApiError } from "../api/client";
import { mockFetch } from "../test/fixtures";
import { renderAt } from "../test/render";
import { SettingsPage } from "./Settings";
import { reportBody, reportErrorText, scheduleText, targetText, type ReportForm } from "./SettingsReports";

const member = { username: "ann", is_finance: false, is_org_admin: false, teams: [{ slug: "nlp", name: "NLP", role: "member" }] };
const admin = { username: "ada", is_finance: false, is_org_admin: true, teams: [] };
const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });

function sub(over: Partial<ReportSubscription> = {}): ReportSubscription {
  return {
    id: 1, owner: "ann", kind: "digest_team", team: "nlp", project: null, saved_view: null, email_to: ["ann@example.com"], webhook_url: "",
    webhook_format: "generic", webhook_secret: null, cadence: "weekly", day_of_month: null, weekday: 0, hour: 0, minute: 30,
    timezone: "Europe/Berlin", enabled: true, next_due_at: "2026-12-06T23:30:00Z", last_delivery: { period_key: "2026-W48", status: "sent", sent_at: "2026-11-29T23:30:05Z" },
    created_at: "2026-11-20T10:00:00Z", ...over,
  }; // prettier-ignore
}

const delivery: ReportDeliveryRow = {
  id: 7, subscription: 1, kind: "digest_team", owner: "ann", period_key: "2026-W48", period_start: "2026-11-23", period_end: "2026-11-29",
  channel: "email", target: "ann@example.com", status: "sent", attempts: 1, status_code: null, error: "", totals: { cost_usd: 1234.5 },
  note: null, created_at: "2026-11-29T23:30:00Z", next_attempt_at: null, sent_at: "2026-11-29T23:30:05Z",
}; // prettier-ignore

function server(user: typeof member | typeof admin, post?: (body: Record<string, unknown>) => Response | undefined) {
  let subs = [sub()];
  const api = mockFetch({
    "/api/v1/portal/session": { authenticated: true, user, csrf_token: "tok" },
    "/api/v1/portal/teams": [{ slug: "nlp", name: "NLP", projects: [{ slug: "llm", name: "LLM" }] }],
    "/api/v1/portal/views": { views: [{ id: 3, name: "nlp runs", page: "runs" }] },
    "/api/v1/reports/subscriptions": (url: string, init?: RequestInit) => {
      const method = init?.method ?? "GET";
      const body = init?.body ? JSON.parse(String(init.body)) : {};
      if (method === "POST") {
        const answer = post?.(body);
        if (answer) return answer;
        const made = sub({ team: null, ...body, id: 2, last_delivery: null });
        subs = [...subs, made];
        return json(201, made);
      }
      if (method === "PATCH") {
        const id = Number(url.split("/").pop());
        subs = subs.map((s) => (s.id === id ? { ...s, ...body } : s));
        return subs.find((s) => s.id === id);
      }
      if (method === "DELETE") {
        const id = Number(url.split("/").pop());
        subs = subs.filter((s) => s.id !== id);
        return new Response(null, { status: 204 });
      }
      return { subscriptions: subs };
    },
    "/api/v1/reports/deliveries": { deliveries: [delivery] },
  });
  vi.stubGlobal("fetch", api.fn);
  const calls = (method: string, prefix: string) => api.calls.filter((c) => (c.init?.method ?? "GET") === method && c.url.startsWith(prefix));
  return { calls };
}

const renderReports = () => renderAt("/settings?tab=reports", <SettingsPage />, "/settings");

afterEach(() => vi.unstubAllGlobals());

describe("Settings → Reports", () => {
  it("lists subscriptions with their schedule and the delivery log with the report's cost", async () => {
    server(member);
    renderReports();
    const subs = await screen.findByTestId("report-subscriptions");
    expect(subs).toHaveTextContent("Team's weekly digest: nlp");
    expect(subs).toHaveTextContent("Mondays at 00:30 (Europe/Berlin)");
    expect(subs).toHaveTextContent("2026-W48: sent");
    const log = await screen.findByTestId("report-deliveries");
    const row = within(log).getAllByRole("row")[1];
    expect(row).toHaveTextContent("2026-W48");
    expect(row).toHaveTextContent("email");
    expect(row).toHaveTextContent("$1,23");
  });

  it("a member subscribes to a project's digest; the finance review and webhooks are not offered", async () => {
    let first = true;
    const api = server(member, (body) => {
      if (!first) return undefined;
      first = false;
      expect(body.timezone).toBe("Nowhere/Land");
      return json(400, { error: { code: "invalid", message: "timezone: 'Nowhere/Land' is not an IANA time zone", fields: { timezone: "'Nowhere/Land' is not an IANA time zone (like Europe/Berlin or UTC)" } } });
    });
    renderReports();
    await userEvent.click(await screen.findByRole("button", { name: "New subscription" }));
    const form = screen.getByTestId("report-form");
    const kinds = within(within(form).getByLabelText("Report")).getAllByRole("option").map((o) => o.textContent);
    expect(kinds).not.toContain("Finance review of the month");
    expect(within(form).queryByLabelText("Webhook URL")).toBeNull();
    await userEvent.selectOptions(within(form).getByLabelText("Report"), "digest_project");
    await userEvent.selectOptions(await within(form).findByLabelText("Project"), "llm");
    await userEvent.selectOptions(within(form).getByLabelText("Weekday"), "4");
    await userEvent.clear(within(form).getByLabelText("Time zone"));
    await userEvent.type(within(form).getByLabelText("Time zone"), "Nowhere/Land");
    await userEvent.click(within(form).getByRole("button", { name: "Subscribe" }));
    expect(await within(form).findByRole("alert")).toHaveTextContent("Time zone: 'Nowhere/Land' is not an IANA time zone");
    expect(within(form).getByLabelText("Time zone")).toHaveAttribute("aria-invalid", "true");
    await userEvent.clear(within(form).getByLabelText("Time zone"));
    await userEvent.type(within(form).getByLabelText("Time zone"), "Asia/Tokyo");
    await userEvent.click(within(form).getByRole("button", { name: "Subscribe" }));
    await waitFor(() => expect(screen.getByTestId("report-subscriptions")).toHaveTextContent("Project's weekly digest: llm"));
    const sent = api.calls("POST", "/api/v1/reports/subscriptions").map((c) => JSON.parse(String(c.init!.body)));
    expect(sent[1]).toEqual({ kind: "digest_project", project: "llm", cadence: "weekly", weekday: 4, hour: 8, minute: 0, timezone: "Asia/Tokyo", email_to: [] });
  });

  it("pauses and deletes a subscription", async () => {
    const api = server(admin);
    renderReports();
    await userEvent.click(await screen.findByRole("button", { name: "Pause subscription 1" }));
    await waitFor(() => expect(screen.getByTestId("report-subscriptions")).toHaveTextContent("paused"));
    expect(JSON.parse(String(api.calls("PATCH", "/api/v1/reports/subscriptions/1")[0].init!.body))).toEqual({ enabled: false });
    await userEvent.click(screen.getByRole("button", { name: "Delete subscription 1" }));
    expect(await screen.findByText("No subscriptions yet")).toBeInTheDocument();
  });
});

describe("reports helpers", () => {
  const form: ReportForm = {
    kind: "finance_month", team: "", project: "", savedView: "", cadence: "weekly", dayOfMonth: "3", weekday: "2", time: "07:45",
    timezone: " UTC ", emails: "a@example.com, b@example.com", webhookUrl: " https://hooks.example.com/r ", webhookFormat: "slack",
  }; // prettier-ignore

  it("the finance review is monthly whatever the form's cadence; the time splits into hour and minute", () => {
    expect(reportBody(form)).toEqual({
      kind: "finance_month", cadence: "monthly", day_of_month: 3, hour: 7, minute: 45, timezone: "UTC",
      email_to: ["a@example.com", "b@example.com"], webhook_url: "https://hooks.example.com/r", webhook_format: "slack",
    }); // prettier-ignore
    expect(reportBody({ ...form, kind: "saved_view", savedView: "3", webhookUrl: "" })).toMatchObject({ cadence: "weekly", weekday: 2, saved_view: 3 });
  });

  it("says schedules, targets and the API's field errors in words", () => {
    expect(scheduleText({ cadence: "monthly", day_of_month: 1, weekday: null, hour: 8, minute: 5, timezone: "UTC" })).toBe("on day 1 of each month at 08:05 (UTC)");
    expect(targetText({ kind: "saved_view", team: null, project: null, saved_view: { id: 3, name: "nlp runs", page: "runs" } })).toBe("Saved view: “nlp runs”");
    expect(reportErrorText(new ApiError(400, "invalid", "x", { "email_to[0]": "Enter a valid email address." }))).toBe("Email to: Enter a valid email address.");
  });
});
