import { useMemo, useState } from "react";
import { Link, useSearchParams } from "react-router";

import { apiFetch, apiUrl, ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import { canCloseMonth, canReopenMonth, useSession } from "../api/session";
import type { FinanceAdjustment, FinanceReport, FinanceRow, MonthHistoryEntry } from "../api/types";
import { causeText } from "../components/ClosedMonthNote";
import { DataTable, type Column } from "../components/DataTable";
import { ParamNotice } from "../components/PeriodPicker";
import { Async, Empty } from "../components/States";
import { SaveViewButton } from "../components/SavedViews";
import { Card, CategoryDot, PageHeader, Stat } from "../components/ui";
import { CATEGORIES, CATEGORY_LABEL, CATEGORY_SHORT } from "../lib/categories";
import { columnDigits, largestRemainder } from "../lib/footing";
import { formatDate, formatDateTime, formatMonth, formatNumber, formatPct, formatUsd, formatUsdChange, formatUsdPrice, tierLabel } from "../lib/format";
import { withPeriod } from "../lib/links";
import { currentMonth, isMonth, shiftMonth, sortRows, toggleSort } from "../lib/urlState";
import { InvoiceCard } from "./FleetInvoice";

export function financeCsvUrl(month: string): string {
  return apiUrl(`finance/${month}.csv`);
}

/** The month's review as a PDF for sign-off: the same rows as the CSV, its status on every page. */
export function financePdfUrl(month: string): string {
  return apiUrl(`finance/${month}.pdf`);
}

function financeValue(row: FinanceRow, key: string): unknown {
  if (key.startsWith("cat.")) return row.categories_usd[key.slice(4)] ?? null;
  return (row as unknown as Record<string, unknown>)[key];
}

type ShownRow = FinanceRow & { gpu_hours_shown: number };

/**
 * Money first: spend, waste and recoverable beside the project, then the six categories, then runs
 * and GPU-hours. GPU-hours are shown with one precision for the whole column, rounded so that they
 * add up to the total row (money is in whole cents already and foots as it is).
 */
function columns(month: string, digits: number): Column<ShownRow>[] {
  const gpuHours = (v: number) => `${formatNumber(v, digits)} GPU-h`;
  return [
    {
      key: "project",
      header: "Team / project",
      title: "team and project",
      sortable: true,
      render: (r) => (
        <div className="cell-main">
          <Link to={withPeriod(`/projects/${encodeURIComponent(r.project)}`, month)} className="row-link">
            {r.project_name ?? r.project}
          </Link>
          <Link to={withPeriod(`/teams/${encodeURIComponent(r.team)}`, month)} className="cell-sub">
            {r.team_name ?? r.team}
          </Link>
        </div>
      ),
    },
    { key: "cost_usd", header: "Spend", align: "right", sortable: true, render: (r) => <strong>{formatUsd(r.cost_usd)}</strong> },
    { key: "waste_usd", header: "Waste", align: "right", sortable: true, render: (r) => formatUsd(r.waste_usd) },
    { key: "recoverable_usd", header: "Recoverable", align: "right", sortable: true, render: (r) => <strong className="money-accent">{formatUsd(r.recoverable_usd)}</strong> },
    { key: "lost_usd", header: "Lost to failures", align: "right", sortable: true, render: (r) => formatUsd(r.lost_usd) },
    ...CATEGORIES.map(
      (c): Column<ShownRow> => ({
        key: `cat.${c}`,
        title: CATEGORY_LABEL[c],
        header: (
          <span className="cat-head" title={CATEGORY_LABEL[c]}>
            <CategoryDot name={c} />
            {CATEGORY_SHORT[c]}
          </span>
        ),
        align: "right",
        sortable: true,
        className: "col-cat",
        render: (r) => formatUsd(r.categories_usd[c] ?? 0),
      }),
    ),
    { key: "runs", header: "Runs", align: "right", sortable: true, render: (r) => formatNumber(r.runs) },
    { key: "gpu_hours", header: "GPU-hours", align: "right", sortable: true, render: (r) => gpuHours(r.gpu_hours_shown) },
  ];
}

export function FinancePage() {
  const [params, setParams] = useSearchParams();
  const { user } = useSession();
  const monthParam = (params.get("month") ?? "").trim();
  const month = isMonth(monthParam) ? monthParam : currentMonth();
  const invalidMonth = monthParam && !isMonth(monthParam) ? monthParam : null;
  const sort = params.get("sort") || "-cost_usd";
  const state = useApi<FinanceReport>(`finance/${month}`);
  const [confirming, setConfirming] = useState<"close" | "reopen" | null>(null);
  const [busy, setBusy] = useState(false);
  const [actionError, setActionError] = useState<string | null>(null);
  const [reason, setReason] = useState("");
  const digits = columnDigits(state.data?.totals.gpu_hours ?? 0);
  const rows = useMemo(() => {
    if (!state.data) return [];
    const shown = largestRemainder(
      state.data.rows.map((r) => r.gpu_hours),
      state.data.totals.gpu_hours,
      digits,
    );
    return sortRows(
      state.data.rows.map((r, i) => ({ ...r, gpu_hours_shown: shown[i] })),
      sort,
      (row, key) => financeValue(row, key),
    );
  }, [state.data, sort, digits]);

  const go = (patch: Record<string, string>) => {
    const next = new URLSearchParams(params);
    for (const [k, v] of Object.entries(patch)) {
      if (!v || (k === "month" && v === currentMonth()) || (k === "sort" && v === "-cost_usd")) next.delete(k);
      else next.set(k, v);
    }
    setParams(next);
    setConfirming(null);
    setActionError(null);
  };

  async function act(action: "close" | "reopen") {
    setBusy(true);
    setActionError(null);
    try {
      await apiFetch(`finance/${month}/${action}`, { method: "POST", body: action === "reopen" ? { reason } : undefined });
      setConfirming(null);
      setReason("");
      state.reload();
    } catch (err) {
      setActionError(err instanceof ApiError ? err.message : String(err));
    } finally {
      setBusy(false);
    }
  }

  const report = state.data;
  return (
    <div className="page">
      <PageHeader
        title="Finance review"
        subtitle={
          <span className="title-with-badge">
            {formatMonth(month)}
            {report && <span className={`badge ${report.closed ? "badge-ok" : "badge-info"}`}>{report.closed ? "closed" : "open"}</span>}
            {report?.closed && (
              <span className="muted small">
                closed {formatDateTime(report.closed_at)}
                {report.closed_by ? ` by ${report.closed_by}` : ""}
              </span>
            )}
          </span>
        }
        actions={
          <div className="month-picker">
            <button type="button" className="btn btn-icon" aria-label="Previous month" onClick={() => go({ month: shiftMonth(month, -1) })}>
              ‹
            </button>
            <label className="visually-hidden" htmlFor="finance-month">
              Month
            </label>
            <input id="finance-month" className="input" type="month" value={month} max={currentMonth()} onChange={(e) => isMonth(e.target.value) && go({ month: e.target.value })} />
            <button type="button" className="btn btn-icon" aria-label="Next month" disabled={month >= currentMonth()} onClick={() => go({ month: shiftMonth(month, 1) })}>
              ›
            </button>
            <a className="btn" href={financeCsvUrl(month)} download={`phantomhub-finance-${month}.csv`} data-testid="finance-csv">
              Download CSV
            </a>
            <a className="btn" href={financePdfUrl(month)} download={`phantomhub-finance-${month}.pdf`} data-testid="finance-pdf" title="The review for sign-off: totals, rows, prices, the month's status on every page">
              Download PDF
            </a>
            <SaveViewButton />
            {report && !report.closed && canCloseMonth(user) && (
              <button
                type="button"
                className="btn btn-primary"
                disabled={report.closable?.ok === false}
                title={report.closable?.reason ?? undefined}
                aria-describedby={report.closable?.ok === false ? "close-refusal" : undefined}
                onClick={() => setConfirming("close")}
              >
                Close month
              </button>
            )}
            {report && report.closed && canReopenMonth(user) && (
              <button type="button" className="btn" onClick={() => setConfirming("reopen")}>
                Reopen month
              </button>
            )}
          </div>
        }
      />
      <ParamNotice name="month" value={invalidMonth} shown={formatMonth(month)} />
      {report && !report.closed && report.closable?.ok === false && canCloseMonth(user) && (
        <p className="muted small" id="close-refusal" data-testid="close-refusal">
          Cannot be closed: {report.closable.reason}
        </p>
      )}
      {confirming && (
        <div className="callout confirm" role="alertdialog" aria-labelledby="confirm-text">
          <span id="confirm-text">
            {confirming === "close"
              ? `Close ${formatMonth(month)}? Its figures are frozen: later prices, waste model changes and late telemetry no longer change them, and every page shows any live difference as an adjustment.`
              : `Reopen ${formatMonth(month)}? Its figures will follow the latest analyses again. Your name, the time and the reason are recorded.`}
          </span>
          {confirming === "reopen" && (
            <label className="field" htmlFor="reopen-reason">
              <span>Reason</span>
              <input id="reopen-reason" className="input" required maxLength={500} value={reason} onChange={(e) => setReason(e.target.value)} placeholder="why it is reopened" />
            </label>
          )}
          <span className="confirm-actions">
            <button type="button" className="btn btn-primary" disabled={busy || (confirming === "reopen" && !reason.trim())} onClick={() => act(confirming)}>
              {confirming === "close" ? "Close month" : "Reopen month"}
            </button>
            <button type="button" className="btn btn-ghost" onClick={() => setConfirming(null)}>
              Cancel
            </button>
          </span>
        </div>
      )}
      {actionError && (
        <div className="callout callout-bad" role="alert">
          {actionError}
        </div>
      )}
      <Async state={state} loadingRows={6}>
        {(d) => (
          <>
            <div className="stats">
              <Stat label="Spend" testId="finance-spend" value={formatUsd(d.totals.cost_usd)} sub={`${formatNumber(d.totals.gpu_hours, digits)} GPU-h`} />
              <Stat label="Waste" value={formatUsd(d.totals.waste_usd)} sub={d.totals.cost_usd ? `${formatPct(d.totals.waste_usd / d.totals.cost_usd)} of spend` : undefined} />
              <Stat label="Recoverable" tone="accent" testId="finance-recoverable" value={formatUsd(d.totals.recoverable_usd)} />
              {d.totals.lost_usd !== undefined && <Stat label="Lost to failures" tone="warn" testId="finance-lost" value={formatUsd(d.totals.lost_usd)} sub="rework, restarts and checkpoints across jobs' attempts" />}
              <Stat label="Runs" value={formatNumber(d.totals.runs)} sub={`${d.rows.length} team/project row${d.rows.length === 1 ? "" : "s"}`} />
            </div>
            <Card title="By team and project">
              {d.rows.length === 0 ? (
                <Empty title={`No spend in ${formatMonth(month)}`} />
              ) : (
                <DataTable
                  caption={`Finance review ${month}`}
                  testId="finance-table"
                  columns={columns(month, digits)}
                  stickyFirst
                  rows={rows}
                  rowKey={(r) => `${r.team}/${r.project}`}
                  sort={sort}
                  onSort={(key) => go({ sort: toggleSort(sort, key) })}
                  footer={
                    <tr className="total-row" data-testid="finance-total">
                      <th scope="row">Total</th>
                      <td className="align-right">{formatUsd(d.totals.cost_usd)}</td>
                      <td className="align-right">{formatUsd(d.totals.waste_usd)}</td>
                      <td className="align-right">{formatUsd(d.totals.recoverable_usd)}</td>
                      <td className="align-right" data-col="lost_usd">{formatUsd(d.totals.lost_usd)}</td>
                      {CATEGORIES.map((c) => (
                        <td key={c} className="align-right col-cat">
                          {formatUsd(d.totals.categories_usd?.[c] ?? 0)}
                        </td>
                      ))}
                      <td className="align-right">{formatNumber(d.totals.runs)}</td>
                      <td className="align-right">{formatNumber(d.totals.gpu_hours, digits)} GPU-h</td>
                    </tr>
                  }
                />
              )}
            </Card>
            {d.closed && d.adjustment && <AdjustmentCard adjustment={d.adjustment} closedTotal={d.totals.cost_usd} month={month} />}
            {d.invoice && <InvoiceCard invoice={d.invoice} month={month} />}
            <Card
              title="Price-book entries used"
              actions={<span className="muted small">{user && (user.is_finance || user.is_org_admin) ? "the prices these figures were computed with" : "the prices that priced your teams' rows"}</span>}
            >
              {d.price_entries.length === 0 ? (
                <Empty title="No prices applied this month" />
              ) : (
                <DataTable
                  caption="Price entries"
                  dense
                  rows={d.price_entries}
                  rowKey={(p) => String(p.id)}
                  columns={[
                    { key: "gpu", header: "GPU", render: (p) => p.gpu },
                    { key: "provider", header: "Provider", render: (p) => p.provider || <span className="muted">any</span> },
                    { key: "region", header: "Region", render: (p) => p.region || <span className="muted">any</span> },
                    { key: "tier", header: "Tier", render: (p) => tierLabel(p.tier) },
                    { key: "price", header: "$/GPU-hour", align: "right", render: (p) => formatUsdPrice(p.usd_per_gpu_hour) },
                    { key: "from", header: "Effective", render: (p) => `${formatDate(p.effective_from)} – ${p.effective_to ? formatDate(p.effective_to) : "now"}` },
                    { key: "ex", header: "", render: (p) => (p.is_example ? <span className="badge badge-warn">example price</span> : null) },
                  ]}
                />
              )}
            </Card>
            {d.history && d.history.length > 0 && <HistoryCard history={d.history} />}
          </>
        )}
      </Async>
    </div>
  );
}

/** A closed month's dated adjustment: live figures against the closed ones, per row, and why. */
export function AdjustmentCard({ adjustment, closedTotal, month }: { adjustment: FinanceAdjustment; closedTotal: number; month: string }) {
  return (
    <Card title="Adjustments since closing" actions={<span className="muted small">live figures as of {formatDateTime(adjustment.as_of)}</span>}>
      {!adjustment.differs ? (
        <p className="muted" data-testid="finance-adjustment-none">
          The live figures agree with the closed ones.
        </p>
      ) : (
        <div data-testid="finance-adjustment">
          <p>
            The figures above are {formatMonth(month)} as closed: {formatUsd(closedTotal)}. Live figures now say{" "}
            <strong>{formatUsd(adjustment.live_totals.cost_usd)}</strong>, an adjustment of{" "}
            <strong data-testid="finance-adjustment-total">{formatUsdChange(adjustment.difference.cost_usd)}</strong>, not booked in the closed month.
          </p>
          {adjustment.causes.length > 0 ? (
            <ul className="closed-causes" data-testid="finance-adjustment-causes">
              {adjustment.causes.map((c, i) => (
                <li key={i}>{causeText(c)}</li>
              ))}
            </ul>
          ) : (
            <p className="muted">No recorded change explains it (a policy change or a re-analysis).</p>
          )}
          <DataTable
            caption={`Adjustments to ${month} by team and project`}
            dense
            testId="finance-adjustment-rows"
            rows={adjustment.rows}
            rowKey={(r) => `${r.team}/${r.project}`}
            columns={[
              {
                key: "project",
                header: "Team / project",
                render: (r) => (
                  <div className="cell-main">
                    <span>{r.project_name ?? r.project}</span>
                    <span className="cell-sub">{r.team_name ?? r.team}</span>
                  </div>
                ),
              },
              { key: "frozen", header: "Closed", align: "right", render: (r) => formatUsd(r.frozen_cost_usd) },
              { key: "live", header: "Live", align: "right", render: (r) => formatUsd(r.live_cost_usd) },
              { key: "diff", header: "Adjustment", align: "right", render: (r) => <strong>{formatUsdChange(r.difference.cost_usd)}</strong> },
            ]}
          />
        </div>
      )}
    </Card>
  );
}

/** Every close and reopen of the month: who, when, why. */
function HistoryCard({ history }: { history: MonthHistoryEntry[] }) {
  return (
    <Card title="Closes and reopens">
      <ul className="month-history" data-testid="finance-history">
        {history.map((h, i) => (
          <li key={i}>
            {formatDateTime(h.at)}: {h.action === "close" ? "closed" : "reopened"} by {h.by ?? "someone no longer here"}
            {h.reason ? ` (“${h.reason}”)` : ""}
            {h.totals?.cost_usd !== undefined ? <span className="muted"> · spend then {formatUsd(h.totals.cost_usd)}</span> : null}
          </li>
        ))}
      </ul>
    </Card>
  );
}
