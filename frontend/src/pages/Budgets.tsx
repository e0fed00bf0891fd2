// Budgets (docs/budgets.md): each budget in force in a month with its spend to date, the month-end
// forecast and its p10–p90 interval, over or within, and the recoverable dollars that would bring
// it under; the budgets themselves with their effective months; a form for those who may set them
// (org admins and finance any, a team's leads its projects'). The API decides; the UI only hides
// the controls it would refuse.
import { useState, type FormEvent } from "react";
import { Link, useSearchParams } from "react-router";

import { apiFetch, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { DataTable, type Column } from "../components/DataTable";
import { Dialog } from "../components/Dialog";
import { Async, Empty, FieldErrors } from "../components/States";
import { Card, PageHeader, Stat } from "../components/ui";
import { formatUsd, formatUsdRate } from "../lib/format";

export const BUDGETS_API = "/api/v1/planning/budgets";

export interface Budget {
  id: number;
  scope: "team" | "project";
  team: string | null;
  project: string | null;
  gpu_key: string;
  amount_usd: string;
  effective_from: string;
  effective_to: string | null;
  note: string;
  updated_at: string | null;
}

export interface BudgetForecast {
  point_usd: number;
  p10_usd: number;
  p90_usd: number;
  daily_mean_usd: number;
  daily_sd_usd: number;
  basis: "closed_days" | "live_burn";
}

export interface BudgetStatusRow {
  budget: Budget;
  month: string;
  state: "open" | "closed" | "ahead";
  budget_usd: number;
  spent_usd: number;
  spent_share: number | null;
  forecast: BudgetForecast | null;
  over: boolean;
  over_by_usd: number;
  burn_usd_per_hour: number;
  live_runs: number;
  recoverable_usd: number;
  recoverable_ahead_usd: number;
  cut_usd: number;
  cut_enough: boolean;
}

export interface MaySet {
  any: boolean;
  teams: string[];
}

export interface BudgetStatusPage {
  month: { start: string; end: string; label: string };
  as_of: string;
  rows: BudgetStatusRow[];
  may_set: MaySet;
}

export interface BudgetList {
  budgets: Budget[];
  may_set: MaySet;
  max_amount_usd: string;
}

/** "team nlp", "project llm-pretrain · H100-SXM": which budget a row or a control is about. */
export function budgetLabel(b: Budget): string {
  const target = b.scope === "team" ? `team ${b.team}` : `project ${b.project}`;
  return b.gpu_key ? `${target} · ${b.gpu_key}` : target;
}

function span(b: Budget): string {
  return `${b.effective_from} → ${b.effective_to ?? "open-ended"}`;
}

/** This month (UTC) as YYYY-MM. */
export function thisMonth(now: Date = new Date()): string {
  return now.toISOString().slice(0, 7);
}

/** Whether the caller may set this budget: any (org admin, finance), or a project of a team they lead. */
export function maySetBudget(may: MaySet, b: Pick<Budget, "scope" | "team">): boolean {
  return may.any || (b.scope === "project" && !!b.team && may.teams.includes(b.team));
}

/** Over (by how much) or within. */
export function verdict(row: BudgetStatusRow): string {
  if (!row.forecast) return "not begun";
  return row.over ? `over by ${formatUsd(row.over_by_usd)}` : "within budget";
}

/** What recovering the recoverable dollars of the rest of the month would do to a forecast over budget. */
export function cutText(row: BudgetStatusRow): string {
  if (!row.over) return "";
  if (row.cut_usd <= 0) return "nothing recoverable ahead";
  return row.cut_enough
    ? `recovering ${formatUsd(row.cut_usd)} of recoverable spend brings it under`
    : `all ${formatUsd(row.cut_usd)} recoverable ahead is not enough`;
}

function StatusTable({ page, testId = "budget-status" }: { page: BudgetStatusPage; testId?: string }) {
  const columns: Column<BudgetStatusRow>[] = [
    { key: "budget", header: "Budget", render: (r) => budgetLabel(r.budget) },
    { key: "amount", header: "Budget $", align: "right", render: (r) => formatUsd(r.budget_usd) },
    { key: "spent", header: "Spent to date", align: "right", render: (r) => formatUsd(r.spent_usd) },
    {
      key: "forecast",
      header: "Month-end forecast (p10–p90)",
      title: "Month-end forecast",
      align: "right",
      render: (r) =>
        r.forecast ? (
          <>
            <strong>{formatUsd(r.forecast.point_usd)}</strong>
            <br />
            <span className="muted small" title="80% of months like this one end inside this interval">
              {formatUsd(r.forecast.p10_usd)} – {formatUsd(r.forecast.p90_usd)}
            </span>
          </>
        ) : (
          <span className="muted">—</span>
        ),
    },
    {
      key: "burn",
      header: "Live burn",
      align: "right",
      priority: "low",
      render: (r) => (r.live_runs ? `${formatUsdRate(r.burn_usd_per_hour)} · ${r.live_runs} run${r.live_runs === 1 ? "" : "s"}` : <span className="muted">none</span>),
    },
    {
      key: "status",
      header: "Status",
      render: (r) => (
        <span className={`badge ${r.over ? "badge-warn" : "badge-ok"}`} data-testid={`budget-verdict-${r.budget.id}`}>
          {verdict(r)}
        </span>
      ),
    },
    { key: "cut", header: "To bring it under", render: (r) => cutText(r) },
  ];
  return <DataTable caption={`Budgets in force in ${page.month.label}`} rows={page.rows} rowKey={(r) => String(r.budget.id)} columns={columns} testId={testId} />;
}

function Totals({ rows }: { rows: BudgetStatusRow[] }) {
  const over = rows.filter((r) => r.over);
  return (
    <div className="stats">
      <Stat label="Budgets in force" value={String(rows.length)} />
      <Stat label="Forecast over budget" value={String(over.length)} tone={over.length ? "warn" : undefined} testId="budgets-over" />
      <Stat label="Recoverable ahead that would bring them under" value={formatUsd(over.reduce((s, r) => s + r.cut_usd, 0))} />
    </div>
  );
}

interface FormState {
  scope: "team" | "project";
  target: string;
  gpu_key: string;
  amount_usd: string;
  effective_from: string;
  effective_to: string;
  note: string;
}

/** The body the API takes: the target under its scope's name, an empty end as open-ended. */
export function budgetBody(form: FormState): Record<string, string | null> {
  return {
    scope: form.scope,
    [form.scope]: form.target.trim(),
    gpu_key: form.gpu_key.trim(),
    amount_usd: form.amount_usd,
    effective_from: form.effective_from,
    effective_to: form.effective_to || null,
    note: form.note,
  };
}

function SetBudgetCard({ may, month, onSaved }: { may: MaySet; month: string; onSaved: (text: string) => void }) {
  const [form, setForm] = useState<FormState>({ scope: may.any ? "team" : "project", target: "", gpu_key: "", amount_usd: "", effective_from: month, effective_to: "", note: "" });
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);

  async function save(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const made = await apiFetch<Budget>(BUDGETS_API, { method: "POST", body: budgetBody(form) });
      setForm((f) => ({ ...f, target: "", amount_usd: "", note: "" }));
      onSaved(`Set a budget for ${budgetLabel(made)}.`);
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }

  return (
    <Card title="Set a budget">
      {!may.any && <p className="muted small">As a team lead you set the budgets of your teams’ projects ({may.teams.join(", ")}); the team budget is set by finance or an organization admin.</p>}
      <form className="inline-form" onSubmit={save} data-testid="budget-form">
        <label className="field" htmlFor="budget-scope">
          <span>Scope</span>
          <select id="budget-scope" className="select" value={form.scope} onChange={(e) => setForm({ ...form, scope: e.target.value as FormState["scope"] })}>
            {may.any && <option value="team">team</option>}
            <option value="project">project</option>
          </select>
        </label>
        <label className="field" htmlFor="budget-target">
          <span>{form.scope === "team" ? "Team (slug)" : "Project (slug)"}</span>
          <input id="budget-target" className="input" required value={form.target} onChange={(e) => setForm({ ...form, target: e.target.value })} />
        </label>
        <label className="field" htmlFor="budget-gpu">
          <span>GPU model</span>
          <input id="budget-gpu" className="input" placeholder="every GPU" value={form.gpu_key} onChange={(e) => setForm({ ...form, gpu_key: e.target.value })} />
        </label>
        <label className="field" htmlFor="budget-amount">
          <span>$ / month</span>
          <input id="budget-amount" className="input input-num" type="number" min={0} step={0.01} required value={form.amount_usd} onChange={(e) => setForm({ ...form, amount_usd: e.target.value })} />
        </label>
        <label className="field" htmlFor="budget-from">
          <span>From month</span>
          <input id="budget-from" className="input" type="month" required value={form.effective_from} onChange={(e) => setForm({ ...form, effective_from: e.target.value })} />
        </label>
        <label className="field" htmlFor="budget-to">
          <span>To month</span>
          <input id="budget-to" className="input" type="month" value={form.effective_to} onChange={(e) => setForm({ ...form, effective_to: e.target.value })} />
        </label>
        <label className="field" htmlFor="budget-note">
          <span>Note</span>
          <input id="budget-note" className="input" maxLength={200} value={form.note} onChange={(e) => setForm({ ...form, note: e.target.value })} />
        </label>
        <button className="btn btn-primary" type="submit" disabled={busy}>
          {busy ? "Saving…" : "Set budget"}
        </button>
      </form>
      <FieldErrors error={error} />
    </Card>
  );
}

