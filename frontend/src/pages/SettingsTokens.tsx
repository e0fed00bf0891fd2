import { useId, useState, type FormEvent, type ReactNode } from "react";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { ApiTokenRow, SessionUser, TokenRotated } from "../api/types";
import { DataTable } from "../components/DataTable";
import { Dialog } from "../components/Dialog";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card, Segmented } from "../components/ui";
import { formatDate, formatDateTime } from "../lib/format";

type TokenKindChoice = "project" | "personal" | "node" | "scim";

/** The token kinds this person may create: personal always; project tokens for the projects they
 * administer (organization admins, team admins); node and SCIM tokens for organization admins only. */
export function tokenKindsFor(user: SessionUser | null | undefined): TokenKindChoice[] {
  const kinds: TokenKindChoice[] = ["personal"];
  if (isAdmin(user) || !!user?.teams.some((t) => t.role === "admin")) kinds.push("project");
  if (isAdmin(user)) kinds.push("node");
  if (isAdmin(user)) kinds.push("scim"); // the identity provider's provisioning (docs/identity.md)
  return kinds;
}

const TOKEN_KIND_LABEL: Record<TokenKindChoice, string> = {
  personal: "Personal (read)",
  project: "Project (ingest)",
  node: "Node (collector)",
  scim: "SCIM (identity provider)",
};

/** Expiry choices of a new token, in days; "" leaves it to the server's default (PHANTOMHUB_TOKEN_DEFAULT_EXPIRY_DAYS). */
export const EXPIRY_CHOICES: { value: string; label: string }[] = [
  { value: "", label: "Organization default" },
  { value: "7", label: "7 days" },
  { value: "30", label: "30 days" },
  { value: "90", label: "90 days" },
  { value: "180", label: "180 days" },
  { value: "365", label: "1 year" },
  { value: "730", label: "2 years" },
];

/** How long a rotated token keeps working beside its successor, in seconds; "" is the server's default. */
export const OVERLAP_CHOICES: { value: string; label: string }[] = [
  { value: "", label: "Organization default (usually 1 day)" },
  { value: "0", label: "None: stop the old token now" },
  { value: "3600", label: "1 hour" },
  { value: "86400", label: "1 day" },
  { value: "604800", label: "7 days" },
];

const STATE_BADGE: Record<string, string> = { active: "badge-ok", expiring: "badge-warn", rotated: "badge-info", expired: "badge-bad", revoked: "badge-bad" };

/** A token's state as Settings words it: the badge, and when it ends (or ended) where that matters. */
export function tokenStateText(t: ApiTokenRow, now: Date = new Date()): string {
  const ends = t.ends_at ? formatDateTime(t.ends_at) : "";
  const past = t.ends_at ? new Date(t.ends_at).getTime() <= now.getTime() : false;
  switch (t.state) {
    case "expiring":
      return `expires ${ends}`;
    case "rotated":
      return past ? `rotated; stopped ${ends}` : `rotated; works until ${ends}`;
    case "expired":
      return `expired ${ends}`;
    case "revoked":
      return `revoked ${t.revoked_at ? formatDateTime(t.revoked_at) : ""}`.trim();
    default:
      return "active";
  }
}

function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", String(err));
}

/** A token shown once: after creating or rotating it. */
function IssuedToken({ issued, note }: { issued: ApiTokenRow; note?: ReactNode }) {
  return (
    <div className="callout callout-ok" role="status" data-testid="issued-token">
      <div>
        <strong>Copy this token now</strong>: it is shown once.{note ? <> {note}</> : null}
      </div>
      <code className="token-value">{issued.token}</code>
      <button type="button" className="btn btn-small" onClick={() => navigator.clipboard?.writeText(issued.token!)}>
        Copy
      </button>
    </div>
  );
}

