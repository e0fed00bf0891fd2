import { useEffect, useState } from "react";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import { DataTable, type Column } from "../components/DataTable";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card } from "../components/ui";
import { formatDate, formatGpuHours, formatUsd } from "../lib/format";

export const MATCHES = ["k8s_namespace", "k8s_label", "slurm_account", "slurm_partition", "unix_user"] as const;
export type Match = (typeof MATCHES)[number];
export const MATCH_LABEL: Record<Match, string> = {
  k8s_namespace: "Kubernetes namespace",
  k8s_label: "Kubernetes pod label",
  slurm_account: "Slurm account",
  slurm_partition: "Slurm partition",
  unix_user: "Unix user",
};

export interface AttributionRule {
  match: Match;
  key: string;
  pattern: string;
  team: string | null;
  project: string | null;
}

export interface PreviewHolder {
  holder: string;
  kind: string | null;
  gpu_hours: number;
  usd: number;
  rule: number | null;
  team: string | null;
  project: string | null;
  current_team: string | null;
  current_project: string | null;
}

export interface AttributionPreview {
  day: string | null;
  holders: PreviewHolder[];
  totals: { team: string | null; project: string | null; gpu_hours: number; usd: number }[];
}

/** A re-attribution after a rule save: a background job (GET /api/v1/fleet/rules/jobs/{id}). */
export interface AttributionJob {
  id: number;
  status: "queued" | "running" | "done" | "failed" | "superseded";
  owners_total: number;
  owners_done: number;
  owners_moved: number;
  error: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}

export interface SavedRules {
  rules: AttributionRule[];
  /** Rules of teams this person does not see (organization admins and finance see all). */
  hidden?: number;
  /** The latest re-attribution job (organization admins only). */
  job?: AttributionJob | null;
}

const RULES_API = "/api/v1/fleet/rules";
const JOB_POLL_MS = 1000;

export function jobRunning(job: AttributionJob | null | undefined): boolean {
  return !!job && (job.status === "queued" || job.status === "running");
}

/** What the job has done so far, in words. */
export function jobProgress(job: AttributionJob): string {
  const n = (x: number) => x.toLocaleString("en-US");
  if (job.status === "queued") return `Re-attribution queued: ${n(job.owners_total)} holders to go over.`;
  if (job.status === "running") return `Re-attributing: ${n(job.owners_done)} of ${n(job.owners_total)} holders, ${n(job.owners_moved)} moved so far.`;
  if (job.status === "done") return `Re-attributed: ${n(job.owners_moved)} of ${n(job.owners_done)} holders moved to another team or project.`;
  if (job.status === "superseded") return "A later save took over this re-attribution.";
  return `Re-attribution failed: ${job.error ?? "unknown error"}`;
}

/** What the API takes: blank team or project fields are left out. */
export function rulesBody(rules: AttributionRule[]): { rules: Record<string, string>[] } {
  return {
    rules: rules.map((r) => {
      const out: Record<string, string> = { match: r.match, pattern: r.pattern.trim() };
      if (r.key.trim()) out.key = r.key.trim();
      if (r.team?.trim()) out.team = r.team.trim();
      if (r.project?.trim()) out.project = r.project.trim();
      return out;
    }),
  };
}

const RULE_FIELD_WORDS: Record<string, string> = { match: "what it matches", key: "label name", pattern: "pattern", team: "team", project: "project" };

/**
 * An API field of the rules as the page numbers and names them: "rules[4].team" → "Rule 5: team"
 * (the list shows rules from 1), "rules" → "Rules".
 */
export function ruleFieldName(field: string): string {
  const m = /^rules\[(\d+)\](?:\.(\w+))?$/.exec(field);
  if (!m) return field === "rules" ? "Rules" : field.replace(/_/g, " ");
  const rule = `Rule ${Number(m[1]) + 1}`;
  return m[2] ? `${rule}: ${RULE_FIELD_WORDS[m[2]] ?? m[2].replace(/_/g, " ")}` : rule;
}

/** "rules[4].team: no team 'x'" → "Rule 5: team: no team 'x'", wherever a message names a rule. */
export function ruleErrorWords(message: string): string {
  return message.replace(/rules\[\d+\](?:\.\w+)?/g, (field) => ruleFieldName(field)).replace(/\bk8s_label\b/g, "Kubernetes pod label");
}

function mapped(team: string | null, project: string | null): string {
  if (!team && !project) return "unattributed";
  return [team, project].filter(Boolean).join(" / ");
}

