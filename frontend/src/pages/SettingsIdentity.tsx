// Settings → People & groups: the group mapping (identity provider groups → teams and roles) with
// a preview in sentences, and the people list with where each membership and role comes from.
// The rules' meaning: docs/identity.md, "Groups to teams and roles"; the API: docs/portal-api.md.

import { useEffect, useState, type FormEvent } from "react";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { GroupMappingRule, GroupMappingView, MappingChange, MappingGrant, PeoplePage, PersonMembership, PersonRow } from "../api/types";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card } from "../components/ui";
import { formatDateTime } from "../lib/format";

export const GRANTS: MappingGrant[] = ["team_member", "team_lead", "team_viewer", "org_admin", "finance"];
export const GRANT_LABEL: Record<MappingGrant, string> = {
  org_admin: "Organization admin",
  finance: "Finance",
  team_lead: "Team lead",
  team_member: "Team member",
  team_viewer: "Team viewer",
};
const ROLE_LABEL: Record<PersonMembership["role"], string> = { admin: "lead", member: "member", viewer: "viewer" };
const TEAM_WORDS: Record<string, [string, string]> = { team_lead: ["lead", "leads"], team_member: ["member", "members"], team_viewer: ["viewer", "viewers"] };
const ORG_WORDS: Record<string, string> = { org_admin: "organization admin", finance: "finance" };

export function isTeamGrant(grant: MappingGrant): boolean {
  return grant.startsWith("team_");
}

/**
 * One grouped change in words: "14 people would join nlp as members", "2 people would lose finance",
 * "1 lead would leave vision"; `done` for what a save did ("14 people joined nlp as members").
 */
export function changeSentence(change: MappingChange, done = false): string {
  const n = change.count;
  const people = n === 1 ? "1 person" : `${n.toLocaleString("en-US")} people`;
  const verb = (would: string, did: string) => (done ? did : `would ${would}`);
  if (!isTeamGrant(change.grant)) {
    const what = ORG_WORDS[change.grant] ?? change.grant;
    return change.action === "leave" ? `${people} ${verb("lose", "lost")} ${what}` : `${people} ${verb("gain", "gained")} ${what}`;
  }
  const [one, many] = TEAM_WORDS[change.grant] ?? ["member", "members"];
  const role = n === 1 ? `a ${one}` : many;
  const team = change.team ?? "a team";
  if (change.action === "join") return `${people} ${verb("join", "joined")} ${team} as ${role}`;
  if (change.action === "role") return `${people} ${verb("become", "became")} ${role} of ${team}`;
  return `${n === 1 ? `1 ${one}` : `${n.toLocaleString("en-US")} ${many}`} ${verb("leave", "left")} ${team}`;
}

/** All the changes in words, or the one sentence saying there are none. */
export function changeSentences(changes: MappingChange[], done = false): string[] {
  if (changes.length === 0) return [done ? "Nobody's access changed." : "Nobody's access would change."];
  return changes.map((c) => changeSentence(c, done));
}

/** An API field of the rules as the editor numbers rows: "rules[3].team" → "Row 4: team". */
export function mappingFieldName(field: string): string {
  const m = /^rules\[(\d+)\](?:\.(\w+))?$/.exec(field);
  if (!m) return field === "rules" ? "Rules" : field;
  return m[2] ? `Row ${Number(m[1]) + 1}: ${m[2]}` : `Row ${Number(m[1]) + 1}`;
}

/** What the API takes: patterns trimmed, no team for organization grants. */
export function mappingBody(rules: GroupMappingRule[]): { rules: GroupMappingRule[] } {
  return { rules: rules.map((r) => ({ pattern: r.pattern.trim(), grant: r.grant, team: isTeamGrant(r.grant) ? (r.team ?? "").trim() || null : null })) };
}

function errorOf(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", String(err));
}

export function IdentitySettings() {
  const { user } = useSession();
  const admin = isAdmin(user);
  const leads = (user?.teams ?? []).some((t) => t.role === "admin");
  const [peopleVersion, setPeopleVersion] = useState(0);
  if (!admin && !leads) {
    return (
      <Card title="People & groups">
        <p className="muted">Organization admins map the identity provider's groups to teams and roles; a team's leads manage its members. Ask one of them to change your access.</p>
      </Card>
    );
  }
  return (
    <>
      {admin && <MappingCard onSaved={() => setPeopleVersion((v) => v + 1)} />}
      <PeopleCard version={peopleVersion} />
    </>
  );
}

