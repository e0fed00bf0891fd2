// The audit log (docs/audit.md): who changed what, when, from where, before and after. Org admins
// read every entry, finance people the price and month entries; the filters live in the URL, so a
// filtered view can be linked, and the CSV link carries them.
import { useMemo, useState } from "react";
import { useSearchParams } from "react-router";

import { apiUrl } from "../api/client";
import { useApi } from "../api/hooks";
import { useSession } from "../api/session";
import { DataTable, type Column } from "../components/DataTable";
import { Async, Empty } from "../components/States";
import { TextFilter } from "../components/TextFilter";
import { Card, PageHeader } from "../components/ui";
import { formatDateTime } from "../lib/format";

export const AUDIT_API = "/api/v1/audit";

export interface AuditChange {
  field: string;
  before: unknown;
  after: unknown;
}

export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  address: string | null;
  kind: string;
  object_type: string;
  object_id: string;
  object: string;
  action: "create" | "update" | "delete";
  changes: AuditChange[];
}

export interface AuditList {
  entries: AuditEntry[];
  next: number | null;
  kinds: { kind: string; label: string }[];
}

export const AUDIT_FILTERS = ["q", "actor", "kind", "action", "object_id", "from", "to"] as const;
type FilterKey = (typeof AUDIT_FILTERS)[number];
export type AuditFilters = Record<FilterKey, string>;

export function auditFilters(params: URLSearchParams): AuditFilters {
  return Object.fromEntries(AUDIT_FILTERS.map((k) => [k, (params.get(k) ?? "").trim()])) as AuditFilters;
}

/** The query string of the filters that are set (the list's and the CSV's alike). */
export function auditQuery(filters: AuditFilters, cursor?: number | null): string {
  const p = new URLSearchParams();
  for (const k of AUDIT_FILTERS) if (filters[k]) p.set(k, filters[k]);
  if (cursor) p.set("cursor", String(cursor));
  const text = p.toString();
  return text ? `?${text}` : "";
}

