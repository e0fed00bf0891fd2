// Settings → Alerts: rules (create, edit, delete, test-send, mute, snooze), the alerts they raised
// (mute or snooze one subject), and the delivery log. Everything comes from /api/v1/alerts/.
import { useState, type FormEvent } from "react";
import { Link } from "react-router";

import { ApiError, apiFetch } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { AlertDeliveryRow, AlertParamSpec, AlertRule, AlertRuleKind, AlertRuleList, AlertStateRow } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card } from "../components/ui";
import { formatDateTime, formatDuration, formatShare, formatUsd, formatUsdRate } from "../lib/format";

const ALERTS = "/api/v1/alerts/";

export const KIND_LABEL: Record<AlertRuleKind, string> = {
  waste_rate: "Waste rate of a live run",
  efficiency_drop: "MFU or tokens/s below the project's baseline",
  straggler: "Straggler rank costing the others",
  silent_run: "Run silent while still billed",
  idle_gpu: "GPU idle-held",
  forecast_over_budget: "Budget's month-end forecast over it",
};

const PARAM_LABEL: Record<string, string> = {
  usd_per_hour: "$ per hour above",
  share: "Waste share above (0–1)",
  metric: "Figure",
  drop_pct: "% below baseline",
  over_pct: "% over the budget",
};

/** The API's field names (params.share, for_s) as the form labels them. */
export function alertFieldName(field: string): string {
  const param = /^params\.(.+)$/.exec(field);
  if (param) return PARAM_LABEL[param[1]] ?? param[1].replace(/_/g, " ");
  const names: Record<string, string> = {
    name: "Name",
    kind: "When",
    scope: "Applies to",
    team: "Team slug",
    project: "Project slug",
    for_s: "For (minutes)",
    window_s: "Window (minutes)",
    webhook_url: "Webhook URL",
    webhook_format: "Payload",
    email_to: "Email to",
    snoozed_until: "Snoozed until",
  };
  if (field.startsWith("email_to")) return names.email_to;
  return names[field] ?? field.replace(/_/g, " ");
}

function minutes(seconds: number): string {
  return String(Math.round((seconds / 60) * 1000) / 1000);
}

/** "waste share > 0.5 for 5 min", as the rules table says a rule. */
export function ruleSummary(rule: Pick<AlertRule, "kind" | "params" | "for_s">): string {
  const p = rule.params;
  const forText = `for ${minutes(rule.for_s)} min`;
  switch (rule.kind) {
    case "waste_rate": {
      const parts = [];
      if (p.usd_per_hour !== undefined) parts.push(`waste > ${formatUsd(Number(p.usd_per_hour))}/h`);
      if (p.share !== undefined) parts.push(`waste share > ${Math.round(Number(p.share) * 1000) / 10}%`);
      return `${parts.join(" or ")} ${forText}`;
    }
    case "efficiency_drop":
      return `${p.metric === "tokens_per_s" ? "tokens/s" : "MFU"} > ${p.drop_pct}% below baseline ${forText}`;
    case "straggler":
      return `a rank costs others > ${formatUsd(Number(p.usd_per_hour))}/h`;
    case "silent_run":
      return `no telemetry ${forText} while running`;
    case "idle_gpu":
      return `idle-held ${forText}`;
    case "forecast_over_budget":
      return `month-end forecast > budget${p.over_pct ? ` by ${p.over_pct}%` : ""} ${forText}`;
  }
}

export interface FormState {
  name: string;
  kind: AlertRuleKind;
  scope: "org" | "team" | "project";
  team: string;
  project: string;
  params: Record<string, string>;
  forMin: string;
  windowMin: string;
  webhookUrl: string;
  webhookFormat: "generic" | "slack";
  emails: string;
  enabled: boolean;
  rotate: boolean;
  /** The API hides a rule's webhook URL and addresses from those who may not change it (null):
   * the form then neither shows nor sends them, so saving never clears them. */
  destinationsHidden?: boolean;
}

const EMPTY: FormState = {
  name: "",
  kind: "waste_rate",
  scope: "org",
  team: "",
  project: "",
  params: {},
  forMin: "5",
  windowMin: "5",
  webhookUrl: "",
  webhookFormat: "generic",
  emails: "",
  enabled: true,
  rotate: false,
};

