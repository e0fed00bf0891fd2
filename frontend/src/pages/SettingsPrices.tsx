// Settings → Price book: add, edit and delete prices (organization admins), and the audit trail of
// every change. The API decides who may write; the UI only hides the controls it would refuse.

import { useEffect, useId, useRef, useState, type FormEvent, type ReactNode } from "react";

import { apiFetch, ApiError } from "../api/client";
import { useApi, type ApiState } from "../api/hooks";
import { isAdmin, useSession } from "../api/session";
import type { GpuSpec, PriceAuditRow, PriceEntry, PriceSnapshot } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Dialog } from "../components/Dialog";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card } from "../components/ui";
import { formatDate, formatDateTime, formatUsdPrice, tierLabel } from "../lib/format";

const PRICES = "/api/v1/pricing/prices";
const AUDIT = "/api/v1/pricing/audit";
/** How many changes the audit trail shows (the API answers up to 500, newest first). */
export const AUDIT_ROWS = 50;

function asApiError(err: unknown): ApiError {
  return err instanceof ApiError ? err : new ApiError(0, "client", String(err));
}


/** The API refuses a change that reprices a closed finance month until it is confirmed (409). */
export function isClosedMonthRefusal(err: unknown): err is ApiError {
  return err instanceof ApiError && err.status === 409 && err.code === "closed_month";
}

/** The refusal in words, with the choice: go ahead (the closed months keep their figures) or not. */
export function ClosedMonthWarning({ message, busy, onConfirm, onCancel }: { message: string; busy: boolean; onConfirm: () => void; onCancel: () => void }) {
  return (
    <div className="callout callout-block confirm" role="alert" data-testid="closed-month-warning">
      <p>
        <strong>This change reaches into a closed month.</strong> {message.replace(/\s*Send confirm_closed=1 to go ahead\.?$/, "")}
      </p>
      <span className="confirm-actions">
        <button type="button" className="btn btn-primary" disabled={busy} onClick={onConfirm} data-testid="closed-month-confirm">
          Change anyway
        </button>
        <button type="button" className="btn btn-ghost" disabled={busy} onClick={onCancel}>
          Don’t change
        </button>
      </span>
    </div>
  );
}

/** "H100-SXM · aws · us-east-1 · on-demand · from Jan 1, 2026": which price a control acts on. */
export function priceLabel(p: PriceEntry): string {
  return [p.gpu, p.provider || "any provider", p.region || "any region", tierLabel(p.tier), `from ${formatDate(p.effective_from)}`].join(" · ");
}

/** The UTC day of an ISO time as a date input holds it ("" for none). */
export function isoDay(iso: string | null | undefined): string {
  if (!iso) return "";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toISOString().slice(0, 10);
}

