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
    expect(formatEvidenceValue(4.25, "s")).toBe("4.3 s");
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
  });
});
