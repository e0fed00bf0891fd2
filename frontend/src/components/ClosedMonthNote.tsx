// A closed month's pages show the figures it was closed with. This note says so, and where the
// live figures (later prices, a newer waste model, late telemetry) differ: by how much, as of when,
// and what caused it.

import type { ClosedMonthCause, ClosedMonthNote as Note } from "../api/types";
import { formatDate, formatDateTime, formatMonth, formatPct, formatUsd, formatUsdChange, formatUsdPrice, tierLabel } from "../lib/format";

/** One cause in words: "Dec 2, 2026 14:05: root changed the H100-SXM price (any provider, on-demand) $36.00 → $45.00 per GPU-hour". */
export function causeText(c: ClosedMonthCause): string {
  if (c.kind === "price") {
    const who = c.by ?? "an organization admin";
    const what = c.action === "delete" ? "deleted" : c.action === "create" ? "set" : "changed";
    const where = [c.provider || "any provider", c.region || null, c.tier ? tierLabel(c.tier) : null].filter(Boolean).join(", ");
    const prices =
      c.action === "delete"
        ? `${formatUsdPrice(c.before_usd_per_gpu_hour)} per GPU-hour`
        : c.before_usd_per_gpu_hour && c.before_usd_per_gpu_hour !== c.after_usd_per_gpu_hour
          ? `${formatUsdPrice(c.before_usd_per_gpu_hour)} → ${formatUsdPrice(c.after_usd_per_gpu_hour)} per GPU-hour`
          : `${formatUsdPrice(c.after_usd_per_gpu_hour)} per GPU-hour`;
    return `${formatDateTime(c.at)}: ${who} ${what} the ${c.gpu ?? "GPU"} price (${where}) ${prices}`;
  }
  if (c.kind === "policy") {
    const parts: string[] = [];
    const before = c.before ?? {};
    const after = c.after ?? {};
    if ("target_mfu" in after) parts.push(`target MFU ${formatPct(Number(before.target_mfu))} → ${formatPct(Number(after.target_mfu))}`);
    if ("recoverability" in after) parts.push("the recoverable share caps");
    return `${formatDateTime(c.at)}: ${c.by ?? "an organization admin"} changed the waste model settings (${parts.join("; ") || "settings"})`;
  }
  if (c.kind === "model") return `the waste model changed from version ${c.from_version} to ${c.to_version}`;
  if (c.kind === "telemetry") return `${c.runs_added} run${c.runs_added === 1 ? "" : "s"} billed in the month arrived after it was closed`;
  if (c.kind === "telemetry_removed") return `${c.runs_removed} run${c.runs_removed === 1 ? "" : "s"} no longer billed in the month`;
  return c.kind;
}

/** "Closed month" note for a page whose period is a closed month (nothing for any other period). */
export function ClosedMonthNote({ note }: { note: Note | null | undefined }) {
  if (!note) return null;
  const closed = `${formatMonth(note.month)} is closed: these are the figures it was closed with on ${formatDate(note.closed_at)}${note.closed_by ? ` by ${note.closed_by}` : ""}.`;
  return (
    <div className={`callout callout-block ${note.differs ? "confirm" : ""}`} role="note" data-testid="closed-month-note">
      <strong>{closed}</strong>{" "}
      {note.differs ? (
        <>
          Live figures differ by <strong data-testid="closed-month-difference">{formatUsdChange(note.difference.cost_usd)}</strong> (live{" "}
          {formatUsd(note.live.cost_usd)}, as of {formatDateTime(note.as_of)}), an adjustment the finance review lists:
          {note.causes.length > 0 ? (
            <ul className="closed-causes">
              {note.causes.map((c, i) => (
                <li key={i}>{causeText(c)}</li>
              ))}
            </ul>
          ) : (
            " no recorded change explains it (a policy change or a re-analysis)."
          )}
        </>
      ) : (
        <span className="muted">Live figures agree with them.</span>
      )}
    </div>
  );
}