export function PricesCard() {
  const { user } = useSession();
  const admin = isAdmin(user);
  // Finance reads the price book and its audit trail (read-only), as everyone reads the waste model.
  const finance = !admin && !!user?.is_finance;
  const state = useApi<PriceEntry[]>(PRICES);
  const gpus = useApi<GpuSpec[]>("/api/v1/pricing/gpus");
  const audit = useApi<PriceAuditRow[]>(admin || finance ? AUDIT : null);
  const [editing, setEditing] = useState<PriceEntry | null>(null);
  const [deleting, setDeleting] = useState<PriceEntry | null>(null);
  const [notice, setNotice] = useState<{ text: string; focus: boolean } | null>(null);
  const noticeRef = useRef<HTMLDivElement>(null);

  // After a delete the row (and the button that opened the dialog) is gone: focus the notice instead.
  useEffect(() => {
    if (notice?.focus) noticeRef.current?.focus();
  }, [notice]);

  const { reload: reloadPrices } = state;
  const { reload: reloadAudit } = audit;
  function changed(text: string, focus = false) {
    setNotice({ text, focus });
    reloadPrices();
    reloadAudit();
  }

  const columns: Column<PriceEntry>[] = [
    { key: "gpu", header: "GPU", render: (p) => p.gpu },
    { key: "provider", header: "Provider", render: (p) => p.provider || <span className="muted">any</span> },
    { key: "region", header: "Region", render: (p) => p.region || <span className="muted">any</span> },
    { key: "tier", header: "Tier", render: (p) => tierLabel(p.tier) },
    { key: "usd", header: "$/GPU-hour", align: "right", render: (p) => formatUsdPrice(p.usd_per_gpu_hour) },
    { key: "from", header: "From", render: (p) => formatDate(p.effective_from) },
    { key: "to", header: "To", render: (p) => (p.effective_to ? formatDate(p.effective_to) : <span className="muted">open</span>) },
    {
      key: "note",
      header: "Note",
      render: (p) =>
        p.is_example ? (
          <span className="badge badge-warn" title={p.note || undefined}>
            example
          </span>
        ) : (
          p.note || ""
        ),
    },
  ];
  if (admin) {
    columns.push({
      key: "actions",
      header: <span className="visually-hidden">Actions</span>,
      align: "right",
      render: (p) => (
        <span className="row-actions">
          <button type="button" className="btn btn-small" aria-label={`Edit price ${priceLabel(p)}`} onClick={() => setEditing(p)}>
            Edit
          </button>
          <button type="button" className="btn btn-small btn-danger" aria-label={`Delete price ${priceLabel(p)}`} onClick={() => setDeleting(p)}>
            Delete
          </button>
        </span>
      ),
    });
  }

  return (
    <>
      {admin && <AddPriceCard gpus={gpus.data ?? []} onAdded={(gpu) => changed(`Added a price for ${gpu}.`)} />}
      <Card
        title="Price book"
        actions={
          <span className="card-links">
            {!admin && <span className="muted small">read-only: organization admins change prices</span>}
            <a className="btn btn-small" href={`${PRICES}.csv`}>
              Export CSV
            </a>
          </span>
        }
      >
        {notice && (
          <div ref={noticeRef} className="callout callout-ok" role="status" tabIndex={-1} data-testid="price-notice">
            {notice.text}
          </div>
        )}
        <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No prices yet">Runs on GPUs without a price are counted at $0.</Empty>}>
          {(d) => <DataTable caption="Price book" dense rows={d} rowKey={(p) => String(p.id)} columns={columns} testId="price-book" />}
        </Async>
      </Card>
      {admin && <PriceAuditCard state={audit} />}
      {finance &&
        (audit.error?.status === 403 ? (
          <Card title="Audit trail">
            <p className="muted" data-testid="audit-closed">
              Read-only for finance, but the server keeps the price book's audit trail for organization admins only: ask one for it, or for read access.
            </p>
          </Card>
        ) : (
          <PriceAuditCard state={audit} />
        ))}
      {editing && (
        <PriceEditDialog
          price={editing}
          onClose={() => setEditing(null)}
          onSaved={(p) => {
            setEditing(null);
            changed(`Saved ${priceLabel(p)}.`);
          }}
        />
      )}
      {deleting && (
        <PriceDeleteDialog
          price={deleting}
          onClose={() => setDeleting(null)}
          onDeleted={() => {
            const p = deleting;
            setDeleting(null);
            changed(`Deleted ${priceLabel(p)}.`, true);
          }}
        />
      )}
    </>
  );
}