function EditBudgetDialog({ budget, onClose, onSaved }: { budget: Budget; onClose: () => void; onSaved: (b: Budget) => void }) {
  const [amount, setAmount] = useState(budget.amount_usd);
  const [to, setTo] = useState(budget.effective_to ?? "");
  const [error, setError] = useState<ApiError | null>(null);
  const [busy, setBusy] = useState(false);
  async function save(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      onSaved(await apiFetch<Budget>(`${BUDGETS_API}/${budget.id}`, { method: "PATCH", body: { amount_usd: amount, effective_to: to || null } }));
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    } finally {
      setBusy(false);
    }
  }
  return (
    <Dialog title={`Edit the budget of ${budgetLabel(budget)}`} onClose={onClose}>
      <form className="dialog-form" onSubmit={save}>
        <label className="field" htmlFor="budget-edit-amount">
          <span>$ / month</span>
          <input id="budget-edit-amount" className="input input-num" type="number" min={0} step={0.01} required value={amount} onChange={(e) => setAmount(e.target.value)} />
        </label>
        <label className="field" htmlFor="budget-edit-to">
          <span>To month (empty: open-ended)</span>
          <input id="budget-edit-to" className="input" type="month" value={to} onChange={(e) => setTo(e.target.value)} />
        </label>
        <FieldErrors error={error} />
        <button className="btn btn-primary" type="submit" disabled={busy}>
          {busy ? "Saving…" : "Save"}
        </button>
      </form>
    </Dialog>
  );
}

