// Settings → Reports: subscribe to the month's finance review, a team's or project's weekly digest,
// or a saved view, by email (and, for organization admins, a webhook); see the delivery log.

import { useState, type FormEvent } from "react";

import { ApiError, apiFetch } from "../api/client";
import { useApi } from "../api/hooks";
import { canCloseMonth, isAdmin, useSession } from "../api/session";
import type { ReportDeliveryRow, ReportKind, ReportSubscription } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Async, Empty } from "../components/States";
import { Card } from "../components/ui";
import { formatDateTime, formatUsd } from "../lib/format";

const REPORTS = "/api/v1/reports/";
const WEEKDAYS = ["Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays", "Saturdays", "Sundays"];
export const KIND_LABEL: Record<ReportKind, string> = {
  finance_month: "Finance review of the month",
  digest_team: "Team's weekly digest",
  digest_project: "Project's weekly digest",
  saved_view: "Saved view",
};

interface TeamListing {
  slug: string;
  name: string;
  projects: { slug: string; name: string }[];
}

interface ViewListing {
  id: number;
  name: string;
  page: string;
}

function two(n: number): string {
  return String(n).padStart(2, "0");
}

/** "Mondays at 00:30 (Europe/Berlin)", "on day 1 of each month at 08:00 (UTC)". */
export function scheduleText(s: Pick<ReportSubscription, "cadence" | "day_of_month" | "weekday" | "hour" | "minute" | "timezone">): string {
  const at = `at ${two(s.hour)}:${two(s.minute)} (${s.timezone})`;
  return s.cadence === "weekly" ? `${WEEKDAYS[s.weekday ?? 0]} ${at}` : `on day ${s.day_of_month} of each month ${at}`;
}

/** What a subscription reports on: "Team's weekly digest: nlp". */
export function targetText(s: Pick<ReportSubscription, "kind" | "team" | "project" | "saved_view">): string {
  const what = s.team ?? s.project ?? (s.saved_view ? `“${s.saved_view.name}”` : null);
  return what ? `${KIND_LABEL[s.kind]}: ${what}` : KIND_LABEL[s.kind];
}

export interface ReportForm {
  kind: ReportKind;
  team: string;
  project: string;
  savedView: string;
  cadence: "monthly" | "weekly";
  dayOfMonth: string;
  weekday: string;
  time: string; // "HH:MM"
  timezone: string;
  emails: string;
  webhookUrl: string;
  webhookFormat: "generic" | "slack";
}

/** The form as the API's body: a kind's own cadence, the time split, the addresses listed. */
export function reportBody(form: ReportForm): Record<string, unknown> {
  const cadence = form.kind === "finance_month" ? "monthly" : form.kind === "saved_view" ? form.cadence : "weekly";
  const [hour, minute] = form.time.split(":").map((x) => Number(x));
  const body: Record<string, unknown> = {
    kind: form.kind,
    cadence,
    hour: Number.isFinite(hour) ? hour : 8,
    minute: Number.isFinite(minute) ? minute : 0,
    timezone: form.timezone.trim(),
    email_to: form.emails
      .split(/[,\s]+/)
      .map((e) => e.trim())
      .filter(Boolean),
  };
  if (cadence === "monthly") body.day_of_month = Number(form.dayOfMonth);
  else body.weekday = Number(form.weekday);
  if (form.kind === "digest_team") body.team = form.team;
  if (form.kind === "digest_project") body.project = form.project;
  if (form.kind === "saved_view") body.saved_view = form.savedView ? Number(form.savedView) : null;
  if (form.webhookUrl.trim()) {
    body.webhook_url = form.webhookUrl.trim();
    body.webhook_format = form.webhookFormat;
  }
  return body;
}

function browserZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  } catch {
    return "UTC";
  }
}

const FIELD_LABEL: Record<string, string> = {
  kind: "Report",
  team: "Team",
  project: "Project",
  saved_view: "Saved view",
  cadence: "Every",
  day_of_month: "Day of the month",
  weekday: "Weekday",
  hour: "Time",
  minute: "Time",
  timezone: "Time zone",
  email_to: "Email to",
  webhook_url: "Webhook URL",
};