function MappingRow({ rule, index, teams, matches, badField, disabled, onChange, onRemove }: {
  rule: GroupMappingRule; index: number; teams: string[]; matches: string[] | null; badField: string | null; disabled: boolean;
  onChange: (r: GroupMappingRule) => void; onRemove: () => void;
}) {
  const n = index + 1;
  const bad = (field: string) => (badField === field || badField === "row" ? true : undefined);
  return (
    <li data-testid={`mapping-row-${index}`} style={{ display: "flex", gap: 8, alignItems: "center", flexWrap: "wrap", marginBottom: 8 }}>
      <span className="muted small">{n}.</span>
      <input aria-label={`Row ${n} group pattern`} aria-invalid={bad("pattern")} className="input" placeholder="group or glob, e.g. nlp-*" value={rule.pattern} disabled={disabled} onChange={(e) => onChange({ ...rule, pattern: e.target.value })} />
      <span aria-hidden="true">→</span>
      <select aria-label={`Row ${n} grant`} aria-invalid={bad("grant")} className="input" value={rule.grant} disabled={disabled} onChange={(e) => onChange({ ...rule, grant: e.target.value as MappingGrant })}>
        {GRANTS.map((g) => (
          <option key={g} value={g}>{GRANT_LABEL[g]}</option>
        ))}
      </select>
      {isTeamGrant(rule.grant) && (
        <>
          <span className="muted small">in</span>
          <select aria-label={`Row ${n} team`} aria-invalid={bad("team")} className="input" value={rule.team ?? ""} disabled={disabled} onChange={(e) => onChange({ ...rule, team: e.target.value })}>
            <option value="">choose a team</option>
            {teams.map((t) => (
              <option key={t} value={t}>{t}</option>
            ))}
            {rule.team && !teams.includes(rule.team) && <option value={rule.team}>{rule.team}</option>}
          </select>
        </>
      )}
      {!disabled && (
        <button type="button" className="btn btn-small btn-ghost" aria-label={`Remove row ${n}`} onClick={onRemove}>✕</button>
      )}
      {matches !== null && (
        <span className="muted small" data-testid={`mapping-row-${index}-matches`}>
          {matches.length === 0 ? "matches no known group" : `matches ${matches.join(", ")}`}
        </span>
      )}
    </li>
  );
}