const PREVIEW_COLUMNS: Column<PreviewHolder>[] = [
  { key: "holder", header: "Holder", render: (r) => r.holder },
  { key: "rule", header: "Rule", render: (r) => (r.kind === "run" ? "its run's project" : r.rule === null ? "none matches" : `rule ${r.rule + 1}`) },
  {
    key: "team",
    header: "Would go to",
    render: (r) => {
      const next = mapped(r.team, r.project);
      const now = mapped(r.current_team, r.current_project);
      return next === now ? next : <span><strong>{next}</strong> <span className="muted small">(now {now})</span></span>;
    },
  },
  { key: "gpu_hours", header: "GPU-hours", align: "right", render: (r) => formatGpuHours(r.gpu_hours) },
  { key: "usd", header: "Cost", align: "right", render: (r) => formatUsd(r.usd) },
];

function RuleRow({ rule, index, count, editable, onChange, onMove, onRemove, badField }: {
  rule: AttributionRule; index: number; count: number; editable: boolean;
  onChange: (r: AttributionRule) => void; onMove: (delta: number) => void; onRemove: () => void;
  /** The field of this rule the API refused, if any ("team", "pattern", …). */
  badField?: string | null;
}) {
  const id = `rule-${index}`;
  const bad = (field: string) => (badField === field ? true : undefined);
  return (
    <li className="rule-row" data-testid={id} style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap", marginBottom: 8 }}>
      <span className="muted small">{index + 1}.</span>
      <label className="visually-hidden" htmlFor={`${id}-match`}>Rule {index + 1} matches</label>
      <select id={`${id}-match`} className="input" aria-invalid={bad("match")} value={rule.match} disabled={!editable} onChange={(e) => onChange({ ...rule, match: e.target.value as Match })}>
        {MATCHES.map((m) => (
          <option key={m} value={m}>{MATCH_LABEL[m]}</option>
        ))}
      </select>
      {rule.match === "k8s_label" && (
        <input aria-label={`Rule ${index + 1} label name`} aria-invalid={bad("key")} className="input" placeholder="label, e.g. team" value={rule.key} disabled={!editable} onChange={(e) => onChange({ ...rule, key: e.target.value })} />
      )}
      <input aria-label={`Rule ${index + 1} pattern`} aria-invalid={bad("pattern")} className="input" placeholder="value or glob, e.g. ml-*" value={rule.pattern} disabled={!editable} onChange={(e) => onChange({ ...rule, pattern: e.target.value })} />
      <span aria-hidden="true">→</span>
      <input aria-label={`Rule ${index + 1} team`} aria-invalid={bad("team")} className="input" placeholder="team" value={rule.team ?? ""} disabled={!editable} onChange={(e) => onChange({ ...rule, team: e.target.value })} />
      <input aria-label={`Rule ${index + 1} project`} aria-invalid={bad("project")} className="input" placeholder="project (optional)" value={rule.project ?? ""} disabled={!editable} onChange={(e) => onChange({ ...rule, project: e.target.value })} />
      {editable && (
        <span className="rule-actions">
          <button type="button" className="btn btn-small btn-ghost" aria-label={`Move rule ${index + 1} up`} disabled={index === 0} onClick={() => onMove(-1)}>↑</button>
          <button type="button" className="btn btn-small btn-ghost" aria-label={`Move rule ${index + 1} down`} disabled={index === count - 1} onClick={() => onMove(1)}>↓</button>
          <button type="button" className="btn btn-small btn-ghost" aria-label={`Remove rule ${index + 1}`} onClick={onRemove}>✕</button>
        </span>
      )}
    </li>
  );
}