function formOf(rule: AlertRule): FormState {
  return {
    name: rule.name,
    kind: rule.kind,
    scope: rule.scope,
    team: rule.team ?? "",
    project: rule.project ?? "",
    params: Object.fromEntries(Object.entries(rule.params).map(([k, v]) => [k, String(v)])),
    forMin: minutes(rule.for_s),
    windowMin: minutes(rule.window_s),
    webhookUrl: rule.webhook_url ?? "",
    webhookFormat: rule.webhook_format,
    emails: (rule.email_to ?? []).join(", "),
    enabled: rule.enabled,
    rotate: false,
    destinationsHidden: rule.webhook_url === null || rule.email_to === null,
  };
}

/** The request body: minutes become seconds; blank thresholds are left out; numbers stay numbers
 * when they parse (so the API, not the form, judges their bounds and names the field). */
export function ruleBody(form: FormState, specs: AlertParamSpec[]): Record<string, unknown> {
  const params: Record<string, unknown> = {};
  for (const spec of specs) {
    const raw = (form.params[spec.name] ?? "").trim();
    if (raw === "") continue;
    params[spec.name] = spec.choices.length ? raw : Number.isFinite(Number(raw)) ? Number(raw) : raw;
  }
  const seconds = (text: string) => (text.trim() !== "" && Number.isFinite(Number(text)) ? Number(text) * 60 : text);
  return {
    name: form.name,
    kind: form.kind,
    scope: form.scope,
    team: form.scope === "team" ? form.team : null,
    project: form.scope === "project" ? form.project : null,
    params,
    for_s: seconds(form.forMin),
    window_s: seconds(form.windowMin),
    ...(form.destinationsHidden
      ? {}
      : {
          webhook_url: form.webhookUrl.trim(),
          webhook_format: form.webhookFormat,
          email_to: form.emails
            .split(/[,\s]+/)
            .map((s) => s.trim())
            .filter(Boolean),
        }),
    enabled: form.enabled,
    ...(form.rotate ? { rotate_secret: true } : {}),
  };
}

/** How often the rules are evaluated when the server does not say (its default). */
const DEFAULT_INTERVAL_S = 20;

// The API's validation messages in the form's words (the field is named by where it is shown).
const MESSAGE_WORDS: [RegExp, string][] = [
  [/^This field may not be blank\.?$/, "Required."],
  [/^This field is required\.?$/, "Required."],
  [/^This field may not be null\.?$/, "Required."],
  [/^A valid number is required\.?$/, "Enter a number."],
  [/^Enter a valid email address\.?$/, "Not an email address."],
  [/^Ensure this value is greater than or equal to (.+)\.$/, "Must be at least $1."],
  [/^Ensure this value is less than or equal to (.+)\.$/, "Must be at most $1."],
  [/^Ensure this field has no more than (\d+) characters\.$/, "At most $1 characters."],
  [/^"(.*)" is not a valid choice\.$/, "“$1” is not one of the choices."],
];

