// A run's dollars as the page shows them: rounded once, from the unrounded figures, to a precision
// that suits the run. A run of dollars shows cents (its stored cents already foot); a run of a
// fraction of a cent shows its exact dollars to three significant digits, footed to its total, so
// the demo's CPU runs show their split instead of $0.00 in every card and row.
import type { Analysis } from "../../api/types";
import { CATEGORIES, type Category } from "../../lib/categories";
import { largestRemainder } from "../../lib/footing";
import { isNum, usdDigitsFor } from "../../lib/format";

export interface RunMoney {
  /** Decimals of every dollar figure of the run's cost (2 unless the run costs under a dime). */
  digits: number;
  /** The run's cost as shown: exact dollars for a tiny run, its cents otherwise. */
  cost: number;
  waste: number;
  /** Each category's dollars as shown, adding up to `cost`. */
  usd: Record<Category, number>;
  /** The run cost under a dime: figures are its exact dollars, not cents. */
  tiny: boolean;
}

export function runMoney(a: Analysis): RunMoney {
  const exact = isNum(a.cost_exact_usd) ? a.cost_exact_usd : a.cost_usd;
  const digits = usdDigitsFor(exact);
  const tiny = digits > 2;
  if (!tiny) {
    const usd = Object.fromEntries(CATEGORIES.map((c) => [c, a.categories[c].usd])) as Record<Category, number>;
    return { digits, cost: a.cost_usd, waste: a.waste_usd, usd, tiny };
  }
  const parts = CATEGORIES.map((c) => {
    const f = a.categories[c];
    return isNum(f.usd_exact) ? f.usd_exact : f.usd;
  });
  const footed = largestRemainder(parts, exact, digits);
  const usd = Object.fromEntries(CATEGORIES.map((c, i) => [c, footed[i]])) as Record<Category, number>;
  const cost = footed.reduce((x, y) => x + y, 0);
  return { digits, cost, waste: cost - usd.useful_compute, usd, tiny };
}

/** The run's price per GPU-hour from unrounded figures: the server's, else exact dollars over priced hours. */
export function runUsdPerGpuHour(a: Analysis): number | null {
  if (isNum(a.usd_per_gpu_hour)) return a.usd_per_gpu_hour;
  const priced = a.gpu_hours - a.unpriced_gpu_seconds / 3600;
  const exact = isNum(a.cost_exact_usd) ? a.cost_exact_usd : a.cost_usd;
  return priced > 0 ? exact / priced : null;
}