function AddPriceCard({ gpus, onAdded }: { gpus: GpuSpec[]; onAdded: (gpu: string) => void }) {
  const [form, setForm] = useState({ gpu: "", usd_per_gpu_hour: "", provider: "", region: "", tier: "on_demand", effective_from: "", note: "" });
  const [error, setError] = useState<ApiError | null>(null);
  const [closed, setClosed] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function add(e: FormEvent | null, confirm = false) {
    e?.preventDefault();
    setBusy(true);
    setError(null);
    setClosed(null);
    try {
      const body: Record<string, string> = { ...form };
      if (!body.effective_from) delete body.effective_from;
      else body.effective_from = new Date(`${body.effective_from}T00:00:00Z`).toISOString();
      await apiFetch(confirm ? `${PRICES}?confirm_closed=1` : PRICES, { method: "POST", body });
      setForm((f) => ({ ...f, usd_per_gpu_hour: "", note: "" }));
      onAdded(form.gpu);
    } catch (err) {
      if (isClosedMonthRefusal(err)) setClosed(err.message);
      else setError(asApiError(err));
    } finally {
      setBusy(false);
    }
  }

  return (
    <Card title="Set a price">
      <form className="inline-form" onSubmit={add}>
        <label className="field" htmlFor="price-gpu">
          <span>GPU</span>
          <select id="price-gpu" className="select" value={form.gpu} required onChange={(e) => setForm({ ...form, gpu: e.target.value })}>
            <option value="">Choose…</option>
            {gpus.map((g) => (
              <option key={g.key} value={g.key}>
                {g.key}
              </option>
            ))}
          </select>
        </label>
        <label className="field" htmlFor="price-usd">
          <span>$ / GPU-hour</span>
          <input id="price-usd" className="input input-num" type="number" min={0} step={0.0001} required value={form.usd_per_gpu_hour} onChange={(e) => setForm({ ...form, usd_per_gpu_hour: e.target.value })} />
        </label>
        <label className="field" htmlFor="price-provider">
          <span>Provider</span>
          <input id="price-provider" className="input" placeholder="any" value={form.provider} onChange={(e) => setForm({ ...form, provider: e.target.value })} />
        </label>
        <label className="field" htmlFor="price-region">
          <span>Region</span>
          <input id="price-region" className="input" placeholder="any" value={form.region} onChange={(e) => setForm({ ...form, region: e.target.value })} />
        </label>
        <label className="field" htmlFor="price-tier">
          <span>Tier</span>
          <select id="price-tier" className="select" value={form.tier} onChange={(e) => setForm({ ...form, tier: e.target.value })}>
            <option value="on_demand">on-demand</option>
            <option value="reserved">reserved</option>
            <option value="spot">spot</option>
          </select>
        </label>
        <label className="field" htmlFor="price-from">
          <span>Effective from</span>
          <input id="price-from" className="input" type="date" value={form.effective_from} onChange={(e) => setForm({ ...form, effective_from: e.target.value })} />
        </label>
        <button className="btn btn-primary" type="submit" disabled={busy}>
          {busy ? "Adding…" : "Add price"}
        </button>
      </form>
      {closed && <ClosedMonthWarning message={closed} busy={busy} onConfirm={() => add(null, true)} onCancel={() => setClosed(null)} />}
      <FieldErrors error={error} />
    </Card>
  );
}

/** The API's message for one field, under its input (the input points at it with aria-describedby). */
function FieldError({ id, message }: { id: string; message: string | undefined }) {
  if (!message) return null;
  return (
    <span className="field-error" id={id}>
      {message}
    </span>
  );
}

const EDIT_FIELDS = ["usd_per_gpu_hour", "effective_to", "note", "is_example"] as const;

