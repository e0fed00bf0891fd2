// The run page's headline: how its three dollar figures relate, one sentence each. Recoverable is
// what this run would have cost less at levels already demonstrated; the recommendations claim
// parts of it (each dollar once) and, where the project's work recurs, a monthly figure at its
// recent volume; the baseline delta is a different question (this run against the project's
// usual runs), so it is said to be one rather than left beside the others unexplained.
import type { Analysis, BaselineComparison, Recommendation } from "../../api/types";
import { Card } from "../../components/ui";
import { CATEGORIES } from "../../lib/categories";
import { formatDate, formatGpuHours, formatNumber, formatPct, formatUsd, formatUsdRange, isNum, plainWords } from "../../lib/format";
import type { RunMoney } from "./money";

const CENT = 0.005;

function plural(n: number, one: string, many = `${one}s`): string {
  return `${formatNumber(n)} ${n === 1 ? one : many}`;
}

/** "in the 30 days as of Dec 3, 2026" or "in the 30 days before the run ended". */
export function recurrenceWindow(r: Recommendation["recurrence"]): string {
  if (!r) return "in the last 30 days";
  if (r.basis === "as_of_now") return `in the 30 days to ${formatDate(r.as_of ?? null)}`;
  if (r.basis === "before_run_end") return "in the 30 days before this run ended";
  return "in the last 30 days";
}

export function recoverableSentence(a: Analysis, money: RunMoney): string {
  const cost = formatUsd(money.cost, { digits: money.digits });
  if (a.recoverable_usd >= CENT) {
    const range = formatUsdRange(a.recoverable_low_usd, a.recoverable_high_usd);
    const share = a.cost_usd > 0 ? `, ${formatPct(a.recoverable_usd / (isNum(a.cost_exact_usd) ? a.cost_exact_usd : a.cost_usd))} of it` : "";
    return `Recoverable: ${formatUsd(a.recoverable_usd)} of this run's ${cost} cost${share} (range ${range}): what it would have cost less at levels this run, comparable runs or a target already reached.`;
  }
  const wasted = CATEGORIES.some((c) => c !== "useful_compute" && money.usd[c] > 0);
  if (money.tiny && wasted) {
    return `Recoverable: nothing counted. This run cost ${cost} in all; no category's waste reached a cent, too little to price a saving on.`;
  }
  return `Recoverable: nothing counted. Nothing measured shows this run could have cost less than its ${cost}.`;
}

export function recommendationsSentence(a: Analysis): string {
  const priced = a.recommendations.filter((r) => isNum(r.saving_usd) && r.saving_usd > 0);
  const claimed = priced.reduce((sum, r) => sum + (r.saving_usd ?? 0), 0);
  const unpriced = a.recommendations.length - priced.length;
  const findings = unpriced > 0 ? ` ${plural(unpriced, "other finding")} ${unpriced === 1 ? "has" : "have"} no saving of its own.` : "";
  if (priced.length === 0) {
    if (a.recommendations.length === 0) return "Recommendations: none; no rule found waste worth acting on.";
    const n = a.recommendations.length;
    return `Recommendations: none is priced on this run (${plural(n, "finding")} without a saving of ${n === 1 ? "its" : "their"} own).`;
  }
  const rest = a.recoverable_usd - claimed;
  const whole = rest < CENT ? "all of it" : `${formatUsd(claimed)} of it; the other ${formatUsd(rest)} is recoverable with no rule that names its cause`;
  return `Recommendations: ${plural(priced.length, "priced recommendation")} claim${priced.length === 1 ? "s" : ""} ${whole}, each dollar once.${findings}`;
}

export function monthlySentence(a: Analysis): string | null {
  const priced = a.recommendations.filter((r) => isNum(r.saving_usd) && r.saving_usd > 0);
  const r = priced[0]?.recurrence;
  if (!r) return null;
  const window = recurrenceWindow(r);
  if (r.kind !== "recurring") {
    return `Per month: no figure. No other run of this project ran ${window}, so this run's saving is not multiplied out as if it recurred.`;
  }
  const monthly = priced.reduce((sum, x) => sum + (isNum(x.saving_usd_per_month) ? x.saving_usd_per_month : 0), 0);
  return `Per month: ${formatUsd(monthly)} if the fixes hold for this project's work: the same saving per GPU-hour over its ${formatGpuHours(r.project_gpu_hours_30d)} ${window} (${plural(r.other_runs_30d, "other run")}).`;
}

export function baselineSentence(baseline: BaselineComparison | null | undefined): string | null {
  if (!baseline) return null;
  if (baseline.status !== "compared") return `Against the project baseline: no comparison. ${plainWords(baseline.reason ?? "")}`.trim();
  if (!baseline.summary) return null;
  const n = baseline.baseline_runs.length;
  return `Against the project baseline: ${baseline.summary} (median of ${plural(n, "comparable run")}). That compares this run with the project's usual runs; it is not part of the recoverable dollars above.`;
}

export function Headline({ a, money, baseline }: { a: Analysis; money: RunMoney; baseline: BaselineComparison | null | undefined }) {
  const monthly = monthlySentence(a);
  const base = baselineSentence(baseline);
  return (
    <Card title="What this run could save" id="headline">
      <ul className="headline" data-testid="run-headline">
        <li data-testid="headline-recoverable">{recoverableSentence(a, money)}</li>
        <li data-testid="headline-recommendations">{recommendationsSentence(a)}</li>
        {monthly && <li data-testid="headline-monthly">{monthly}</li>}
        {base && <li data-testid="headline-baseline">{base}</li>}
      </ul>
    </Card>
  );
}