function BudgetListCard({ list, onChanged }: { list: BudgetList; onChanged: (text: string) => void }) {
  const [editing, setEditing] = useState<Budget | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  async function remove(b: Budget) {
    setError(null);
    try {
      await apiFetch(`${BUDGETS_API}/${b.id}`, { method: "DELETE" });
      onChanged(`Deleted the budget of ${budgetLabel(b)}.`);
    } catch (err) {
      setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err)));
    }
  }
  const columns: Column<Budget>[] = [
    { key: "budget", header: "Budget", render: (b) => budgetLabel(b) },
    { key: "amount", header: "$ / month", align: "right", render: (b) => formatUsd(Number(b.amount_usd)) },
    { key: "span", header: "Months", render: span },
    { key: "note", header: "Note", priority: "low", render: (b) => b.note },
    {
      key: "actions",
      header: <span className="visually-hidden">Actions</span>,
      align: "right",
      render: (b) =>
        maySetBudget(list.may_set, b) ? (
          <span className="row-actions">
            <button type="button" className="btn btn-small" aria-label={`Edit the budget of ${budgetLabel(b)}`} onClick={() => setEditing(b)}>
              Edit
            </button>
            <button type="button" className="btn btn-small btn-danger" aria-label={`Delete the budget of ${budgetLabel(b)}`} onClick={() => remove(b)}>
              Delete
            </button>
          </span>
        ) : null,
    },
  ];
  return (
    <Card title="All budgets">
      <FieldErrors error={error} />
      {list.budgets.length === 0 ? (
        <Empty title="No budgets yet" />
      ) : (
        <DataTable caption="Budgets" dense rows={list.budgets} rowKey={(b) => String(b.id)} columns={columns} testId="budget-list" />
      )}
      {editing && (
        <EditBudgetDialog
          budget={editing}
          onClose={() => setEditing(null)}
          onSaved={(b) => {
            setEditing(null);
            onChanged(`Saved the budget of ${budgetLabel(b)}.`);
          }}
        />
      )}
    </Card>
  );
}

