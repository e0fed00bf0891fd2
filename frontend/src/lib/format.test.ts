import {
  formatBytes,
  formatDate,
  formatDateTime,
  formatDuration,
  formatGpuHours,
  formatMonth,
  formatMs,
  formatPct,
  formatPctPoints,
  formatPlain,
  formatSi,
  formatUsd,
  formatUsdChange,
  formatUsdPrice,
  formatWithUnit,
  formatEvidenceValue,
  formatUsdRange,
  plainWords,
  formatShare,
  formatUsdRate,
  formatUsdPerGpuHour,
  usdDigitsFor,
  formatSeconds,
  formatInput,
  formatExplainValue,
  humanFormula,
  inputName,
} from "./format";

describe("money", () => {
  it("formats dollars with cents and thousands separators", () => {
    expect(formatUsd(1234.5)).toBe("$1,234.50");
    expect(formatUsd(0)).toBe("$0.00");
    expect(formatUsd(-3.456)).toBe("-$3.46");
  });

  it("shows a dash for figures that could not be computed, never a zero", () => {
    expect(formatUsd(null)).toBe("–");
    expect(formatUsd(undefined)).toBe("–");
    expect(formatUsd(Number.NaN)).toBe("–");
  });

  it("compacts large amounts for axes and keeps small ones exact", () => {
    expect(formatUsd(71_800, { compact: true })).toBe("$71.8K");
    expect(formatUsd(2_500_000, { compact: true })).toBe("$2.5M");
    expect(formatUsd(250, { compact: true })).toBe("$250");
  });

  it("shows unit prices to the cent, or to the 4 decimals the price book keeps when cents are not enough", () => {
    expect(formatUsdPrice("2.5000")).toBe("$2.50");
    expect(formatUsdPrice("0.4321")).toBe("$0.4321");
    expect(formatUsdPrice(3)).toBe("$3.00");
    expect(formatUsdPrice("")).toBe("–");
    expect(formatUsdPrice(null)).toBe("–");
  });

  it("signs changes with a real minus", () => {
    expect(formatUsdChange(12.3)).toBe("+$12.30");
    expect(formatUsdChange(-4)).toBe("−$4.00");
    expect(formatUsdChange(null)).toBe("–");
    expect(formatUsdChange(0.004)).toBe("< +$0.01");
    expect(formatUsdChange(-0.004)).toBe("> −$0.01");
  });
});

describe("shares and percentages", () => {
  it("turns fractions into percentages", () => {
    expect(formatPct(0.1234)).toBe("12.3%");
    expect(formatPct(1)).toBe("100.0%");
    expect(formatPct(0.5, 0)).toBe("50%");
    expect(formatPct(null)).toBe("–");
  });

  it("shows changes of a share in percentage points", () => {
    expect(formatPctPoints(0.021)).toBe("+2.1 pp");
    expect(formatPctPoints(-0.008)).toBe("−0.8 pp");
    expect(formatPctPoints(0.00001)).toBe("0.0 pp");
  });
});

describe("quantities", () => {
  it("gives GPU-hours a precision that suits their size", () => {
    expect(formatGpuHours(0.8117)).toBe("0.812 GPU-h");
    expect(formatGpuHours(5.75)).toBe("5.75 GPU-h");
    expect(formatGpuHours(26.53)).toBe("26.5 GPU-h");
    expect(formatGpuHours(1204.4)).toBe("1,204 GPU-h");
  });

  it("formats bytes in binary units", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(85_899_345_920)).toBe("80.0 GiB");
    expect(formatBytes(1536)).toBe("1.50 KiB");
    expect(formatBytes(null)).toBe("–");
  });

  it("formats step times and durations", () => {
    expect(formatMs(0.42)).toBe("0.42 ms");
    expect(formatMs(12.34)).toBe("12.3 ms");
    expect(formatMs(1240)).toBe("1.24 s");
    expect(formatDuration(7500)).toBe("2 h 05 m");
    expect(formatDuration(250)).toBe("4 m 10 s");
    expect(formatDuration(12)).toBe("12 s");
    expect(formatDuration(90_000)).toBe("1 d 1 h");
  });

  it("formats rates with SI prefixes", () => {
    expect(formatSi(525_631_399_415_282, "FLOP/s")).toBe("526 TFLOP/s");
    expect(formatSi(12_300)).toBe("12.3K");
  });
});

