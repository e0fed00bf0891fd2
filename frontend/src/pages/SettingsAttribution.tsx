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

const RULES_API = "/api/v1/fleet/rules";

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

function RuleRow({ rule, index, count, editable, onChange, onMove, onRemove }: {
  rule: AttributionRule; index: number; count: number; editable: boolean;
  onChange: (r: AttributionRule) => void; onMove: (delta: number) => void; onRemove: () => void;
}) {
  const id = `rule-${index}`;
  return (
    <li className="rule-row" data-testid={id} style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap", marginBottom: 8 }}>
      <span className="muted small">{index + 1}.</span>
      <label className="visually-hidden" htmlFor={`${id}-match`}>Rule {index + 1} matches</label>
      <select id={`${id}-match`} className="input" value={rule.match} disabled={!editable} onChange={(e) => onChange({ ...rule, match: e.target.value as Match })}>
        {MATCHES.map((m) => (
          <option key={m} value={m}>{MATCH_LABEL[m]}</option>
        ))}
      </select>
      {rule.match === "k8s_label" && (
        <input aria-label={`Rule ${index + 1} label name`} className="input" placeholder="label, e.g. team" value={rule.key} disabled={!editable} onChange={(e) => onChange({ ...rule, key: e.target.value })} />
      )}
      <input aria-label={`Rule ${index + 1} pattern`} className="input" placeholder="value or glob, e.g. ml-*" value={rule.pattern} disabled={!editable} onChange={(e) => onChange({ ...rule, pattern: e.target.value })} />
      <span aria-hidden="true">→</span>
      <input aria-label={`Rule ${index + 1} team`} className="input" placeholder="team" value={rule.team ?? ""} disabled={!editable} onChange={(e) => onChange({ ...rule, team: e.target.value })} />
      <input aria-label={`Rule ${index + 1} project`} className="input" placeholder="project (optional)" value={rule.project ?? ""} disabled={!editable} onChange={(e) => onChange({ ...rule, project: e.target.value })} />
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
  const saved = useApi<{ rules: AttributionRule[] }>(RULES_API);
  const [rules, setRules] = useState<AttributionRule[]>([]);
  const [preview, setPreview] = useState<AttributionPreview | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [notice, setNotice] = useState("");
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (saved.data) setRules(saved.data.rules.map((r) => ({ ...r, key: r.key ?? "" })));
  }, [saved.data]);

  const call = async (method: "POST" | "PUT", path: string) => {
    setBusy(true);
    setError(null);
    setNotice("");
    try {
      return await apiFetch<AttributionPreview & { owners_moved?: number }>(path, { method, body: rulesBody(rules) });
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
      setNotice(`Saved. ${answer.owners_moved ?? 0} holders moved to another team or project.`);
      saved.reload();
    }
  };
  const move = (i: number, delta: number) => {
    const next = [...rules];
    [next[i], next[i + delta]] = [next[i + delta], next[i]];
    setRules(next);
  };

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
                    onChange={(r) => setRules(rules.map((x, j) => (j === i ? r : x)))}
                    onMove={(delta) => move(i, delta)}
                    onRemove={() => setRules(rules.filter((_, j) => j !== i))}
                  />
                ))}
              </ol>
            )}
            {admin && (
              <div className="form-actions">
                <button type="button" className="btn" disabled={busy} onClick={() => setRules([...rules, { match: "k8s_namespace", key: "", pattern: "", team: "", project: "" }])}>Add rule</button>
                <button type="button" className="btn" disabled={busy} onClick={onPreview} data-testid="rules-preview">Preview on the last day</button>
                <button type="button" className="btn btn-primary" disabled={busy} onClick={onSave} data-testid="rules-save">Save rules</button>
              </div>
            )}
            <FieldErrors error={error} />
            {notice && <p role="status" className="muted">{notice}</p>}
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