export function TokensCard() {
  const { user } = useSession();
  const kinds = tokenKindsFor(user);
  const state = useApi<ApiTokenRow[]>("tokens");
  const [chosen, setKind] = useState<TokenKindChoice>("personal");
  const kind: TokenKindChoice = kinds.includes(chosen) ? chosen : "personal";
  const [project, setProject] = useState("");
  const [name, setName] = useState("");
  const [expiry, setExpiry] = useState("");
  const [hostnames, setHostnames] = useState("");
  const [issued, setIssued] = useState<{ token: ApiTokenRow; note?: ReactNode } | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const [rotating, setRotating] = useState<ApiTokenRow | null>(null);
  const [revoking, setRevoking] = useState<ApiTokenRow | null>(null);

  async function create(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const nodes = hostnames.split(/[\s,]+/).filter(Boolean);
      const body: Record<string, unknown> = { kind, name };
      if (kind === "project") body.project = project;
      if (kind === "node") body.hostnames = nodes;
      if (expiry) body.expires_in_days = Number(expiry);
      setIssued({ token: await apiFetch<ApiTokenRow>("tokens", { method: "POST", body }) });
      setName("");
      state.reload();
    } catch (err) {
      setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  }

  function rotated(answer: TokenRotated) {
    setRotating(null);
    const ends = answer.old.overlap_ends_at;
    setIssued({
      token: answer.token,
      note: ends ? (
        <>
          It replaces <code>{answer.old.prefix}…</code>, which {new Date(ends).getTime() <= Date.now() ? "stopped working" : "keeps working until"} {formatDateTime(ends)}.
        </>
      ) : undefined,
    });
    state.reload();
  }

  return (
    <>
      <Card title="New token">
        <form className="inline-form" onSubmit={create}>
          {kinds.length > 1 && <Segmented label="Token kind" value={kind} onChange={setKind} options={kinds.map((k) => ({ value: k, label: TOKEN_KIND_LABEL[k] }))} />}
          {kind === "project" && (
            <label className="field" htmlFor="token-project">
              <span>Project slug</span>
              <input id="token-project" className="input" value={project} onChange={(e) => setProject(e.target.value)} required />
            </label>
          )}
          {kind === "node" && (
            <label className="field" htmlFor="token-hostnames">
              <span>Hostnames it reports for</span>
              <input id="token-hostnames" className="input" value={hostnames} placeholder="gpu-a-17, gpu-b-*" onChange={(e) => setHostnames(e.target.value)} required />
            </label>
          )}
          <label className="field" htmlFor="token-name">
            <span>Name</span>
            <input id="token-name" className="input" value={name} maxLength={200} placeholder={kind === "personal" ? "grafana" : "training cluster"} onChange={(e) => setName(e.target.value)} required />
          </label>
          <label className="field" htmlFor="token-expiry">
            <span>Expires</span>
            <select id="token-expiry" className="select" value={expiry} onChange={(e) => setExpiry(e.target.value)}>
              {EXPIRY_CHOICES.map((c) => (
                <option key={c.value} value={c.value}>
                  {c.label}
                </option>
              ))}
            </select>
          </label>
          <button className="btn btn-primary" type="submit" disabled={busy}>
            Create token
          </button>
        </form>
        <FieldErrors error={error} />
        {issued?.token.token && <IssuedToken issued={issued.token} note={issued.note} />}
      </Card>
      <Card title="Tokens">
        <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No tokens yet" />}>
          {(d) => (
            <DataTable
              caption="API tokens"
              rows={d}
              rowKey={(t) => String(t.id)}
              columns={[
                { key: "prefix", header: "Token", render: (t) => <code>{t.prefix}…</code> },
                { key: "name", header: "Name", render: (t) => t.name || <span className="muted">–</span> },
                { key: "kind", header: "Kind", render: (t) => t.kind },
                { key: "project", header: "Project or nodes", render: (t) => t.project ?? (t.hostnames?.length ? <code>{t.hostnames.join(", ")}</code> : <span className="muted">–</span>) },
                { key: "owner", header: "Owner", render: (t) => t.owner ?? <span className="muted">–</span> },
                { key: "state", header: "State", render: (t) => <span className={`badge ${STATE_BADGE[t.state] ?? ""}`}>{tokenStateText(t)}</span> },
                { key: "created", header: "Created", render: (t) => formatDate(t.created_at) },
                { key: "expires", header: "Expires", render: (t) => (t.expires_at ? formatDateTime(t.expires_at) : <span className="muted">never</span>) },
                {
                  key: "used",
                  header: "Last used",
                  render: (t) =>
                    t.last_used_at ? (
                      <>
                        {formatDateTime(t.last_used_at)}
                        {t.last_used_address && <span className="muted"> from {t.last_used_address}</span>}
                      </>
                    ) : (
                      <span className="muted">never</span>
                    ),
                },
                {
                  key: "actions",
                  header: "",
                  align: "right",
                  render: (t) => {
                    const working = t.state === "active" || t.state === "expiring";
                    const inOverlap = t.state === "rotated" && !!t.ends_at && new Date(t.ends_at).getTime() > Date.now();
                    return (
                      <span className="row-actions">
                        {working && (
                          <button type="button" className="btn btn-small" onClick={() => setRotating(t)} aria-label={`Rotate ${t.prefix}…`}>
                            Rotate
                          </button>
                        )}
                        {(working || inOverlap) && (
                          <button type="button" className="btn btn-small btn-danger" onClick={() => setRevoking(t)} aria-label={`Revoke ${t.prefix}…`}>
                            Revoke
                          </button>
                        )}
                      </span>
                    );
                  },
                },
              ]}
            />
          )}
        </Async>
      </Card>
      {rotating && <RotateDialog token={rotating} onClose={() => setRotating(null)} onRotated={rotated} />}
      {revoking && (
        <RevokeDialog
          token={revoking}
          onClose={() => setRevoking(null)}
          onRevoked={() => {
            setRevoking(null);
            state.reload();
          }}
        />
      )}
    </>
  );
}