describe("dates", () => {
  it("shows dates and times in UTC, as the API gives them", () => {
    expect(formatDate("2026-11-30")).toBe("Nov 30, 2026");
    expect(formatDateTime("2026-11-30T22:17:20.000113Z")).toBe("Nov 30, 2026, 22:17 UTC");
    expect(formatMonth("2026-11")).toBe("November 2026");
    expect(formatDate(null)).toBe("–");
  });
});

describe("explained figures", () => {
  it("formats a figure in the unit the analysis names", () => {
    expect(formatWithUnit(5.29, "USD")).toBe("$5.29");
    expect(formatWithUnit(0.5312, "ratio")).toBe("53.1%");
    expect(formatWithUnit(3600, "GPU-s")).toBe("1.00 GPU-h");
    expect(formatWithUnit("bf16", "")).toBe("bf16");
    expect(formatWithUnit(null, "USD")).toBe("–");
    expect(formatWithUnit(3, "steps")).toBe("3 steps");
    // What the issue found printed raw: "1 ratio of steps", "97 %", "0 count".
    expect(formatWithUnit(1, "ratio of steps")).toBe("100.0% of steps");
    expect(formatWithUnit(97, "%")).toBe("97%");
    expect(formatWithUnit(0, "count")).toBe("0");
    expect(formatWithUnit(0.0002, "ratio")).toBe("0.020%");
    expect(formatWithUnit(17226.5, "s")).toBe("4 h 47 m");
    expect(formatWithUnit(0.25, "per 1k steps")).toBe("0.25 per 1,000 steps");
  });

  it("shows raw inputs exactly, big and tiny ones in exponent form", () => {
    expect(formatPlain(1796076860000113000)).toBe("1.7961e+18");
    expect(formatPlain(8)).toBe("8");
    expect(formatPlain(6.52)).toBe("6.52");
    expect(formatPlain(null)).toBe("null");
    expect(formatPlain("bf16")).toBe("bf16");
  });
});

describe("evidence figures", () => {
  it("shows a range of dollars low to high, one figure when both ends agree, a dash when unknown", () => {
    expect(formatUsdRange(12, 18.5)).toBe("$12.00–$18.50");
    expect(formatUsdRange(3, 3)).toBe("$3.00");
    expect(formatUsdRange(null, 4)).toBe("–");
  });

  it("shows a reference in the unit the evidence names", () => {
    expect(formatEvidenceValue(2.1, "ms/step")).toBe("2.10 ms per step");
    expect(formatEvidenceValue(0.38, "MFU")).toBe("38.0% MFU");
    expect(formatEvidenceValue(70, "s")).toBe("1 m 10 s");
    expect(formatEvidenceValue(4.25, "s")).toBe("4.25 s"); // as formatSeconds writes it everywhere
    expect(formatEvidenceValue(null, "s")).toBe("–");
  });

  it("turns internal names into words but leaves code a reader types alone", () => {
    expect(plainWords("data_stall share of billed GPU time")).toBe("data stall share of billed GPU time");
    expect(plainWords("8 ranks reported but world_size is 1")).toBe("8 ranks reported but world size is 1");
    expect(plainWords("set num_workers=8 or call torch.cuda.empty_cache()")).toBe("set num_workers=8 or call torch.cuda.empty_cache()");
    expect(plainWords("post `gpu_count` with the run")).toBe("post `gpu_count` with the run");
    expect(plainWords("of which caused by stragglers (see STRAGGLER)")).toBe("of which caused by stragglers (see the straggler recommendation)");
    expect(plainWords("Free CPU for the loader workers first: see HOST_CONTENTION.")).toBe("Free CPU for the loader workers first: see the host contention recommendation.");
    expect(plainWords("idle: phase:eval")).toBe("idle: phase · eval");
    expect(plainWords("idle: no_steps")).toBe("idle: no steps");
    expect(plainWords("idle: startup")).toBe("idle: start-up");
    expect(plainWords("comm_ns not reported by 1 rank(s)")).toBe("communication time not reported by 1 rank(s)");
  });
});