/** An error message for one field, in words: "This field may not be blank." → "Required.". */
export function fieldMessage(message: string): string {
  for (const [re, words] of MESSAGE_WORDS) if (re.test(message)) return message.replace(re, words);
  const text = message.replace(/_/g, " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** The form's field an API field belongs to ("email_to[2]" → "email_to"). */
function formField(field: string): string {
  return field.replace(/\[\d+\]$/, "");
}

function minutesText(seconds: number): string {
  return seconds % 60 === 0 ? `${seconds / 60} min` : `${minutes(seconds)} min (${seconds} s)`;
}

/**
 * Every problem the form can see before sending, by API field, all at once: a name, numbers where
 * numbers go, a duration of at least one evaluation interval (a condition held for less is never
 * seen), a team or project for a scoped rule. The server checks the same and names the field.
 */
export function ruleFormErrors(form: FormState, specs: AlertParamSpec[], intervalS = DEFAULT_INTERVAL_S): Record<string, string> {
  const out: Record<string, string> = {};
  if (form.name.trim() === "") out.name = "Required: give the rule a name.";
  for (const spec of specs) {
    const raw = (form.params[spec.name] ?? "").trim();
    if (raw !== "" && !spec.choices.length && !Number.isFinite(Number(raw))) out[`params.${spec.name}`] = "Enter a number.";
  }
  const forMin = form.forMin.trim();
  if (forMin === "" || !Number.isFinite(Number(forMin))) out.for_s = "Enter the minutes as a number.";
  else if (Number(forMin) * 60 < intervalS) out.for_s = `At least ${minutesText(intervalS)}: rules are checked every ${intervalS} s, so a shorter condition is never seen to hold.`;
  const windowMin = form.windowMin.trim();
  if ((form.kind === "waste_rate" || form.kind === "efficiency_drop") && (windowMin === "" || !Number.isFinite(Number(windowMin)))) out.window_s = "Enter the minutes as a number.";
  if (form.scope === "team" && form.team.trim() === "") out.team = "Required for a rule that applies to one team.";
  if (form.scope === "project" && form.project.trim() === "") out.project = "Required for a rule that applies to one project.";
  return out;
}

function asError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", String(err));
}

function RuleForm({ rule, kinds, intervalS = DEFAULT_INTERVAL_S, onDone, onCancel }: { rule: AlertRule | null; kinds: AlertRuleList["kinds"]; intervalS?: number; onDone: (saved: AlertRule) => void; onCancel: () => void }) {
  const [form, setForm] = useState<FormState>(rule ? formOf(rule) : EMPTY);
  const [error, setError] = useState<ApiError | null>(null);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [busy, setBusy] = useState(false);
  const specs = kinds[form.kind] ?? [];
  const bad = (field: string) => (errors[field] ? true : undefined);
  const set = (changes: Partial<FormState>) => setForm((f) => ({ ...f, ...changes }));
  /** The error beside a field, tied to its input (aria-describedby). */
  const msg = (field: string) =>
    errors[field] ? (
      <span className="field-error" id={`alert-error-${field.replace(/\W/g, "-")}`} data-testid={`field-error-${field}`}>
        {errors[field]}
      </span>
    ) : null;
  const described = (field: string) => (errors[field] ? `alert-error-${field.replace(/\W/g, "-")}` : undefined);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setError(null);
    const seen = ruleFormErrors(form, specs, intervalS);
    setErrors(seen);
    if (Object.keys(seen).length > 0) return;
    setBusy(true);
    try {
      const body = ruleBody(form, specs);
      const saved = rule
        ? await apiFetch<AlertRule>(`${ALERTS}rules/${rule.id}`, { method: "PATCH", body })
        : await apiFetch<AlertRule>(`${ALERTS}rules`, { method: "POST", body });
      onDone(saved);
    } catch (err) {
      const failure = asError(err);
      const fields = Object.entries(failure.fields ?? {});
      setErrors(Object.fromEntries(fields.map(([f, m]) => [formField(f), fieldMessage(String(m))])));
      setError(fields.length ? null : failure);
    } finally {
      setBusy(false);
    }
  }

  const id = (name: string) => `alert-${name}`;
  return (
    <form className="alert-rule-form" onSubmit={submit} aria-label={rule ? `Edit rule ${rule.name}` : "New alert rule"} data-testid="alert-rule-form">
      <div className="form-grid">
        <label className="field" htmlFor={id("name")}>
          <span id={`${id("name")}-name`}>Name</span>
          <input id={id("name")} aria-labelledby={`${id("name")}-name`} className="input" value={form.name} maxLength={200} aria-invalid={bad("name")} aria-describedby={described("name")} onChange={(e) => set({ name: e.target.value })} />
          {msg("name")}
        </label>
        <label className="field" htmlFor={id("kind")}>
          <span id={`${id("kind")}-name`}>When</span>
          <select id={id("kind")} aria-labelledby={`${id("kind")}-name`} className="select" value={form.kind} aria-invalid={bad("kind")} onChange={(e) => set({ kind: e.target.value as AlertRuleKind, params: {} })}>
            {(Object.keys(KIND_LABEL) as AlertRuleKind[]).map((k) => (
              <option key={k} value={k}>
                {KIND_LABEL[k]}
              </option>
            ))}
          </select>
          {msg("kind")}
        </label>
        {specs.map((spec) => (
          <label key={spec.name} className="field" htmlFor={id(`param-${spec.name}`)} title={spec.help}>
            <span id={`${id(`param-${spec.name}`)}-name`}>{PARAM_LABEL[spec.name] ?? spec.name}</span>
            {spec.choices.length ? (
              <select id={id(`param-${spec.name}`)} aria-labelledby={`${id(`param-${spec.name}`)}-name`} className="select" value={form.params[spec.name] ?? ""} aria-invalid={bad(`params.${spec.name}`)} onChange={(e) => set({ params: { ...form.params, [spec.name]: e.target.value } })}>
                <option value="">choose…</option>
                {spec.choices.map((c) => (
                  <option key={c} value={c}>
                    {c === "tokens_per_s" ? "tokens/s" : c === "mfu" ? "MFU" : c}
                  </option>
                ))}
              </select>
            ) : (
              <input id={id(`param-${spec.name}`)} aria-labelledby={`${id(`param-${spec.name}`)}-name`} className="input" inputMode="decimal" value={form.params[spec.name] ?? ""} aria-invalid={bad(`params.${spec.name}`)} aria-describedby={described(`params.${spec.name}`)} onChange={(e) => set({ params: { ...form.params, [spec.name]: e.target.value } })} />
            )}
            {msg(`params.${spec.name}`)}
          </label>
        ))}
        <label className="field" htmlFor={id("for")}>
          <span id={`${id("for")}-name`}>{form.kind === "silent_run" ? "Silent for (minutes)" : form.kind === "idle_gpu" ? "Idle for (minutes)" : "For (minutes)"}</span>
          <input id={id("for")} aria-labelledby={`${id("for")}-name`} className="input" inputMode="decimal" value={form.forMin} aria-invalid={bad("for_s")} aria-describedby={described("for_s")} onChange={(e) => set({ forMin: e.target.value })} />
          {msg("for_s")}
        </label>
        {(form.kind === "waste_rate" || form.kind === "efficiency_drop") && (
          <label className="field" htmlFor={id("window")} title="the trailing span of the run's telemetry a figure covers">
            <span id={`${id("window")}-name`}>Window (minutes)</span>
            <input id={id("window")} aria-labelledby={`${id("window")}-name`} className="input" inputMode="decimal" value={form.windowMin} aria-invalid={bad("window_s")} aria-describedby={described("window_s")} onChange={(e) => set({ windowMin: e.target.value })} />
            {msg("window_s")}
          </label>
        )}
        <label className="field" htmlFor={id("scope")}>
          <span id={`${id("scope")}-name`}>Applies to</span>
          <select id={id("scope")} aria-labelledby={`${id("scope")}-name`} className="select" value={form.scope} aria-invalid={bad("scope")} onChange={(e) => set({ scope: e.target.value as FormState["scope"] })}>
            <option value="org">the whole organization</option>
            <option value="team">one team</option>
            <option value="project">one project</option>
          </select>
          {msg("scope")}
        </label>
        {form.scope === "team" && (
          <label className="field" htmlFor={id("team")}>
            <span id={`${id("team")}-name`}>Team slug</span>
            <input id={id("team")} aria-labelledby={`${id("team")}-name`} className="input" value={form.team} aria-invalid={bad("team")} aria-describedby={described("team")} onChange={(e) => set({ team: e.target.value })} />
            {msg("team")}
          </label>
        )}
        {form.scope === "project" && (
          <label className="field" htmlFor={id("project")}>
            <span id={`${id("project")}-name`}>Project slug</span>
            <input id={id("project")} aria-labelledby={`${id("project")}-name`} className="input" value={form.project} aria-invalid={bad("project")} aria-describedby={described("project")} onChange={(e) => set({ project: e.target.value })} />
            {msg("project")}
          </label>
        )}
        {form.destinationsHidden ? (
          <p className="small muted" data-testid="alert-destinations-hidden">
            Where this rule sends is shown only to those who may change it.
          </p>
        ) : (
          <>
            <label className="field" htmlFor={id("webhook")}>
              <span id={`${id("webhook")}-name`}>Webhook URL</span>
              <input id={id("webhook")} aria-labelledby={`${id("webhook")}-name`} className="input" value={form.webhookUrl} placeholder="https://hooks.example.com/…" aria-invalid={bad("webhook_url")} aria-describedby={described("webhook_url")} onChange={(e) => set({ webhookUrl: e.target.value })} />
              {msg("webhook_url")}
            </label>
            <label className="field" htmlFor={id("format")}>
              <span id={`${id("format")}-name`}>Payload</span>
              <select id={id("format")} aria-labelledby={`${id("format")}-name`} className="select" value={form.webhookFormat} onChange={(e) => set({ webhookFormat: e.target.value as FormState["webhookFormat"] })}>
                <option value="generic">generic JSON</option>
                <option value="slack">Slack</option>
              </select>
            </label>
            <label className="field" htmlFor={id("emails")}>
              <span id={`${id("emails")}-name`}>Email to</span>
              <input id={id("emails")} aria-labelledby={`${id("emails")}-name`} className="input" value={form.emails} placeholder="oncall@example.com" aria-invalid={bad("email_to")} aria-describedby={described("email_to")} onChange={(e) => set({ emails: e.target.value })} />
              {msg("email_to")}
            </label>
          </>
        )}
        <label className="field field-check" htmlFor={id("enabled")}>
          <input id={id("enabled")} type="checkbox" checked={form.enabled} onChange={(e) => set({ enabled: e.target.checked })} />
          <span>Enabled</span>
        </label>
      </div>
      {rule?.webhook_secret && (
        <p className="small">
          Signing secret: <code data-testid="alert-secret">{rule.webhook_secret}</code>{" "}
          <label htmlFor={id("rotate")}>
            <input id={id("rotate")} type="checkbox" checked={form.rotate} onChange={(e) => set({ rotate: e.target.checked })} /> issue a new one on save
          </label>
        </p>
      )}
      {Object.keys(errors).length > 0 ? (
        <div className="form-error" role="alert" data-testid="alert-form-errors">
          {Object.keys(errors).length === 1 ? "Check" : `Check these ${Object.keys(errors).length} fields`}: {Object.keys(errors).map(alertFieldName).join(", ")}.
        </div>
      ) : (
        <FieldErrors error={error} />
      )}
      <div className="form-actions">
        <button className="btn btn-primary" type="submit" disabled={busy}>
          {busy ? "Saving…" : rule ? "Save rule" : "Create rule"}
        </button>
        <button className="btn btn-ghost" type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

function inAnHour(): string {
  return new Date(Date.now() + 3600_000).toISOString();
}

function snoozedNow(until: string | null): boolean {
  return until !== null && new Date(until).getTime() > Date.now();
}

function RulesCard({ onChanged }: { onChanged: () => void }) {
  const state = useApi<AlertRuleList>(`${ALERTS}rules`);
  const [editing, setEditing] = useState<AlertRule | "new" | null>(null);
  const [notice, setNotice] = useState("");
  const [error, setError] = useState<ApiError | null>(null);

  async function act(rule: AlertRule, what: "test" | "mute" | "unmute" | "snooze" | "unsnooze" | "delete") {
    setError(null);
    setNotice("");
    try {
      if (what === "test") {
        const out = await apiFetch<{ deliveries: AlertDeliveryRow[] }>(`${ALERTS}rules/${rule.id}/test`, { method: "POST" });
        setNotice(out.deliveries.map((d) => `${d.channel}${d.target ? ` to ${d.target}` : ""}: ${d.status}${d.status_code ? ` (HTTP ${d.status_code})` : ""}${d.error ? ` — ${d.error}` : ""}`).join("; "));
      } else if (what === "delete") {
        await apiFetch(`${ALERTS}rules/${rule.id}`, { method: "DELETE" });
        setNotice(`Deleted ${rule.name}.`);
      } else {
        const body = what === "mute" || what === "unmute" ? { muted: what === "mute" } : { snoozed_until: what === "snooze" ? inAnHour() : null };
        await apiFetch(`${ALERTS}rules/${rule.id}`, { method: "PATCH", body });
      }
      state.reload();
      onChanged();
    } catch (err) {
      setError(asError(err));
    }
  }

  const { user } = useSession();
  // Organization admins write every rule, a team's admins their team's (the API decides each).
  const canCreate = isAdmin(user) || !!user?.teams.some((t) => t.role === "admin");
  return (
    <Card
      title="Alert rules"
      actions={
        canCreate && editing === null ? (
          <button type="button" className="btn btn-small btn-primary" onClick={() => setEditing("new")}>
            New rule
          </button>
        ) : undefined
      }
    >
      <p className="muted small">Evaluated from the stored analyses about every {state.data?.evaluation_interval_s ?? DEFAULT_INTERVAL_S} s. One alert per rule and run (or GPU) until it resolves; a resolve message follows.</p>
      {editing !== null && state.data && (
        <RuleForm
          rule={editing === "new" ? null : editing}
          kinds={state.data.kinds}
          intervalS={state.data.evaluation_interval_s}
          onCancel={() => setEditing(null)}
          onDone={(saved) => {
            setEditing(null);
            setNotice(`Saved ${saved.name}.`);
            state.reload();
          }}
        />
      )}
      {notice && (
        <p className="muted small" role="status" data-testid="alert-notice">
          {notice}
        </p>
      )}
      <FieldErrors error={error} />
      <Async state={state} isEmpty={(d) => d.rules.length === 0} empty={<Empty title="No alert rules yet" />}>
        {(d) => (
          <DataTable
            caption="Alert rules"
            testId="alert-rules"
            rows={d.rules}
            rowKey={(r) => String(r.id)}
            columns={[
              { key: "name", header: "Rule", render: (r) => <strong>{r.name}</strong> },
              { key: "kind", header: "When", render: (r) => <span title={KIND_LABEL[r.kind]}>{ruleSummary(r)}</span> },
              { key: "scope", header: "Applies to", render: (r) => (r.scope === "org" ? "organization" : r.scope === "team" ? `team ${r.team}` : `project ${r.project}`) },
              {
                key: "to",
                header: "Sends to",
                priority: "low",
                render: (r) =>
                  r.webhook_url === null || r.email_to === null ? (
                    <span className="muted" title="shown only to those who may change the rule">
                      hidden
                    </span>
                  ) : (
                    [r.webhook_url ? `webhook (${r.webhook_format})` : "", ...r.email_to].filter(Boolean).join(", ") || <span className="muted">nowhere</span>
                  ),
              },
              {
                key: "state",
                header: "State",
                render: (r) => (
                  <>
                    {!r.enabled && <span className="badge">disabled</span>} {r.muted && <span className="badge">muted</span>}{" "}
                    {snoozedNow(r.snoozed_until) && <span className="badge">snoozed to {formatDateTime(r.snoozed_until)}</span>}{" "}
                    {r.firing > 0 && <span className="badge badge-warn">{r.firing} firing</span>}
                  </>
                ),
              },
              {
                key: "actions",
                header: "",
                align: "right",
                render: (r) =>
                  r.writable ? (
                    <span className="row-actions">
                      <button type="button" className="btn btn-small" onClick={() => setEditing(r)} aria-label={`Edit ${r.name}`}>
                        Edit
                      </button>
                      <button type="button" className="btn btn-small" onClick={() => act(r, "test")} aria-label={`Send a test of ${r.name}`}>
                        Test
                      </button>
                      <button type="button" className="btn btn-small" onClick={() => act(r, r.muted ? "unmute" : "mute")} aria-label={`${r.muted ? "Unmute" : "Mute"} ${r.name}`}>
                        {r.muted ? "Unmute" : "Mute"}
                      </button>
                      <button type="button" className="btn btn-small" onClick={() => act(r, snoozedNow(r.snoozed_until) ? "unsnooze" : "snooze")} aria-label={`${snoozedNow(r.snoozed_until) ? "Unsnooze" : "Snooze for an hour"} ${r.name}`}>
                        {snoozedNow(r.snoozed_until) ? "Unsnooze" : "Snooze 1 h"}
                      </button>
                      <button type="button" className="btn btn-small btn-danger" onClick={() => act(r, "delete")} aria-label={`Delete ${r.name}`}>
                        Delete
                      </button>
                    </span>
                  ) : null,
              },
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

function figureText(a: AlertStateRow): string {
  if (a.value === null) return "–";
  if (a.figure === "waste_share") return `${formatShare(a.value)} waste`;
  if (a.figure?.endsWith("_drop_pct")) return `${formatShare(a.value / 100)} below baseline`;
  if (a.figure?.endsWith("_seconds")) return formatDuration(a.value);
  if (a.figure?.endsWith("usd_per_hour")) return `${formatUsdRate(a.value)}/h`;
  return String(a.value);
}

function AlertsCard({ nonce }: { nonce: number }) {
  const state = useApi<{ alerts: AlertStateRow[] }>(`${ALERTS}alerts?limit=100&n=${nonce}`);
  const [error, setError] = useState<ApiError | null>(null);
  async function silence(a: AlertStateRow, body: Record<string, unknown>) {
    setError(null);
    try {
      await apiFetch(`${ALERTS}alerts/${a.id}`, { method: "PATCH", body });
      state.reload();
    } catch (err) {
      setError(asError(err));
    }
  }
  return (
    <Card title="Alerts" actions={<span className="muted small">pending, firing and resolved, newest first</span>}>
      <FieldErrors error={error} />
      <Async state={state} isEmpty={(d) => d.alerts.length === 0} empty={<Empty title="Nothing has fired" />}>
        {(d) => (
          <DataTable
            caption="Alerts"
            testId="alert-states"
            rows={d.alerts}
            rowKey={(a) => String(a.id)}
            columns={[
              { key: "subject", header: "Subject", render: (a) => (a.run_id ? <Link to={`/runs/${a.run_id}`}>{a.subject_label}</Link> : a.subject_label) },
              { key: "rule", header: "Rule", render: (a) => a.rule_name },
              { key: "state", header: "State", render: (a) => <span className={`badge${a.state === "firing" ? " badge-warn" : ""}`}>{a.state}</span> },
              { key: "figure", header: "Figure", align: "right", render: (a) => figureText(a) },
              { key: "usd", header: "$/h", align: "right", render: (a) => (a.usd_per_hour === null ? "–" : `${formatUsdRate(a.usd_per_hour)}/h`) },
              { key: "since", header: "Since", render: (a) => formatDateTime(a.fired_at ?? a.pending_since) },
              {
                key: "actions",
                header: "",
                align: "right",
                render: (a) =>
                  a.writable ? (
                    <span className="row-actions">
                      <button type="button" className="btn btn-small" onClick={() => silence(a, { muted: !a.muted })} aria-label={`${a.muted ? "Unmute" : "Mute"} ${a.subject_label}`}>
                        {a.muted ? "Unmute" : "Mute"}
                      </button>
                      <button type="button" className="btn btn-small" onClick={() => silence(a, { snoozed_until: snoozedNow(a.snoozed_until) ? null : inAnHour() })} aria-label={`${snoozedNow(a.snoozed_until) ? "Unsnooze" : "Snooze for an hour"} ${a.subject_label}`}>
                        {snoozedNow(a.snoozed_until) ? "Unsnooze" : "Snooze 1 h"}
                      </button>
                    </span>
                  ) : null,
              },
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

function DeliveriesCard({ nonce }: { nonce: number }) {
  const state = useApi<{ deliveries: AlertDeliveryRow[] }>(`${ALERTS}deliveries?limit=100&n=${nonce}`);
  return (
    <Card title="Delivery log" actions={<span className="muted small">every webhook and email, with its attempts</span>}>
      <Async state={state} isEmpty={(d) => d.deliveries.length === 0} empty={<Empty title="Nothing sent yet" />}>
        {(d) => (
          <DataTable
            caption="Delivery log"
            testId="alert-deliveries"
            dense
            rows={d.deliveries}
            rowKey={(x) => String(x.id)}
            columns={[
              { key: "at", header: "Created", render: (x) => formatDateTime(x.created_at) },
              { key: "rule", header: "Rule", render: (x) => x.rule_name },
              { key: "event", header: "Event", render: (x) => x.event },
              { key: "channel", header: "Channel", render: (x) => x.channel },
              {
                key: "target",
                header: "To",
                priority: "low",
                render: (x) => (x.target === null ? <span className="muted" title="shown only to those who may change the rule">hidden</span> : <span className="break-all">{x.target}</span>),
              },
              { key: "status", header: "Status", render: (x) => <span className={`badge${x.status === "failed" ? " badge-warn" : ""}`}>{x.status}</span> },
              { key: "attempts", header: "Attempts", align: "right", render: (x) => x.attempts },
              { key: "code", header: "HTTP", align: "right", render: (x) => x.status_code ?? "–" },
              { key: "error", header: "Error", priority: "low", render: (x) => x.error || <span className="muted">–</span> },
              { key: "next", header: "Next retry", render: (x) => (x.next_attempt_at && x.status === "pending" ? formatDateTime(x.next_attempt_at) : <span className="muted">–</span>) },
            ]}
          />
        )}
      </Async>
    </Card>
  );
}

export function AlertsSettings() {
  const [nonce, setNonce] = useState(0);
  return (
    <>
      <RulesCard onChanged={() => setNonce((n) => n + 1)} />
      <AlertsCard nonce={nonce} />
      <DeliveriesCard nonce={nonce} />
    </>
  );
}