function MappingCard({ onSaved }: { onSaved: () => void }) {
  const saved = useApi<GroupMappingView>("group-mapping");
  const [rules, setRules] = useState<GroupMappingRule[]>([]);
  const [matches, setMatches] = useState<(string[] | null)[]>([]);
  const [preview, setPreview] = useState<GroupMappingView | null>(null);
  const [done, setDone] = useState<string[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (!saved.data) return;
    setRules(saved.data.rules.map(({ pattern, grant, team }) => ({ pattern, grant, team })));
    setMatches(saved.data.rules.map((r) => r.matches));
  }, [saved.data]);

  const teams = saved.data?.teams ?? [];
  // An edit makes the preview, the matches and the errors stale: they go.
  const edit = (next: GroupMappingRule[]) => {
    setRules(next);
    setMatches(next.map(() => null));
    setPreview(null);
    setDone(null);
    setError(null);
  };

  const call = async (method: "POST" | "PUT", path: string): Promise<GroupMappingView | null> => {
    setBusy(true);
    setError(null);
    setDone(null);
    try {
      return await apiFetch<GroupMappingView>(path, { method, body: mappingBody(rules) });
    } catch (err) {
      setError(errorOf(err));
      return null;
    } finally {
      setBusy(false);
    }
  };
  const onPreview = async () => {
    const answer = await call("POST", "group-mapping/preview");
    if (answer) {
      setPreview(answer);
      setMatches(answer.rules.map((r) => r.matches));
    }
  };
  const onSave = async () => {
    const answer = await call("PUT", "group-mapping");
    if (answer) {
      setPreview(null);
      const gone = answer.deactivated ?? [];
      const also = gone.length ? [`Deactivated people re-synced too: ${gone.join(", ")}.`] : [];
      setDone([...changeSentences(answer.changes ?? [], true), ...also]);
      saved.reload();
      onSaved();
    }
  };
  const refused = Object.keys(error?.fields ?? {}).map((f) => /^rules\[(\d+)\](?:\.(\w+))?$/.exec(f)).filter((m): m is RegExpExecArray => m !== null);
  const badFieldOf = (i: number) => {
    const hit = refused.find((m) => Number(m[1]) === i);
    return hit ? (hit[2] ?? "row") : null;
  };

  return (
    <Card title="Groups to teams and roles" actions={<span className="muted small">exact names or globs (* ? [..]) · case-sensitive · the highest team role wins</span>}>
      <Async state={saved} loadingRows={3}>
        {(view) => (
          <div data-testid="group-mapping">
            <p className="muted small">
              People signing in through the identity provider get what their groups match here, and lose it when no rule gives it any more (at their next sign-in, or for everyone when
              the mapping is saved). Memberships and roles given by hand are never taken back.
            </p>
            {rules.length === 0 ? (
              <Empty title="No rules yet: the identity provider's groups give no access" />
            ) : (
              <ol style={{ listStyle: "none", padding: 0 }} data-testid="mapping-rows">
                {rules.map((rule, i) => (
                  <MappingRow
                    key={i}
                    rule={rule}
                    index={i}
                    teams={teams}
                    matches={matches[i] ?? null}
                    badField={badFieldOf(i)}
                    disabled={busy}
                    onChange={(r) => edit(rules.map((x, j) => (j === i ? r : x)))}
                    onRemove={() => edit(rules.filter((_, j) => j !== i))}
                  />
                ))}
              </ol>
            )}
            <div className="form-actions">
              <button type="button" className="btn" disabled={busy} onClick={() => edit([...rules, { pattern: "", grant: "team_member", team: "" }])}>Add rule</button>
              <button type="button" className="btn" disabled={busy} onClick={onPreview} data-testid="mapping-preview-button">Preview</button>
              <button type="button" className="btn btn-primary" disabled={busy} onClick={onSave} data-testid="mapping-save">Save</button>
            </div>
            {error && Object.keys(error.fields).length > 0 ? (
              <ul className="form-error" role="alert" data-testid="mapping-errors">
                {Object.entries(error.fields).map(([field, message]) => (
                  <li key={field}>{mappingFieldName(field)}: {message}</li>
                ))}
              </ul>
            ) : (
              <FieldErrors error={error} />
            )}
            {preview && (
              <div data-testid="mapping-preview">
                <h3 className="small">If saved (nothing saved yet)</h3>
                <ul>
                  {changeSentences(preview.changes ?? []).map((s) => (
                    <li key={s}>{s}</li>
                  ))}
                </ul>
                {(preview.people ?? []).length > 0 && (
                  <details>
                    <summary className="small">Person by person</summary>
                    <ul className="small">
                      {(preview.people ?? []).map((p) => (
                        <li key={p.username}>
                          {p.username}: {p.changes.map((c) => `${c.action} ${GRANT_LABEL[c.grant].toLowerCase()}${c.team ? ` in ${c.team}` : ""}`).join("; ")}
                        </li>
                      ))}
                    </ul>
                  </details>
                )}
              </div>
            )}
            {done && (
              <div role="status" data-testid="mapping-saved">
                <p>Saved, and everyone the directory knows re-synced:</p>
                <ul>
                  {done.map((s) => (
                    <li key={s}>{s}</li>
                  ))}
                </ul>
              </div>
            )}
            <p className="muted small" data-testid="directory-groups">
              {view.groups.length === 0
                ? "No directory groups known yet: they arrive with sign-ins and SCIM."
                : `Directory groups (active members): ${view.groups.map((g) => `${g.name} (${g.members})`).join(", ")}`}
            </p>
          </div>
        )}
      </Async>
    </Card>
  );
}

function SourceTag({ source, origin }: { source: string | null; origin: string | null }) {
  if (!source) return null;
  return (
    <span className={`badge${source === "directory" ? " badge-info" : ""}`} data-testid="source" title={origin ? `from ${origin}` : "given by hand"}>
      {source}
    </span>
  );
}

function PeopleCard({ version }: { version: number }) {
  const [q, setQ] = useState("");
  const [query, setQuery] = useState("");
  const [page, setPage] = useState(1);
  const state = useApi<PeoplePage>(`people?q=${encodeURIComponent(query)}&page=${page}`);
  const { reload } = state;
  useEffect(() => {
    if (version > 0) reload(); // the mapping was saved: memberships moved
  }, [version, reload]);
  const [refusal, setRefusal] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  const write = async (path: string, method: "PUT" | "PATCH" | "DELETE", body?: unknown) => {
    setBusy(true);
    setRefusal(null);
    try {
      await apiFetch(path, { method, body });
      state.reload();
    } catch (err) {
      setRefusal(errorOf(err));
    } finally {
      setBusy(false);
    }
  };
  const person = (p: PersonRow) => `people/${encodeURIComponent(p.username)}`;
  const search = (e: FormEvent) => {
    e.preventDefault();
    setPage(1);
    setQuery(q.trim());
  };

  return (
    <Card title="People" actions={<span className="muted small">directory: given by the group mapping · local: given by hand</span>}>
      <form className="field-row" onSubmit={search} role="search">
        <input aria-label="Find people" className="input" placeholder="name, username or email" value={q} onChange={(e) => setQ(e.target.value)} />
        <button type="submit" className="btn">Find</button>
      </form>
      {refusal && (
        <div className="form-error" role="alert" data-testid="people-error">
          {refusal.message}
        </div>
      )}
      <Async state={state} loadingRows={4} isEmpty={(d) => d.people.length === 0} empty={<Empty title="Nobody found" />}>
        {(d) => (
          <>
            <table className="table table-dense" data-testid="people">
              <caption className="visually-hidden">People, their teams and roles, and where each comes from</caption>
              <thead>
                <tr>
                  <th scope="col">Person</th>
                  {d.can_edit_flags && <th scope="col">Organization roles</th>}
                  <th scope="col">Teams</th>
                  {d.can_edit_flags && <th scope="col">Directory groups</th>}
                </tr>
              </thead>
              <tbody>
                {d.people.map((p) => (
                  <PersonLine key={p.username} person={p} page={d} busy={busy} write={(path, method, body) => write(`${person(p)}${path}`, method, body)} />
                ))}
              </tbody>
            </table>
            {d.count > d.page_size && (
              <div className="form-actions">
                <button type="button" className="btn btn-small" disabled={page <= 1} onClick={() => setPage(page - 1)}>Previous</button>
                <span className="muted small">page {d.page} of {Math.ceil(d.count / d.page_size)}</span>
                <button type="button" className="btn btn-small" disabled={page * d.page_size >= d.count} onClick={() => setPage(page + 1)}>Next</button>
              </div>
            )}
          </>
        )}
      </Async>
    </Card>
  );
}