/** A recorded value as people read it: numbers and text as they are, nothing as a dash. */
export function auditValue(value: unknown): string {
  if (value === null || value === undefined) return "—";
  if (value === "") return "(empty)";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

const ACTION_LABEL = { create: "created", update: "changed", delete: "deleted" } as const;
const ACTION_BADGE = { create: "badge-ok", update: "badge-info", delete: "badge-bad" } as const;

function Changes({ entry }: { entry: AuditEntry }) {
  if (entry.changes.length === 0) return <span className="muted">—</span>;
  return (
    <ul className="audit-changes">
      {entry.changes.map((c) => (
        <li key={c.field}>
          <span className="audit-field">{c.field}</span>: {entry.action !== "create" && <><span className="audit-before">{auditValue(c.before)}</span> → </>}
          <span className="audit-after">{entry.action === "delete" ? "(deleted)" : auditValue(c.after)}</span>
        </li>
      ))}
    </ul>
  );
}

const COLUMNS: Column<AuditEntry>[] = [
  { key: "at", header: "When", render: (e) => <time dateTime={e.at}>{formatDateTime(e.at)}</time> },
  { key: "actor", header: "Who", render: (e) => e.actor },
  { key: "address", header: "Address", render: (e) => e.address ?? <span className="muted">—</span>, priority: "low" },
  {
    key: "what",
    header: "What",
    render: (e) => (
      <span>
        <span className={`badge badge-inline ${ACTION_BADGE[e.action] ?? ""}`}>{ACTION_LABEL[e.action] ?? e.action}</span> {e.object_type} <strong>{e.object}</strong> <span className="muted small">#{e.object_id}</span>
      </span>
    ),
  },
  { key: "change", header: "Change (before → after)", render: (e) => <Changes entry={e} /> },
];

export function AuditPage() {
  const { user } = useSession();
  const [params, setParams] = useSearchParams();
  const filters = useMemo(() => auditFilters(params), [params]);
  // The pages read so far, newest first: each is the cursor it was read with (null: the first).
  const [trail, setTrail] = useState<(number | null)[]>([null]);
  const [trailFor, setTrailFor] = useState(() => auditQuery(filters));
  const query = auditQuery(filters);
  if (trailFor !== query) {
    setTrailFor(query);
    setTrail([null]);
  }
  const cursor = trail[trail.length - 1] ?? null;
  const state = useApi<AuditList>(`${AUDIT_API}${auditQuery(filters, cursor)}`);
  const set = (patch: Partial<AuditFilters>) => {
    const next = { ...filters, ...patch };
    setParams(new URLSearchParams(auditQuery(next).slice(1)), { replace: true });
  };
  const active = AUDIT_FILTERS.filter((k) => filters[k]).length;
  const kinds = state.data?.kinds ?? [];

  return (
    <div className="page">
      <PageHeader
        title="Audit log"
        subtitle={user?.is_org_admin ? "Every change to prices, policies, rules, the group mapping, roles, tokens, months and settings" : "Changes to prices and to closed months"}
        actions={
          <a className="btn" href={apiUrl(`${AUDIT_API}.csv${query}`)} download data-testid="audit-csv" title="Every entry that matches these filters, as CSV (one row per changed field)">
            Download CSV
          </a>
        }
      />
      <Card>
        <form className="filters" role="search" aria-label="Filter the audit log" onSubmit={(e) => e.preventDefault()}>
          <TextFilter id="a-q" label="Search" value={filters.q} placeholder="Name, person or value…" onCommit={(v) => set({ q: v })} />
          <TextFilter id="a-actor" label="Who" value={filters.actor} placeholder="username, SCIM, system…" onCommit={(v) => set({ actor: v })} />
          <label className="filter" htmlFor="a-kind">
            <span className="filter-label">What</span>
            <select id="a-kind" className="select" value={filters.kind} onChange={(e) => set({ kind: e.target.value })}>
              <option value="">Everything</option>
              {filters.kind && !kinds.some((k) => k.kind === filters.kind) && <option value={filters.kind}>{filters.kind}</option>}
              {kinds.map((k) => (
                <option key={k.kind} value={k.kind}>
                  {k.label}
                </option>
              ))}
            </select>
          </label>
          <label className="filter" htmlFor="a-action">
            <span className="filter-label">Action</span>
            <select id="a-action" className="select" value={filters.action} onChange={(e) => set({ action: e.target.value })}>
              <option value="">Any</option>
              <option value="create">created</option>
              <option value="update">changed</option>
              <option value="delete">deleted</option>
            </select>
          </label>
          <TextFilter id="a-object" label="Object id" value={filters.object_id} placeholder="id" onCommit={(v) => set({ object_id: v })} />
          <label className="filter" htmlFor="a-from" title="From this day (UTC)">
            <span className="filter-label">From</span>
            <input id="a-from" className="input" type="date" value={filters.from} max={filters.to || undefined} onChange={(e) => set({ from: e.target.value })} />
          </label>
          <label className="filter" htmlFor="a-to" title="…to this day, included (UTC)">
            <span className="filter-label">To</span>
            <input id="a-to" className="input" type="date" value={filters.to} min={filters.from || undefined} onChange={(e) => set({ to: e.target.value })} />
          </label>
          {active > 0 && (
            <button type="button" className="btn btn-ghost filter-clear" onClick={() => setParams(new URLSearchParams(), { replace: true })}>
              Clear filters
            </button>
          )}
        </form>
        <Async
          state={state}
          loadingRows={8}
          isEmpty={(d) => d.entries.length === 0 && trail.length === 1}
          empty={<Empty title={active ? "No entries match these filters" : "No changes recorded yet"}>{active ? "Loosen a filter or clear them." : "Changes appear here as people make them."}</Empty>}
        >
          {(d) => (
            <div className={state.loading ? "is-refreshing" : undefined}>
              <DataTable caption="Audit log" columns={COLUMNS} rows={d.entries} rowKey={(e) => String(e.id)} testId="audit-table" dense />
              <nav className="pager" aria-label="Pages">
                <span className="muted" data-testid="audit-page">
                  Page {trail.length}, newest first
                </span>
                <button type="button" className="btn btn-small" disabled={trail.length <= 1} onClick={() => setTrail((t) => t.slice(0, -1))}>
                  Newer
                </button>
                <button type="button" className="btn btn-small" disabled={d.next === null} onClick={() => setTrail((t) => [...t, d.next])}>
                  Older
                </button>
              </nav>
            </div>
          )}
        </Async>
      </Card>
    </div>
  );
}