export function BudgetsPage() {
  const [params, setParams] = useSearchParams();
  const month = params.get("month") || thisMonth();
  const status = useApi<BudgetStatusPage>(`${BUDGETS_API}/status?month=${encodeURIComponent(month)}`);
  const list = useApi<BudgetList>(BUDGETS_API);
  const [notice, setNotice] = useState<string | null>(null);
  const may = list.data?.may_set;
  function changed(text: string) {
    setNotice(text);
    status.reload();
    list.reload();
  }
  return (
    <>
      <PageHeader
        title="Budgets"
        subtitle="Spend to date against each budget, and where the month is heading: the forecast and its p10–p90 interval (docs/budgets.md)."
        actions={
          <label className="field" htmlFor="budget-month">
            <span>Month</span>
            <input
              id="budget-month"
              className="input"
              type="month"
              value={month}
              onChange={(e) => e.target.value && setParams((p) => {
                p.set("month", e.target.value);
                return p;
              })}
            />
          </label>
        }
      />
      {notice && (
        <div className="callout callout-ok" role="status" data-testid="budget-notice">
          {notice}
        </div>
      )}
      <Card title={`Budgets in ${month}`}>
        <Async state={status} isEmpty={(d) => d.rows.length === 0} empty={<Empty title="No budget is in force this month">Budgets are set per team or project, per month.</Empty>}>
          {(d) => (
            <>
              <Totals rows={d.rows} />
              <StatusTable page={d} />
            </>
          )}
        </Async>
      </Card>
      {may && (may.any || may.teams.length > 0) && <SetBudgetCard may={may} month={month} onSaved={changed} />}
      <Async state={list}>{(d) => <BudgetListCard list={d} onChanged={changed} />}</Async>
    </>
  );
}

/** A team's (its own and its projects') or a project's budgets this month, on its page; nothing
 * where none is in force or the caller may not read them. */
export function BudgetsCard({ team, project }: { team?: string; project?: string }) {
  const month = thisMonth();
  const scope = team ? `team=${encodeURIComponent(team)}` : `project=${encodeURIComponent(project ?? "")}`;
  const state = useApi<BudgetStatusPage>(`${BUDGETS_API}/status?month=${month}&${scope}`);
  if (!state.data || state.data.rows.length === 0) return null;
  return (
    <Card title={`Budgets in ${month}`} actions={<Link to={`/budgets?month=${month}`}>All budgets →</Link>}>
      <StatusTable page={state.data} testId="entity-budgets" />
    </Card>
  );
}
