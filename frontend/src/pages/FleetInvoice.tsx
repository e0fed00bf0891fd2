import type { InvoiceReconciliation, InvoiceRow } from "../api/types";
import { DataTable, type Column } from "../components/DataTable";
import { Empty } from "../components/States";
import { Card } from "../components/ui";
import { formatMonth, formatUsd } from "../lib/format";

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
    </Card>
  );
}
