// What the server refused or left out of a run's telemetry, and the analysis' warnings about its
// inputs, in plain words: figures built on doubtful inputs say so where they are shown.
import type { Analysis, DroppedRows } from "../../api/types";
import { Card } from "../../components/ui";
import { formatNumber, plainWords } from "../../lib/format";

function steps(n: number): string {
  return `${formatNumber(n)} step${n === 1 ? "" : "s"}`;
}

/** One sentence per non-zero count of dropped rows. */
export function droppedRowNotes(dropped: DroppedRows | undefined | null): string[] {
  if (!dropped) return [];
  const out: string[] = [];
  if (dropped.non_rising_start > 0) {
    out.push(`${steps(dropped.non_rising_start)} left out: each started no later than the step before it on the same rank (a clock that went back, or rows sent out of order).`);
  }
  if (dropped.reused_step > 0) {
    out.push(`${steps(dropped.reused_step)} refused: each reused a step number its rank had already sent (usually a restart that counted from the beginning again).`);
  }
  return out;
}

export function dataQualityNotes(a: Analysis): string[] {
  return [...droppedRowNotes(a.dropped_rows), ...a.warnings.map(plainWords)];
}

/** A line at the top of the page pointing at the notes, so nobody reads the figures without them. */
export function DataQualityNotice({ a }: { a: Analysis }) {
  const n = dataQualityNotes(a).length;
  if (n === 0) return null;
  return (
    <div className="notice" data-testid="data-quality-notice">
      {n === 1 ? "One note" : `${n} notes`} on this run's telemetry may affect its figures: <a href="#data-quality">see Data quality</a>.
    </div>
  );
}

export function DataQualityCard({ a }: { a: Analysis }) {
  const dropped = droppedRowNotes(a.dropped_rows);
  if (dropped.length === 0 && a.warnings.length === 0) return null;
  return (
    <Card title="Data quality" id="data-quality">
      <ul className="warnings" data-testid="data-quality">
        {dropped.map((w) => (
          <li key={w}>{w}</li>
        ))}
        {a.warnings.map((w) => (
          <li key={w}>{plainWords(w)}</li>
        ))}
      </ul>
    </Card>
  );
}