function PersonLine({ person: p, page, busy, write }: {
  person: PersonRow; page: PeoplePage; busy: boolean;
  write: (path: string, method: "PUT" | "PATCH" | "DELETE", body?: unknown) => void;
}) {
  const [team, setTeam] = useState("");
  const [role, setRole] = useState<PersonMembership["role"]>("member");
  const flagLabel = { is_org_admin: "organization admin", is_finance: "finance" } as const;
  return (
    <tr data-testid={`person-${p.username}`}>
      <td>
        <strong>{p.username}</strong>
        {p.name && <span className="muted small"> · {p.name}</span>}
        {p.email && <div className="muted small">{p.email}</div>}
        <div className="muted small">
          {p.from_directory ? "from the identity provider" : "local account"}
          {!p.is_active && " · deactivated"}
          {p.synced_at && ` · synced ${formatDateTime(p.synced_at)}`}
        </div>
      </td>
      {p.flags && (
        <td>
          {p.flags.map((f) => (
            <label key={f.flag} className="nowrap" style={{ display: "block" }}>
              <input type="checkbox" aria-label={`${p.username} is ${flagLabel[f.flag]}`} checked={f.on} disabled={busy} onChange={(e) => write("", "PATCH", { [f.flag]: e.target.checked })} />{" "}
              {flagLabel[f.flag]} <SourceTag source={f.source} origin={f.origin} />
            </label>
          ))}
        </td>
      )}
      <td>
        <ul style={{ listStyle: "none", padding: 0, margin: 0 }}>
          {p.memberships.map((m) => (
            <li key={m.team} data-testid={`membership-${p.username}-${m.team}`}>
              {m.team_name}{" "}
              <select aria-label={`${p.username}'s role in ${m.team}`} className="input" value={m.role} disabled={busy} onChange={(e) => write(`/memberships/${m.team}`, "PUT", { role: e.target.value })}>
                {(["viewer", "member", "admin"] as const).map((r) => (
                  <option key={r} value={r}>{ROLE_LABEL[r]}</option>
                ))}
              </select>{" "}
              <SourceTag source={m.source} origin={m.origin} />{" "}
              <button type="button" className="btn btn-small btn-ghost" aria-label={`Remove ${p.username} from ${m.team}`} disabled={busy} onClick={() => write(`/memberships/${m.team}`, "DELETE")}>✕</button>
              {m.origin && <div className="muted small">from {m.origin}</div>}
            </li>
          ))}
        </ul>
        {page.teams.length > 0 && (
          <span className="nowrap">
            <select aria-label={`Team to add ${p.username} to`} className="input" value={team} onChange={(e) => setTeam(e.target.value)}>
              <option value="">add to team…</option>
              {page.teams.map((t) => (
                <option key={t.slug} value={t.slug}>{t.name}</option>
              ))}
            </select>{" "}
            <select aria-label={`Role for ${p.username}`} className="input" value={role} onChange={(e) => setRole(e.target.value as PersonMembership["role"])}>
              {(["viewer", "member", "admin"] as const).map((r) => (
                <option key={r} value={r}>{ROLE_LABEL[r]}</option>
              ))}
            </select>{" "}
            <button type="button" className="btn btn-small" disabled={busy || !team} onClick={() => write(`/memberships/${team}`, "PUT", { role })}>Add {p.username}</button>
          </span>
        )}
      </td>
      {p.groups && <td className="small">{p.groups.length ? p.groups.join(", ") : <span className="muted">none</span>}</td>}
    </tr>
  );
}