/** Edits what the API lets change on a price; sends only the fields that changed. */
export function PriceEditDialog({ price, onClose, onSaved }: { price: PriceEntry; onClose: () => void; onSaved: (p: PriceEntry) => void }) {
  const [initial] = useState(() => ({ usd: String(Number(price.usd_per_gpu_hour)), to: isoDay(price.effective_to), note: price.note ?? "", example: price.is_example }));
  const [form, setForm] = useState(initial);
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const uid = useId();
  const ids = Object.fromEntries(EDIT_FIELDS.map((f) => [f, `${uid}-${f}`])) as Record<(typeof EDIT_FIELDS)[number], string>;
  const errorOf = (field: (typeof EDIT_FIELDS)[number]) => error?.fields[field];
  /** aria-invalid and aria-describedby (hint, then the API's message) for one input. */
  const a11y = (field: (typeof EDIT_FIELDS)[number], hint?: string) => {
    const described = [hint, errorOf(field) ? `${ids[field]}-error` : undefined].filter(Boolean).join(" ");
    return { "aria-invalid": errorOf(field) ? (true as const) : undefined, "aria-describedby": described || undefined };
  };

  const [closed, setClosed] = useState<string | null>(null);

  async function save(e: FormEvent | null, confirm = false) {
    e?.preventDefault();
    const body: Record<string, unknown> = {};
    const usd = form.usd.trim();
    if (usd === "" || Number(usd) !== Number(initial.usd)) body.usd_per_gpu_hour = usd;
    if (form.to !== initial.to) body.effective_to = form.to ? `${form.to}T00:00:00Z` : null;
    if (form.note !== initial.note) body.note = form.note;
    if (form.example !== initial.example) body.is_example = form.example;
    if (Object.keys(body).length === 0) {
      onClose();
      return;
    }
    setBusy(true);
    setError(null);
    setClosed(null);
    try {
      onSaved(await apiFetch<PriceEntry>(`${PRICES}/${price.id}${confirm ? "?confirm_closed=1" : ""}`, { method: "PATCH", body }));
    } catch (err) {
      if (isClosedMonthRefusal(err)) setClosed(err.message);
      else setError(asApiError(err));
      setBusy(false);
    }
  }

  return (
    <Dialog title="Edit price" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="muted small dialog-text" id={`${uid}-what`}>
        {priceLabel(price)}
      </p>
      <form className="dialog-form" onSubmit={save} aria-busy={busy}>
        <div className="field">
          <label htmlFor={ids.usd_per_gpu_hour}>$ / GPU-hour</label>
          <input
            id={ids.usd_per_gpu_hour}
            data-autofocus
            className={`input input-num${errorOf("usd_per_gpu_hour") ? " is-invalid" : ""}`}
            type="number"
            min={0}
            step={0.0001}
            required
            value={form.usd}
            onChange={(e) => setForm({ ...form, usd: e.target.value })}
            {...a11y("usd_per_gpu_hour")}
          />
          <FieldError id={`${ids.usd_per_gpu_hour}-error`} message={errorOf("usd_per_gpu_hour")} />
        </div>
        <div className="field">
          <label htmlFor={ids.effective_to}>Effective to</label>
          <input
            id={ids.effective_to}
            className={`input${errorOf("effective_to") ? " is-invalid" : ""}`}
            type="date"
            value={form.to}
            onChange={(e) => setForm({ ...form, to: e.target.value })}
            {...a11y("effective_to", `${ids.effective_to}-hint`)}
          />
          <span className="field-hint" id={`${ids.effective_to}-hint`}>
            Midnight UTC; empty: still in force
          </span>
          <FieldError id={`${ids.effective_to}-error`} message={errorOf("effective_to")} />
        </div>
        <div className="field">
          <label htmlFor={ids.note}>Note</label>
          <input
            id={ids.note}
            className={`input${errorOf("note") ? " is-invalid" : ""}`}
            maxLength={200}
            value={form.note}
            onChange={(e) => setForm({ ...form, note: e.target.value })}
            {...a11y("note")}
          />
          <FieldError id={`${ids.note}-error`} message={errorOf("note")} />
        </div>
        <div className="check">
          <input id={ids.is_example} type="checkbox" checked={form.example} onChange={(e) => setForm({ ...form, example: e.target.checked })} {...a11y("is_example")} />
          <label htmlFor={ids.is_example}>Example price (a shipped placeholder to replace)</label>
        </div>
        <FieldError id={`${ids.is_example}-error`} message={errorOf("is_example")} />
        {closed && <ClosedMonthWarning message={closed} busy={busy} onConfirm={() => save(null, true)} onCancel={() => setClosed(null)} />}
        <FieldErrors error={error} />
        <div className="form-actions">
          <button type="submit" className="btn btn-primary" disabled={busy}>
            {busy ? "Saving…" : "Save"}
          </button>
          <button type="button" className="btn btn-ghost" disabled={busy} onClick={onClose}>
            Cancel
          </button>
        </div>
      </form>
    </Dialog>
  );
}

/** Asks before deleting; Cancel has the focus, so Enter on an unexpected dialog deletes nothing. */
export function PriceDeleteDialog({ price, onClose, onDeleted }: { price: PriceEntry; onClose: () => void; onDeleted: () => void }) {
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  const uid = useId();

  const [closed, setClosed] = useState<string | null>(null);

  async function remove(confirm = false) {
    setBusy(true);
    setError(null);
    setClosed(null);
    try {
      await apiFetch(`${PRICES}/${price.id}${confirm ? "?confirm_closed=1" : ""}`, { method: "DELETE" });
      onDeleted();
    } catch (err) {
      if (isClosedMonthRefusal(err)) setClosed(err.message);
      else setError(asApiError(err));
      setBusy(false);
    }
  }

  return (
    <Dialog title="Delete price?" role="alertdialog" onClose={onClose} busy={busy} describedBy={`${uid}-what`}>
      <p className="dialog-text" id={`${uid}-what`}>
        {priceLabel(price)} at {formatUsdPrice(price.usd_per_gpu_hour)} per GPU-hour
        {price.effective_to ? ` until ${formatDate(price.effective_to)}` : ""}. Analyses of runs on {price.gpu} are recomputed without it; the
        audit trail keeps a copy.
      </p>
      {closed && <ClosedMonthWarning message={closed} busy={busy} onConfirm={() => remove(true)} onCancel={() => setClosed(null)} />}
      <FieldErrors error={error} />
      <div className="form-actions" aria-busy={busy}>
        <button type="button" className="btn btn-danger-solid" disabled={busy} onClick={() => remove()}>
          {busy ? "Deleting…" : "Delete price"}
        </button>
        <button type="button" className="btn btn-ghost" data-autofocus disabled={busy} onClick={onClose}>
          Cancel
        </button>
      </div>
    </Dialog>
  );
}