export function AttributionCard() {
  const { user } = useSession();
  const admin = isAdmin(user);
  const saved = useApi<SavedRules>(RULES_API);
  const [job, setJob] = useState<AttributionJob | null>(null);
  const [rules, setRules] = useState<AttributionRule[]>([]);
  const [preview, setPreview] = useState<AttributionPreview | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [notice, setNotice] = useState("");
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (saved.data) setRules(saved.data.rules.map((r) => ({ ...r, key: r.key ?? "" })));
    if (saved.data?.job) setJob(saved.data.job);
  }, [saved.data]);

  // While a job runs, its progress is asked for every second (the save itself answered at once).
  const runningId = jobRunning(job) ? job!.id : null;
  useEffect(() => {
    if (runningId === null) return;
    let live = true;
    const timer = setInterval(async () => {
      try {
        const next = await apiFetch<AttributionJob>(`${RULES_API}/jobs/${runningId}`);
        if (live) setJob(next);
      } catch {
        // a failed poll is retried at the next tick
      }
    }, JOB_POLL_MS);
    return () => {
      live = false;
      clearInterval(timer);
    };
  }, [runningId]);

  const call = async (method: "POST" | "PUT", path: string) => {
    setBusy(true);
    setError(null);
    setNotice("");
    try {
      return await apiFetch<AttributionPreview & { job?: AttributionJob }>(path, { method, body: rulesBody(rules) });
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
      return null;
    } finally {
      setBusy(false);
    }
  };
  const onPreview = async () => {
    const answer = await call("POST", `${RULES_API}/preview`);
    if (answer) setPreview(answer);
  };
  const onSave = async () => {
    const answer = await call("PUT", RULES_API);
    if (answer) {
      setNotice("Saved. The fleet's time is re-attributed in the background.");
      if (answer.job) setJob(answer.job);
      saved.reload();
    }
  };
  // Any edit makes a preview stale (it showed the rules as they were): it goes, with the errors about them.
  const edit = (next: AttributionRule[]) => {
    setRules(next);
    setPreview(null);
    setError(null);
  };
  const move = (i: number, delta: number) => {
    const next = [...rules];
    [next[i], next[i + delta]] = [next[i + delta], next[i]];
    edit(next);
  };
  const refused = error ? Object.keys(error.fields ?? {}).map((f) => /^rules\[(\d+)\](?:\.(\w+))?$/.exec(f)).filter((m) => m !== null) : [];
  const badFieldOf = (i: number) => refused.find((m) => Number(m![1]) === i)?.[2] ?? (refused.some((m) => Number(m![1]) === i) ? "rule" : null);

  return (
    <Card title="Attribution rules" actions={<span className="muted small">{admin ? "first match wins · unmatched time stays unattributed" : "read-only: organization admins change these"}</span>}>
      <Async state={saved} loadingRows={3}>
        {() => (
          <div className="attribution" data-testid="attribution">
            <p className="muted small">
              GPU time on nodes that no run measures is given to a team and project by the first rule that matches its holder: a Kubernetes pod (namespace or label), a Slurm job (account, partition, user) or a Unix user. A PhantomHub run always goes to its own project.
            </p>
            {rules.length === 0 ? <Empty title="No rules yet: all uninstrumented time is unattributed" /> : (
              <ol className="rules" data-testid="rules" style={{ listStyle: "none", padding: 0 }}>
                {rules.map((rule, i) => (
                  <RuleRow
                    key={i}
                    rule={rule}
                    index={i}
                    count={rules.length}
                    editable={admin && !busy}
                    onChange={(r) => edit(rules.map((x, j) => (j === i ? r : x)))}
                    onMove={(delta) => move(i, delta)}
                    onRemove={() => edit(rules.filter((_, j) => j !== i))}
                    badField={badFieldOf(i)}
                  />
                ))}
              </ol>
            )}
            {admin && (
              <div className="form-actions">
                <button type="button" className="btn" disabled={busy} onClick={() => edit([...rules, { match: "k8s_namespace", key: "", pattern: "", team: "", project: "" }])}>Add rule</button>
                <button type="button" className="btn" disabled={busy} onClick={onPreview} data-testid="rules-preview">Preview on the last day</button>
                <button type="button" className="btn btn-primary" disabled={busy} onClick={onSave} data-testid="rules-save">Save rules</button>
              </div>
            )}
            {error && Object.keys(error.fields ?? {}).length > 0 ? (
              <ul className="form-error" role="alert" data-testid="rules-errors">
                {Object.entries(error.fields).map(([field, message]) => (
                  <li key={field}>
                    {ruleFieldName(field)}: {ruleErrorWords(String(message))}
                  </li>
                ))}
              </ul>
            ) : (
              <FieldErrors error={error ? new ApiError(error.status, error.code, ruleErrorWords(error.message), error.fields) : null} />
            )}
            {notice && <p role="status" className="muted">{notice}</p>}
            {job && (
              <div data-testid="attribution-job" className="muted small">
                <p>{jobProgress(job)}</p>
                {jobRunning(job) && job.owners_total > 0 && (
                  <progress aria-label="Re-attribution progress" max={job.owners_total} value={job.owners_done} />
                )}
              </div>
            )}
            {!!saved.data?.hidden && (
              <p className="muted small" data-testid="rules-hidden">{saved.data.hidden} rules of other teams are not shown.</p>
            )}
            {preview && (
              <div data-testid="rules-preview-result">
                <h3 className="small">{preview.day ? `What ${formatDate(preview.day)} would map to (nothing saved yet)` : "No fleet data to preview yet"}</h3>
                {preview.holders.length > 0 && (
                  <>
                    <DataTable caption="Preview of the rules" testId="preview-holders" columns={PREVIEW_COLUMNS} rows={preview.holders} rowKey={(r) => r.holder} dense />
                    <ul className="preview-totals" data-testid="preview-totals">
                      {preview.totals.map((t) => (
                        <li key={`${t.team}/${t.project}`}>{mapped(t.team, t.project)}: {formatUsd(t.usd)} · {formatGpuHours(t.gpu_hours)}</li>
                      ))}
                    </ul>
                  </>
                )}
              </div>
            )}
          </div>
        )}
      </Async>
    </Card>
  );
}
