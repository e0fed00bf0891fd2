// Recommendations with what each would have saved on this run, and a monthly figure only where the
// work really recurs (the project's trailing 30 days), never a one-off run extrapolated.
import type { Recommendation } from "../../api/types";
import { Explain } from "../../components/Explain";
import { CategoryDot, SeverityBadge } from "../../components/ui";
import { categoryLabel } from "../../lib/categories";
import { formatGpuHours, formatInput, formatUsd, isNum, plainWords, recommendationRefs } from "../../lib/format";
import { recurrenceWindow } from "./Headline";

/** An observation's figure as people read it: shares as percentages, counts as numbers. */
function observed(value: number | string | null, unit: string): string {
  return formatInput(undefined, value, unit);
}

// Code a reader types (calls, keyword arguments, environment variables, snake_case names) is set
// as code, so it reads as something to type rather than as an internal name.
const CODE_RE = /([A-Za-z_][\w.]*\([^)]*\)|[A-Za-z_][\w.]*=[^\s,;]+|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\b[a-z][a-z0-9]*(?:[._][a-z0-9]+)*_[a-z0-9]+\b)/;

function FixText({ text }: { text: string }) {
  const parts = recommendationRefs(text).split(CODE_RE);
  return (
    <>
      {parts.map((part, i) => (i % 2 === 1 ? <code key={i}>{part}</code> : part))}
    </>
  );
}

/** ``recoverable``: each category's recoverable dollars, to say why a saving is nil. */
/** ``notes``: what the page adds to a recommendation by its code (e.g. where a straggler ran). */
export function Recommendations({ items, recoverable = {}, notes = {} }: { items: Recommendation[]; recoverable?: Record<string, number>; notes?: Record<string, string> }) {
  return (
    <ol className="recs recs-grid">
      {items.map((r) => (
        <li key={r.code} className="rec" data-testid={`rec-${r.code}`}>
          <div className="rec-head">
            <CategoryDot name={r.category} />
            <span className="rec-title">{plainWords(r.title)}</span>
            <SeverityBadge severity={r.severity} />
          </div>
          <Saving r={r} categoryRecoverable={recoverable[r.category]} />
          {notes[r.code] && (
            <p className="small rec-note" data-testid={`rec-note-${r.code}`}>
              {notes[r.code]}
            </p>
          )}
          <ul className="rec-evidence">
            {r.evidence.map((e) => (
              <li key={e.observation}>
                <span className="muted">{plainWords(e.observation)}</span> <span className="nowrap">{observed(e.value, e.unit)}</span>
              </li>
            ))}
          </ul>
          <details className="rec-fixes">
            <summary>
              {r.fixes.length} fix{r.fixes.length === 1 ? "" : "es"}
            </summary>
            <ul>
              {r.fixes.map((f) => (
                <li key={f}>
                  <FixText text={f} />
                </li>
              ))}
            </ul>
          </details>
        </li>
      ))}
    </ol>
  );
}

const UNPRICED = "not priced separately: ";

/**
 * Why a recommendation carries no saving, in words: the server says so in its explanation (a
 * finding whose category has nothing recoverable, or cost under a cent; a diagnostic such as
 * memory or setup). The server issues no $0 saving: a rule whose dollars another claims is left out.
 */
export function unpricedWords(r: Recommendation): string {
  const formula = r.explain?.formula ?? "";
  if (formula.startsWith(UNPRICED)) return `no saving priced on this run: ${plainWords(formula.slice(UNPRICED.length))}`;
  return "a diagnostic: no saving priced on its own";
}

function Saving({ r }: { r: Recommendation; categoryRecoverable?: number }) {
  if (!isNum(r.saving_usd) || r.saving_usd <= 0) {
    return (
      <div className="rec-saving" data-testid="rec-saving-none">
        <span className="muted">{unpricedWords(r)}</span>
      </div>
    );
  }
  const claims = Object.entries(r.claims ?? {}).filter(([, usd]) => isNum(usd) && usd > 0);
  return (
    <>
      <div className="rec-saving" data-testid="rec-saving">
        <span className="muted">saves</span> <strong>{formatUsd(r.saving_usd)}</strong> <span className="muted">on this run</span>
        <Explain
          label="saving on this run"
          entry={r.explain ?? undefined}
          source={{
            value: r.saving_usd,
            unit: "USD",
            formula: "the recoverable dollars this recommendation claims (each recoverable dollar is claimed by one recommendation at most)",
            inputs: Object.fromEntries(claims.map(([c, usd]) => [`${categoryLabel(c).toLowerCase()} (USD)`, usd])),
            input_units: Object.fromEntries(claims.map(([c]) => [`${categoryLabel(c).toLowerCase()} (USD)`, "USD"])),
          }}
        />
      </div>
      <Monthly r={r} />
    </>
  );
}

function Monthly({ r }: { r: Recommendation }) {
  const rec = r.recurrence;
  if (!rec) return null;
  if (rec.kind !== "recurring" || !isNum(r.saving_usd_per_month)) {
    return (
      <div className="rec-monthly muted small" data-testid="rec-monthly">
        no monthly figure: no other run of this project {recurrenceWindow(rec)}
      </div>
    );
  }
  return (
    <div className="rec-monthly small" data-testid="rec-monthly">
      <strong>{formatUsd(r.saving_usd_per_month)}</strong> / month <span className="muted">at this project's volume {recurrenceWindow(rec)} ({formatGpuHours(rec.project_gpu_hours_30d)})</span>
      <Explain
        label="monthly saving"
        source={{
          value: r.saving_usd_per_month,
          unit: "USD",
          formula: `saving on this run ÷ the run's GPU-hours × the project's GPU-hours ${recurrenceWindow(rec)}`,
          inputs: {
            "saving on this run (USD)": r.saving_usd,
            "run GPU-hours": rec.run_gpu_hours,
            "project GPU-hours, 30 days": rec.project_gpu_hours_30d,
            "other runs of the project, 30 days": rec.other_runs_30d,
          },
          input_units: {
            "saving on this run (USD)": "USD",
            "run GPU-hours": "GPU-h",
            "project GPU-hours, 30 days": "GPU-h",
            "other runs of the project, 30 days": "count",
          },
        }}
      />
    </div>
  );
}
