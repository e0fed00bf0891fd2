// Columns that foot: figures rounded for display so that they add up to the total shown under
// them. Rounding each figure on its own can leave a column a cent (or a tenth) off its total; the
// largest-remainder method (as the server's phantomhub/portal/footing.py) rounds everything down,
// then gives the units still missing to the figures that lost the most, ties to the earlier one.
// Every figure stays within one unit of its exact value.

/** `values` rounded to `digits` decimals so that they add up to `total` rounded the same way. */
export function largestRemainder(values: readonly number[], total: number, digits: number): number[] {
  if (values.length === 0) return [];
  const scale = 10 ** digits;
  // Work in whole units; the epsilon keeps 0.285 × 100 (28.499999…) from losing its cent.
  const exact = values.map((v) => v * scale);
  const floors = exact.map((e) => Math.floor(e + 1e-7));
  const target = Math.round(total * scale + (total >= 0 ? 1e-7 : -1e-7));
  let missing = target - floors.reduce((a, b) => a + b, 0);
  const order = exact.map((e, i) => ({ i, r: e - floors[i] })).sort((a, b) => b.r - a.r || a.i - b.i);
  const out = [...floors];
  const step = missing >= 0 ? 1 : -1;
  const seq = missing >= 0 ? order : [...order].reverse();
  for (let k = 0; missing !== 0; k += 1, missing -= step) out[seq[k % seq.length].i] += step;
  return out.map((u) => u / scale);
}

/** Decimals that suit a column whose total is `total` (as formatGpuHours picks them for one figure). */
export function columnDigits(total: number): number {
  const a = Math.abs(total);
  return a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
}