/** "timezone: 'Europe/Atlantis' is not…" → "Time zone: 'Europe/Atlantis' is not…". */
export function reportErrorText(error: ApiError): string {
  const fields = Object.entries(error.fields);
  if (!fields.length) return error.message;
  return fields.map(([f, m]) => `${FIELD_LABEL[f.replace(/\[\d+\]$/, "")] ?? f}: ${m}`).join(" ");
}

function SubscriptionForm({ onDone, onCancel }: { onDone: () => void; onCancel: () => void }) {
  const { user } = useSession();
  const admin = isAdmin(user);
  const teams = useApi<TeamListing[]>("teams");
  const views = useApi<{ views: ViewListing[] }>("views");
  const kinds = (Object.keys(KIND_LABEL) as ReportKind[]).filter((k) => k !== "finance_month" || canCloseMonth(user));
  const [form, setForm] = useState<ReportForm>({
    kind: kinds.includes("digest_team") ? "digest_team" : kinds[0],
    team: "",
    project: "",
    savedView: "",
    cadence: "weekly",
    dayOfMonth: "1",
    weekday: "0",
    time: "08:00",
    timezone: browserZone(),
    emails: "",
    webhookUrl: "",
    webhookFormat: "generic",
  });
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const set = (changes: Partial<ReportForm>) => setForm((f) => ({ ...f, ...changes }));
  const cadence = form.kind === "finance_month" ? "monthly" : form.kind === "saved_view" ? form.cadence : "weekly";
  const bad = (field: string) => (error?.fields[field] ? true : undefined);
  const projects = (teams.data ?? []).flatMap((t) => t.projects);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await apiFetch<ReportSubscription>(`${REPORTS}subscriptions`, { method: "POST", body: reportBody(form) });
      onDone();
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  return (
    <form className="settings-form" onSubmit={submit} aria-label="New report subscription" data-testid="report-form">
      <div className="form-grid">
        <label className="field" htmlFor="report-kind">
          <span id="report-kind-name">Report</span>
          <select id="report-kind" aria-labelledby="report-kind-name" className="select" value={form.kind} aria-invalid={bad("kind")} onChange={(e) => set({ kind: e.target.value as ReportKind })}>
            {kinds.map((k) => (
              <option key={k} value={k}>
                {KIND_LABEL[k]}
              </option>
            ))}
          </select>
        </label>
        {form.kind === "digest_team" && (
          <label className="field" htmlFor="report-team">
            <span id="report-team-name">Team</span>
            <select id="report-team" aria-labelledby="report-team-name" className="select" value={form.team} aria-invalid={bad("team")} onChange={(e) => set({ team: e.target.value })}>
              <option value="">choose…</option>
              {(teams.data ?? []).map((t) => (
                <option key={t.slug} value={t.slug}>
                  {t.name}
                </option>
              ))}
            </select>
          </label>
        )}
        {form.kind === "digest_project" && (
          <label className="field" htmlFor="report-project">
            <span id="report-project-name">Project</span>
            <select id="report-project" aria-labelledby="report-project-name" className="select" value={form.project} aria-invalid={bad("project")} onChange={(e) => set({ project: e.target.value })}>
              <option value="">choose…</option>
              {projects.map((p) => (
                <option key={p.slug} value={p.slug}>
                  {p.name}
                </option>
              ))}
            </select>
          </label>
        )}
        {form.kind === "saved_view" && (
          <>
            <label className="field" htmlFor="report-view">
              <span id="report-view-name">Saved view</span>
              <select id="report-view" aria-labelledby="report-view-name" className="select" value={form.savedView} aria-invalid={bad("saved_view")} onChange={(e) => set({ savedView: e.target.value })}>
                <option value="">choose…</option>
                {(views.data?.views ?? []).map((v) => (
                  <option key={v.id} value={String(v.id)}>
                    {v.name} ({v.page})
                  </option>
                ))}
              </select>
            </label>
            <label className="field" htmlFor="report-cadence">
              <span id="report-cadence-name">Every</span>
              <select id="report-cadence" aria-labelledby="report-cadence-name" className="select" value={form.cadence} onChange={(e) => set({ cadence: e.target.value as ReportForm["cadence"] })}>
                <option value="weekly">week</option>
                <option value="monthly">month</option>
              </select>
            </label>
          </>
        )}
        {cadence === "monthly" ? (
          <label className="field" htmlFor="report-day">
            <span id="report-day-name">Day of the month</span>
            <input id="report-day" aria-labelledby="report-day-name" className="input input-num" type="number" min={1} max={28} value={form.dayOfMonth} aria-invalid={bad("day_of_month")} onChange={(e) => set({ dayOfMonth: e.target.value })} />
          </label>
        ) : (
          <label className="field" htmlFor="report-weekday">
            <span id="report-weekday-name">Weekday</span>
            <select id="report-weekday" aria-labelledby="report-weekday-name" className="select" value={form.weekday} aria-invalid={bad("weekday")} onChange={(e) => set({ weekday: e.target.value })}>
              {WEEKDAYS.map((d, i) => (
                <option key={d} value={String(i)}>
                  {d.slice(0, -1)}
                </option>
              ))}
            </select>
          </label>
        )}
        <label className="field" htmlFor="report-time">
          <span id="report-time-name">Time</span>
          <input id="report-time" aria-labelledby="report-time-name" className="input" type="time" value={form.time} aria-invalid={bad("hour") ?? bad("minute")} onChange={(e) => set({ time: e.target.value })} />
        </label>
        <label className="field" htmlFor="report-timezone">
          <span id="report-timezone-name">Time zone</span>
          <input id="report-timezone" aria-labelledby="report-timezone-name" className="input" value={form.timezone} maxLength={64} placeholder="Europe/Berlin" aria-invalid={bad("timezone")} onChange={(e) => set({ timezone: e.target.value })} />
        </label>
        <label className="field" htmlFor="report-emails">
          <span id="report-emails-name">Email to</span>
          <input
            id="report-emails"
            className="input"
            value={form.emails}
            placeholder={admin ? "addresses, comma-separated (blank: yours)" : "blank: your own address"}
            aria-invalid={bad("email_to")}
            onChange={(e) => set({ emails: e.target.value })}
          />
        </label>
        {admin && (
          <>
            <label className="field" htmlFor="report-webhook">
              <span id="report-webhook-name">Webhook URL</span>
              <input id="report-webhook" aria-labelledby="report-webhook-name" className="input" value={form.webhookUrl} maxLength={2000} aria-invalid={bad("webhook_url")} onChange={(e) => set({ webhookUrl: e.target.value })} />
            </label>
            <label className="field" htmlFor="report-format">
              <span id="report-format-name">Webhook format</span>
              <select id="report-format" aria-labelledby="report-format-name" className="select" value={form.webhookFormat} onChange={(e) => set({ webhookFormat: e.target.value as ReportForm["webhookFormat"] })}>
                <option value="generic">generic JSON</option>
                <option value="slack">Slack</option>
              </select>
            </label>
          </>
        )}
      </div>
      <p className="muted small">
        A weekly digest covers the week (Monday to Sunday) before the day it is sent; the finance review, the month before. Figures are the ones you may see, with the CSV the page exports attached.
      </p>
      {error && (
        <div className="form-error" role="alert">
          {reportErrorText(error)}
        </div>
      )}
      <div className="form-actions">
        <button className="btn btn-primary" type="submit" disabled={busy}>
          {busy ? "Saving…" : "Subscribe"}
        </button>
        <button className="btn btn-ghost" type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function SubscriptionsCard({ nonce, onChanged }: { nonce: number; onChanged: () => void }) {
  const state = useApi<{ subscriptions: ReportSubscription[] }>(`${REPORTS}subscriptions?n=${nonce}`);
  const [adding, setAdding] = useState(false);
  const [error, setError] = useState<string | null>(null);

  async function act(sub: ReportSubscription, what: "pause" | "resume" | "delete") {
    setError(null);
    try {
      if (what === "delete") await apiFetch(`${REPORTS}subscriptions/${sub.id}`, { method: "DELETE" });
      else await apiFetch(`${REPORTS}subscriptions/${sub.id}`, { method: "PATCH", body: { enabled: what === "resume" } });
      onChanged();
    } catch (err) {
      setError(err instanceof ApiError ? reportErrorText(err) : String(err));
    }
  }

  return (
    <Card
      title="Report subscriptions"
      actions={
        !adding && (
          <button className="btn btn-primary btn-small" type="button" onClick={() => setAdding(true)}>
            New subscription
          </button>
        )
      }
    >
      {adding && (
        <SubscriptionForm
          onCancel={() => setAdding(false)}
          onDone={() => {
            setAdding(false);
            onChanged();
          }}
        />
      )}
      {error && (
        <div className="form-error" role="alert">
          {error}
        </div>
      )}
      <Async state={state} isEmpty={(d) => d.subscriptions.length === 0} empty={<Empty title="No subscriptions yet" />}>
        {(d) => (
          <DataTable
            caption="Report subscriptions"
            testId="report-subscriptions"
            dense
            rows={d.subscriptions}
            rowKey={(s) => String(s.id)}
            columns={[
              { key: "what", header: "Report", render: (s) => targetText(s) },
              { key: "when", header: "Sent", render: (s) => scheduleText(s) },
              { key: "to", header: "To", priority: "low", render: (s) => [...s.email_to, ...(s.webhook_url ? [`webhook (${s.webhook_format})`] : [])].join(", ") },
              { key: "owner", header: "Owner", priority: "low", render: (s) => s.owner },
              { key: "next", header: "Next", render: (s) => (s.enabled && s.next_due_at ? formatDateTime(s.next_due_at) : <span className="muted">paused</span>) },
              {
                key: "last",
                header: "Last",
                render: (s) => (s.last_delivery ? `${s.last_delivery.period_key}: ${s.last_delivery.status}` : <span className="muted">–</span>),
              },
              {
                key: "actions",
                header: "",
                render: (s) => (
                  <span className="nowrap">
                    <button className="btn btn-small btn-ghost" type="button" aria-label={`${s.enabled ? "Pause" : "Resume"} subscription ${s.id}`} onClick={() => void act(s, s.enabled ? "pause" : "resume")}>
                      {s.enabled ? "Pause" : "Resume"}
                    </button>
                    <button className="btn btn-small btn-ghost" type="button" aria-label={`Delete subscription ${s.id}`} onClick={() => void act(s, "delete")}>
                      Delete
                    </button>
                  </span>
                ),
              },
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

function DeliveriesCard({ nonce }: { nonce: number }) {
  const state = useApi<{ deliveries: ReportDeliveryRow[] }>(`${REPORTS}deliveries?limit=100&n=${nonce}`);
  return (
    <Card title="Report delivery log" actions={<span className="muted small">each period's email and webhook, newest first</span>}>
      <Async state={state} isEmpty={(d) => d.deliveries.length === 0} empty={<Empty title="Nothing sent yet" />}>
        {(d) => (
          <DataTable
            caption="Report delivery log"
            testId="report-deliveries"
            dense
            rows={d.deliveries}
            rowKey={(x) => String(x.id)}
            columns={[
              { key: "period", header: "Period", render: (x) => x.period_key },
              { key: "report", header: "Report", render: (x) => KIND_LABEL[x.kind] },
              { key: "channel", header: "Channel", render: (x) => x.channel },
              { key: "to", header: "To", priority: "low", render: (x) => (x.target === null ? <span className="muted">hidden</span> : <span className="break-all">{x.target}</span>) },
              { key: "status", header: "Status", render: (x) => <span className={`badge${x.status === "failed" ? " badge-warn" : ""}`}>{x.status}</span> },
              { key: "attempts", header: "Attempts", align: "right", render: (x) => x.attempts },
              { key: "cost", header: "Cost", align: "right", render: (x) => (typeof x.totals.cost_usd === "number" ? formatUsd(x.totals.cost_usd) : "–") },
              { key: "note", header: "Note", priority: "low", render: (x) => x.note || x.error || <span className="muted">–</span> },
              { key: "sent", header: "Sent", render: (x) => (x.sent_at ? formatDateTime(x.sent_at) : <span className="muted">–</span>) },
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

export function ReportsSettings() {
  const [nonce, setNonce] = useState(0);
  return (
    <>
      <SubscriptionsCard nonce={nonce} onChanged={() => setNonce((n) => n + 1)} />
      <DeliveriesCard nonce={nonce} />
    </>
  );
}
