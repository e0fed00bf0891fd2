import { jobAttempt, jobAttempts } from "../test/fixtures";
import { checkpointCurveOption, hoursLabel } from "./charts";
import { endCauseLabel, isFailure, MIN_LOST_WIDTH, netWorkSeconds, TIMELINE_WIDTH, timelineLayout } from "./jobs";
import { chartPalette } from "./theme";

describe("job timeline layout", () => {
  it("puts every segment on one lane of the job's time, in order, lost time over work", () => {
    const layout = timelineLayout(jobAttempts());
    expect(layout.rects).toHaveLength(11);
    expect(layout.rects.slice(0, 5).every((r) => r.kind === "work")).toBe(true);
    expect(layout.boundaries.map((b) => b.attempt)).toEqual([1, 2, 3]);
    expect(layout.boundaries[0].x).toBe(0);
    const last = layout.rects.find((r) => r.attempt === 3 && r.kind === "work")!;
    expect(last.x + last.width).toBeCloseTo(TIMELINE_WIDTH);
    expect(layout.seconds).toEqual({ restart: 1200, rework: 2700, checkpoint: 180, work: 31020 });
  });

  it("draws a short lost stretch at least a visible width", () => {
    const layout = timelineLayout([
      jobAttempt({ index: 1 }, [["work", "00:00", "23:59"]]),
      jobAttempt({ index: 2 }, [["restart", "23:59", "23:59"]]),
    ]);
    const restart = layout.rects.find((r) => r.kind === "restart")!;
    expect(restart.width).toBe(MIN_LOST_WIDTH);
    expect(restart.x + restart.width).toBeLessThanOrEqual(TIMELINE_WIDTH);
  });

  it("draws every segment at its true width when widening them would make lost time look bigger", () => {
    const iso = (s: number) => new Date(Date.UTC(2026, 10, 1) + s * 1000).toISOString();
    const many = Array.from({ length: 300 }, (_, i) =>
      jobAttempt({ index: i + 1, segments: [{ kind: "work", start: iso(i * 3600), end: iso(i * 3600 + 3000) }, { kind: "restart", start: iso(i * 3600), end: iso(i * 3600 + 10) }] }),
    );
    const restarts = timelineLayout(many).rects.filter((r) => r.kind === "restart");
    expect(restarts).toHaveLength(300);
    expect(restarts[0].width).toBeLessThan(0.01);
  });

  it("closes a running attempt's open segment at now, and draws nothing for no attempts", () => {
    const running = jobAttempt({ index: 1, ended_at: null, status: "running", end_cause: "" }, [["work", "00:00", "01:00"]]);
    running.segments[0].end = null as unknown as string;
    const now = Date.parse("2026-11-20T02:00:00Z");
    const layout = timelineLayout([running], now);
    expect(layout.end).toBe(now);
    expect(layout.rects[0].width).toBeCloseTo(TIMELINE_WIDTH);
    expect(timelineLayout([]).rects).toEqual([]);
  });

  it("counts an attempt's work net of the lost time drawn over it", () => {
    const a = jobAttempt({ index: 1 }, [["work", "00:00", "01:00"], ["restart", "00:00", "00:05"], ["rework", "00:05", "00:20"], ["checkpoint", "00:10", "00:12"]]);
    expect(netWorkSeconds(a)).toBe(40 * 60);
    expect(netWorkSeconds(jobAttempts()[1])).toBe((100 + 59) * 60);
  });

  it("names end causes in words", () => {
    expect(endCauseLabel("collective_timeout")).toBe("collective timeout");
    expect(endCauseLabel("", "running")).toBe("running");
    expect(endCauseLabel("silent")).toBe("went silent");
    expect(isFailure("finished")).toBe(false);
    expect(isFailure("oom")).toBe(true);
  });
});

describe("checkpoint curve chart", () => {
  it("draws the overhead against the interval with the current and recommended intervals marked", () => {
    const option = checkpointCurveOption([[600, 5200], [2400, 2400], [7200, 4240]], 7200, 2400, chartPalette("light")) as {
      series: { data: number[][]; markLine: { data: { name: string; xAxis: number }[] } }[];
      xAxis: { type: string; min: number; max: number };
    };
    // In hours along the axis: 10 min, 40 min, 2 h.
    expect(option.series[0].data.map(([x, y]) => [+x.toFixed(4), y])).toEqual([[0.1667, 5200], [0.6667, 2400], [2, 4240]]);
    expect(option.series[0].markLine.data.map((m) => [m.name, +m.xAxis.toFixed(4)])).toEqual([["current", 2], ["recommended", 0.6667]]);
    expect(option.xAxis).toMatchObject({ type: "value", max: 2 });
    expect(hoursLabel(0.5)).toBe("30 min");
    expect(hoursLabel(1.5)).toBe("1.5 h");
    expect(hoursLabel(12 / 3600)).toBe("12 s");
  });

  it("marks only the recommended interval where the job has no current one", () => {
    const option = checkpointCurveOption([[600, 5200], [2400, 2400]], null, 1200, chartPalette("dark")) as { series: { markLine: { data: { name: string }[] } }[] };
    expect(option.series[0].markLine.data.map((m) => m.name)).toEqual(["recommended"]);
  });
});
