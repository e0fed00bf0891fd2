import { pagePeriod, runsPath, withPeriod } from "./links";
import { largestRemainder } from "./footing";

const NOW = new Date("2026-11-30T12:00:00Z");

describe("links keep the period", () => {
  it("reads each page's period in its own terms", () => {
    expect(pagePeriod("/leaderboards", new URLSearchParams("period=2026-11&kind=teams"))).toBe("2026-11");
    expect(pagePeriod("/teams/nlp", new URLSearchParams(""))).toBeNull();
    expect(pagePeriod("/", new URLSearchParams("period=bogus"))).toBeNull();
    expect(pagePeriod("/runs", new URLSearchParams("from=2026-11-01&to=2026-11-30"))).toBe("2026-11");
    expect(pagePeriod("/runs", new URLSearchParams("from=2026-11-03"))).toBeNull();
    expect(pagePeriod("/finance", new URLSearchParams("month=2026-10"))).toBe("2026-10");
  });

  it("carries it onto the target page's own terms", () => {
    expect(withPeriod("/teams/recsys", "2026-11", NOW)).toBe("/teams/recsys?period=2026-11");
    expect(withPeriod("/runs", "2026-11", NOW)).toBe("/runs?from=2026-11-01&to=2026-11-30");
    expect(withPeriod("/runs", "7d", NOW)).toBe("/runs?from=2026-11-24&to=2026-11-30");
    expect(withPeriod("/finance", "2026-11", NOW)).toBe("/finance?month=2026-11");
    expect(withPeriod("/finance", "7d", NOW)).toBe("/finance");
    expect(withPeriod("/leaderboards?kind=runs", "2026-11-03..2026-11-17", NOW)).toBe("/leaderboards?kind=runs&period=2026-11-03..2026-11-17");
    expect(withPeriod("/settings", "2026-11", NOW)).toBe("/settings");
    expect(withPeriod("/teams/nlp", null, NOW)).toBe("/teams/nlp");
    // What the link already says wins: one day's runs stay that day.
    expect(withPeriod("/runs?from=2026-11-05&to=2026-11-05", "2026-11", NOW)).toBe("/runs?from=2026-11-05&to=2026-11-05");
    expect(runsPath({ team: "nlp", from: "2026-11-05", to: "2026-11-05" })).toBe("/runs?team=nlp&from=2026-11-05&to=2026-11-05");
  });
});

describe("columns that foot", () => {
  it("rounds so the figures add up to the total shown under them", () => {
    const cats = [7.485, 7.485, 7.485];
    const shown = largestRemainder(cats, 22.455, 2);
    expect(Math.round(shown.reduce((a, b) => a + b, 0) * 100)).toBe(2246);
    shown.forEach((v, i) => expect(Math.abs(v - cats[i])).toBeLessThan(0.01));
    expect(largestRemainder([33.333, 33.333, 33.334], 100, 1)).toEqual([33.3, 33.3, 33.4]);
    expect(largestRemainder([], 0, 2)).toEqual([]);
  });

  it("always foots, whatever the figures", () => {
    for (let trial = 0; trial < 200; trial += 1) {
      const values = Array.from({ length: 1 + (trial % 9) }, (_, i) => ((trial * 7919 + i * 104729) % 100000) / 997);
      const total = values.reduce((a, b) => a + b, 0);
      const shown = largestRemainder(values, total, 2);
      expect(Math.round(shown.reduce((a, b) => a + b, 0) * 100)).toBe(Math.round(total * 100));
      shown.forEach((v, i) => expect(Math.abs(v - values[i])).toBeLessThan(0.0100001));
    }
  });
});