const ACTION_BADGE: Record<string, string> = { create: "badge-ok", update: "badge-info", close: "", delete: "badge-bad" };

function describeChange(before: PriceSnapshot | null, after: PriceSnapshot | null): string[] {
  if (!before || !after) return [];
  const out: string[] = [];
  const day = (v: string | null | undefined) => (v ? formatDate(v) : "open");
  if ("effective_to" in after && (before.effective_to ?? null) !== (after.effective_to ?? null)) out.push(`to ${day(before.effective_to)} → ${day(after.effective_to)}`);
  if ("note" in after && (before.note ?? "") !== (after.note ?? "")) out.push("note");
  if ("is_example" in after && !!before.is_example !== !!after.is_example) out.push(after.is_example ? "marked example" : "no longer example");
  return out;
}

function PriceChangeCell({ row }: { row: PriceAuditRow }): ReactNode {
  const from = row.before ? formatUsdPrice(row.before.usd_per_gpu_hour) : "–";
  const to = row.after ? formatUsdPrice(row.after.usd_per_gpu_hour) : "–";
  const also = describeChange(row.before, row.after);
  return (
    <>
      <span className="nowrap">
        {from} → {to}
      </span>
      {also.length > 0 && <div className="cell-sub">{also.join("; ")}</div>}
    </>
  );
}

/** The latest changes to the price book: when, who, what, and the price before and after. */
export function PriceAuditCard({ state }: { state: ApiState<PriceAuditRow[]> }) {
  const shown = (d: PriceAuditRow[]) => d.slice(0, AUDIT_ROWS);
  const snap = (r: PriceAuditRow): PriceSnapshot => r.after ?? r.before ?? {};
  return (
    <Card title="Audit trail" actions={<span className="muted small">latest {AUDIT_ROWS} changes, newest first</span>}>
      <Async state={state} isEmpty={(d) => d.length === 0} empty={<Empty title="No changes yet" />}>
        {(d) => (
          // Up to 50 rows: scroll inside the card (reachable with Tab, so the keyboard can scroll it too).
          <div className="audit-scroll" role="region" aria-label="Audit trail" tabIndex={0}>
            <DataTable
              caption={`Price book audit trail, latest ${Math.min(d.length, AUDIT_ROWS)} changes`}
              dense
              testId="price-audit"
              rows={shown(d)}
              rowKey={(r) => String(r.id)}
              columns={[
                { key: "at", header: "When", render: (r) => <span className="nowrap">{formatDateTime(r.at)}</span> },
                { key: "actor", header: "Who", render: (r) => r.actor || <span className="muted">–</span> },
                { key: "action", header: "Action", render: (r) => <span className={`badge ${ACTION_BADGE[r.action] ?? ""}`}>{r.action}</span> },
                { key: "gpu", header: "GPU", render: (r) => snap(r).gpu ?? "–" },
                {
                  key: "provider",
                  header: "Provider · region",
                  render: (r) => {
                    const s = snap(r);
                    return s.provider ? [s.provider, s.region].filter(Boolean).join(" · ") : <span className="muted">any{s.region ? ` · ${s.region}` : ""}</span>;
                  },
                },
                { key: "tier", header: "Tier", render: (r) => tierLabel(snap(r).tier) },
                { key: "price", header: "$/GPU-hour", align: "right", render: (r) => <PriceChangeCell row={r} /> },
              ]}
            />
          </div>
        )}
      </Async>
    </Card>
  );
}
