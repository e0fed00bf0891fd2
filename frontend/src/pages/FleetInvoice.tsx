import { useEffect } from "react";

import { useApi } from "../api/hooks";
import type { InvoiceReconciliation, InvoiceRow } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Empty } from "../components/States";
import { Card } from "../components/ui";
import { formatDateTime, formatMonth, formatNumber, formatUsd } from "../lib/format";

export const INVOICES_API = "/api/v1/fleet/invoices";
const IMPORT_POLL_MS = 2000;
const IMPORTS_SHOWN = 5;

/** One FOCUS file posted (GET /api/v1/fleet/invoices): a large one is a background job. */
export interface InvoiceImport {
  id: number;
  filename: string;
  status: "queued" | "running" | "done" | "failed";
  lines: number;
  lines_checked: number;
  lines_new: number;
  matched_lines: number;
  errors: string[];
  error_count: number;
  imported_at: string;
  updated_at: string;
  sha256: string;
}

const STATUS_BADGE: Record<InvoiceImport["status"], string> = { queued: "badge-info", running: "badge-info", done: "badge-ok", failed: "badge-bad" };

function importActive(rows: InvoiceImport[] | undefined): boolean {
  return !!rows && rows.some((r) => r.status === "queued" || r.status === "running");
}

function ImportState({ row }: { row: InvoiceImport }) {
  if (row.status === "running") return <>{formatNumber(row.lines_checked)} of {formatNumber(row.lines)} lines checked</>;
  if (row.status === "queued") return <>{formatNumber(row.lines)} lines, waiting to start</>;
  if (row.status === "done") return <>{formatNumber(row.lines)} lines, {formatNumber(row.lines_new)} new, {formatNumber(row.matched_lines)} matched to nodes</>;
  const more = row.error_count - row.errors.length;
  return (
    <>
      nothing imported: {formatNumber(row.error_count)} {row.error_count === 1 ? "error" : "errors"}
      <ul className="small" data-testid={`invoice-import-errors-${row.id}`}>
        {row.errors.map((e) => (
          <li key={e}>{e}</li>
        ))}
        {more > 0 && <li>… and {formatNumber(more)} more</li>}
      </ul>
    </>
  );
}

/**
 * The latest invoice imports with their status: a large file is checked and stored by a background
 * job, so its progress (lines checked) and, when refused, its first errors show here, asked for
 * again every two seconds while one is queued or running. Finance and admins list imports; for
 * anyone else the API answers 403 and nothing is shown.
 */
export function InvoiceImports() {
  const imports = useApi<InvoiceImport[]>(INVOICES_API);
  const active = importActive(imports.data);
  const { reload } = imports;
  useEffect(() => {
    if (!active) return;
    const timer = setInterval(reload, IMPORT_POLL_MS);
    return () => clearInterval(timer);
  }, [active, reload]);
  const rows = imports.data?.slice(0, IMPORTS_SHOWN) ?? [];
  if (imports.error || rows.length === 0) return null;
  return (
    <div className="invoice-imports" data-testid="invoice-imports">
      <h3 className="small muted">Latest imports</h3>
      <ul>
        {rows.map((row) => (
          <li key={row.id} data-testid={`invoice-import-${row.id}`}>
            <span className={`badge ${STATUS_BADGE[row.status] ?? ""}`}>{row.status}</span> <strong>{row.filename || row.sha256.slice(0, 12)}</strong>{" "}
            <span className="muted small">{formatDateTime(row.imported_at)}</span> — <ImportState row={row} />
          </li>
        ))}
      </ul>
    </div>
  );
}

const COLUMNS: Column<InvoiceRow>[] = [
  { key: "team", header: "Team", render: (r) => r.team_name },
  { key: "billed_usd", header: "Billed", align: "right", render: (r) => <strong>{formatUsd(r.billed_usd)}</strong> },
  { key: "measured_usd", header: "Measured", align: "right", render: (r) => formatUsd(r.measured_usd) },
  { key: "unexplained_usd", header: "Unexplained", align: "right", render: (r) => formatUsd(r.unexplained_usd) },
];

/**
 * The imported cloud invoice (FOCUS) against the fleet: per team, the GPU lines billed, the GPU time
 * the node collectors measured and priced, and what the bill holds beyond it.
 */
export function InvoiceCard({ invoice, month }: { invoice: InvoiceReconciliation; month: string }) {
  return (
    <Card title="Invoice: billed, measured, unexplained" actions={<span className="muted small">GPU lines of the imported FOCUS invoice, matched to nodes</span>}>
      {invoice.rows.length === 0 ? (
        <Empty title={`No invoice GPU lines for ${formatMonth(month)}`}>Import the cloud bill (FOCUS CSV) with POST /api/v1/fleet/invoices or manage.py importfocus.</Empty>
      ) : (
        <>
          <DataTable
            caption={`Invoice against the fleet ${month}`}
            testId="finance-invoice"
            columns={COLUMNS}
            rows={invoice.rows}
            rowKey={(r) => r.team ?? "unattributed"}
            footer={
              <tr className="total-row" data-testid="finance-invoice-total">
                <th scope="row">Total</th>
                <td className="align-right">{formatUsd(invoice.totals.billed_usd)}</td>
                <td className="align-right">{formatUsd(invoice.totals.measured_usd)}</td>
                <td className="align-right">{formatUsd(invoice.totals.unexplained_usd)}</td>
              </tr>
            }
          />
          {invoice.unmatched_billed_usd ? (
            <p className="muted small" data-testid="finance-invoice-unmatched">
              {formatUsd(invoice.unmatched_billed_usd)} of the invoice matches no node (storage, network, other services): not counted above.
            </p>
          ) : null}
        </>
      )}
      {/* The whole invoice (its unmatched figure) is what finance and admins read: they list imports. */}
      {invoice.unmatched_billed_usd !== null && <InvoiceImports />}
    </Card>
  );
}