function RotateDialog({ token, onClose, onRotated }: { token: ApiTokenRow; onClose: () => void; onRotated: (answer: TokenRotated) => void }) {
  const uid = useId();
  const [overlap, setOverlap] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);

  async function rotate() {
    setBusy(true);
    setError(null);
    try {
      const body = overlap === "" ? {} : { overlap_s: Number(overlap) };
      onRotated(await apiFetch<TokenRotated>(`tokens/${token.id}/rotate`, { method: "POST", body }));
    } catch (err) {
      setError(asApiError(err));
      setBusy(false);
    }
  }

  return (
    <Dialog title="Rotate token?" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="dialog-text" id={`${uid}-what`}>
        A new token replaces <code>{token.prefix}…</code> ({token.name}), with the same kind, project, owner and lifetime. It is shown once. The old one keeps
        working for the overlap, so whoever uses it can move over: an agent reading its token from a file (PHANTOMHUB_TOKEN_FILE) loses nothing.
      </p>
      <label className="field" htmlFor={`${uid}-overlap`}>
        <span>Old token keeps working for</span>
        <select id={`${uid}-overlap`} className="select" value={overlap} onChange={(e) => setOverlap(e.target.value)} data-autofocus>
          {OVERLAP_CHOICES.map((c) => (
            <option key={c.value} value={c.value}>
              {c.label}
            </option>
          ))}
        </select>
      </label>
      <FieldErrors error={error} />
      <div className="form-actions" aria-busy={busy}>
        <button type="button" className="btn btn-primary" disabled={busy} onClick={rotate}>
          {busy ? "Rotating…" : "Rotate token"}
        </button>
        <button type="button" className="btn btn-ghost" disabled={busy} onClick={onClose}>
          Cancel
        </button>
      </div>
    </Dialog>
  );
}

function RevokeDialog({ token, onClose, onRevoked }: { token: ApiTokenRow; onClose: () => void; onRevoked: () => void }) {
  const uid = useId();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError | null>(null);

  async function revoke() {
    setBusy(true);
    setError(null);
    try {
      await apiFetch(`tokens/${token.id}`, { method: "DELETE" });
      onRevoked();
    } catch (err) {
      setError(asApiError(err));
      setBusy(false);
    }
  }

  return (
    <Dialog title="Revoke token?" role="alertdialog" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="dialog-text" id={`${uid}-what`}>
        <code>{token.prefix}…</code> ({token.name}) stops working now: every request with it gets 401 saying it was revoked. This cannot be undone.
      </p>
      <FieldErrors error={error} />
      <div className="form-actions" aria-busy={busy}>
        <button type="button" className="btn btn-danger-solid" disabled={busy} onClick={revoke}>
          {busy ? "Revoking…" : "Revoke token"}
        </button>
        <button type="button" className="btn btn-ghost" data-autofocus disabled={busy} onClick={onClose}>
          Cancel
        </button>
      </div>
    </Dialog>
  );
}
