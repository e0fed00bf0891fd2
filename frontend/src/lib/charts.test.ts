import { series, T0_NS } from "../test/fixtures";
import { dailyOption, elapsedLabel, gappedPoints, measuredIndices, mfuUtilOption, pairs, stepTimeOption } from "./charts";
import { chartPalette } from "./theme";

const p = chartPalette("light");
const T0 = T0_NS;

type S = { name: string; data: [number, number | null][]; stack?: string };

describe("chart data", () => {
  it("labels elapsed time like a clock", () => {
    expect(elapsedLabel(0)).toBe("0:00");
    expect(elapsedLabel(750)).toBe("12:30");
    expect(elapsedLabel(3723)).toBe("1:02:03");
  });

  it("leaves out windows in which no step started instead of drawing them as zero", () => {
    const s = series(4);
    s.steps = [3, 0, 2, 1];
    s.mfu = [0.3, 0, 0.31, 0.29];
    expect(measuredIndices(s, s.mfu, true)).toEqual([0, 2, 3]);
    expect(measuredIndices(s, s.mfu, false)).toEqual([0, 1, 2, 3]);
    const values = pairs(s, s.mfu, T0, 100).map(([, v]) => v ?? NaN);
    expect(values).toHaveLength(3);
    [30, 31, 29].forEach((v, i) => expect(values[i]).toBeCloseTo(v));
  });

  it("breaks the line across a long gap rather than bridging it", () => {
    const s = series(6);
    s.t_start_ns = [0, 1, 2, 3, 60, 61].map((sec) => T0 + sec * 1e9);
    const points = gappedPoints(s, [0, 1, 2, 3, 4, 5], () => 1, T0);
    expect(points).toEqual([[0, 1], [1, 1], [2, 1], [3, 1], [31.5, null], [60, 1], [61, 1]]);
  });

  it("stacks only the stages the agent measured, all on the same windows", () => {
    const s = series(3);
    const option = stepTimeOption(s, [], T0, p) as { series: S[] };
    const names = option.series.map((x) => x.name);
    expect(names).toEqual(["Data wait", "Forward", "Backward", "Optimizer", "Host overhead"]);
    expect(option.series.every((x) => x.stack === "step" && x.data.length === 3)).toBe(true);
    expect(option.series[0].data[0]).toEqual([0, 100]);
  });

  it("highlights a stretch of the run as a marked area beside the shaded phases", () => {
    const s = series(4);
    const phase = { name: "eval", t_start_ns: T0 + 3e9, dur_ns: 5e8, rank: null };
    type Area = { data: [{ name?: string; xAxis: number; itemStyle?: { color: string; opacity: number; borderWidth: number } }, { xAxis: number }][] };
    const plain = stepTimeOption(s, [phase], T0, p) as { series: (S & { markArea?: Area })[] };
    expect(plain.series[0].markArea?.data).toHaveLength(1);
    const lit = stepTimeOption(s, [phase], T0, p, { label: "Data stall: best stretch", t_start_ns: T0 + 1e9, t_end_ns: T0 + 3e9, color: "#4a7fe0" }) as { series: (S & { markArea?: Area })[] };
    const areas = lit.series[0].markArea!.data;
    expect(areas).toHaveLength(2);
    expect(areas[1][0]).toMatchObject({ name: "Data stall: best stretch", xAxis: 1 });
    expect(areas[1][1]).toEqual({ xAxis: 3 });
    // Drawn in the category's colour, translucent, and outlined (the phases are a faint wash).
    expect(areas[1][0].itemStyle).toMatchObject({ color: "#4a7fe038", borderWidth: 1.5 });
    expect(lit.series.slice(1).every((x) => x.markArea === undefined)).toBe(true);
  });

  it("draws MFU in percent next to GPU utilization with the target as a line", () => {
    const option = mfuUtilOption(series(2), 0.5, T0, p) as { series: (S & { markLine?: { data: { yAxis: number }[] } })[] };
    expect(option.series.map((x) => x.name)).toEqual(["GPU utilization (nvidia-smi)", "MFU"]);
    expect(option.series[1].data[0][1]).toBeCloseTo(30);
    expect(option.series[1].markLine?.data[0].yAxis).toBe(50);
  });

  it("draws every day of the period on a time axis, the six categories stacked and recoverable as a line", () => {
    const days = Array.from({ length: 30 }, (_, i) => ({
      day: `2026-11-${String(i + 1).padStart(2, "0")}`,
      runs: i === 4 ? 2 : 0,
      cost_usd: i === 4 ? 10 : 0,
      waste_usd: i === 4 ? 4 : 0,
      recoverable_usd: i === 4 ? 2 : 0,
      categories_usd: { useful_compute: i === 4 ? 6 : 0, compute_inefficiency: 0, data_stall: i === 4 ? 1 : 0, comm_exposed: 0, host_overhead: 0, idle: i === 4 ? 3 : 0 },
    }));
    const option = dailyOption(days, p) as { series: S[]; xAxis: { type: string; min: number; max: number }; useUTC: boolean; tooltip: { formatter: (x: unknown) => string } };
    expect(option.xAxis.type).toBe("time");
    expect(option.useUTC).toBe(true);
    expect(option.series.map((x) => x.name)).toEqual(["Useful compute", "Compute inefficiency", "Data stall", "Exposed communication", "Host overhead", "Idle", "Recoverable"]);
    expect(option.series.every((x) => x.data.length === 30)).toBe(true);
    expect(option.series[0].data[0][0]).toBe(Date.UTC(2026, 10, 1));
    expect(option.series[0].data[29][0] - option.series[0].data[0][0]).toBe(29 * 86_400_000);
    expect(option.xAxis.max - option.xAxis.min).toBe(30 * 86_400_000);
    const tip = option.tooltip.formatter([{ dataIndex: 4, seriesName: "Idle", marker: "", value: [Date.UTC(2026, 10, 5), 3] }]);
    expect(tip).toContain("Thu, Nov 5, 2026");
    expect(tip).toContain("Spend <b>$10.00</b> · 2 runs");
    expect(tip).toContain("Idle: <b>$3.00</b>");
  });

  it("without categories draws spend and recoverable", () => {
    const days = [{ day: "2026-11-01", cost_usd: 10, waste_usd: 4, recoverable_usd: 2 }];
    expect((dailyOption(days, p) as { series: S[] }).series.map((x) => x.name)).toEqual(["Spend", "Recoverable"]);
  });
});