describe("one format per quantity, rounded once", () => {
  it("shows an amount under a cent honestly, never $0.00 for money that was spent", () => {
    expect(formatUsd(0.0021)).toBe("< $0.01");
    expect(formatUsd(0.004999)).toBe("< $0.01");
    expect(formatUsd(0.005)).toBe("$0.01");
    expect(formatUsd(-0.002)).toBe("> −$0.01");
    expect(formatUsd(0)).toBe("$0.00");
    // A run of a fraction of a cent shows its figures to the tenth of a mill.
    expect(usdDigitsFor(0.0021)).toBe(4); // at most four decimals: a figure, never a float's tail
    expect(formatUsd(0.0021, { digits: usdDigitsFor(0.0021) })).toBe("$0.0021");
    expect(formatUsd(0.00004, { digits: 4 })).toBe("< $0.0001");
    expect(usdDigitsFor(0.05)).toBe(4);
    expect(usdDigitsFor(0.5)).toBe(2);
    expect(usdDigitsFor(1234)).toBe(2);
    expect(usdDigitsFor(0)).toBe(2);
    expect(formatInput(undefined, 0.00042, "USD")).toBe("$0.0004");
  });

  it("writes a rate from unrounded figures once: the price, never the rounded cost over hours", () => {
    // $0.04 rounded over 0.0512 GPU-h reads $0.78; the exact $0.041984 over them is the $0.82 price.
    expect(formatUsdPerGpuHour(0.041984 / 0.0512)).toBe("$0.82 per GPU-hour");
    expect(formatUsdRate(38.4)).toBe("$38.40");
    expect(formatUsdRate(7.910012)).toBe("$7.91"); // a computed rate: cents, not "$7.9100"
    expect(formatUsdRate(0.4321)).toBe("$0.4321"); // a price-book price keeps its four decimals
    expect(formatUsdRate(0.0123)).toBe("$0.0123");
    expect(formatUsdRate(null)).toBe("–");
    expect(formatInput("usd_per_gpu_hour_30d", 4.8000001, "USD/GPU-h")).toBe("$4.80 per GPU-hour");
    expect(formatInput("segment_0_usd_per_gpu_hour", 7.91)).toBe("$7.91 per GPU-hour");
  });

  it("gives GPU-hours one precision for a card and the column total beside it", () => {
    // A run of seconds keeps two significant digits, never "0.00" or "0.000 GPU-h" for time it billed.
    expect(formatGpuHours(0.0021)).toBe("0.0021 GPU-h");
    expect(formatGpuHours(0.005)).toBe("0.0050 GPU-h");
    expect(formatGpuHours(0.05)).toBe("0.050 GPU-h");
    expect(formatGpuHours(0.0000004)).toBe("< 0.0001 GPU-h");
    expect(formatGpuHours(0)).toBe("0.000 GPU-h");
  });

  it("keeps percentages and percentage points apart, with a real minus and small shares legible", () => {
    expect(formatShare(0.00043)).toBe("0.043%");
    expect(formatShare(0.000043)).toBe("0.0043%");
    expect(formatShare(0.0000091)).toBe("< 0.001%");
    expect(formatShare(-0.0000091)).toBe("> −0.001%");
    expect(formatShare(0.1234)).toBe("12.3%");
    expect(formatShare(0)).toBe("0.0%");
    expect(formatPct(-0.052)).toBe("−5.2%");
    expect(formatPct(-0.00001)).toBe("0.0%");
    expect(formatPctPoints(-0.052)).toBe("−5.2 pp");
    expect(formatEvidenceValue(0.00043, "MFU")).toBe("0.043% MFU");
    // A difference of two shares (a baseline's MFU) reads in points in the popover as in the table.
    expect(formatExplainValue(-0.052, "ratio", "delta = run_mfu_step_time - baseline_mfu_step_time")).toBe("−5.2 pp");
    expect(formatExplainValue(0.43, "ratio", "mfu = achieved / peak")).toBe("43.0%");
  });

  it("writes a duration the same way in a sentence, a card and a popover", () => {
    expect(formatSeconds(133.5)).toBe(formatDuration(133.5));
    expect(formatSeconds(133.5)).toBe("2 m 14 s");
    expect(formatEvidenceValue(133.5, "s")).toBe("2 m 14 s");
    expect(formatInput("startup_seconds", 133.5)).toBe("2 m 14 s");
    expect(formatSeconds(12.34)).toBe("12.3 s");
    expect(formatSeconds(0.25)).toBe("250 ms");
  });

  it("explains formulas in product words: no unit factors, no segment numbers", () => {
    const f = humanFormula("round_half_up(Σ_segments gpu_count * seconds_in_segment * usd_per_gpu_hour / 3600, cents)");
    expect(f).not.toMatch(/10⁹|\/ 3600|segment|round_half_up|_/);
    expect(f).toContain("rounded to the cent");
    expect(humanFormula("gpu_count * (end_ns - allocation_start_ns) / 1e9")).toBe("GPUs × (end − allocation start)".replace("−", "-"));
    expect(inputName("segment_0_seconds")).toBe("price period 1: billed time");
    expect(inputName("segment_1_usd_per_gpu_hour")).toBe("price period 2: price");
  });
});
