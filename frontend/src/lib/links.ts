// Links between pages keep the reader's period, so a figure followed from one page to the next is
// the same figure: a leaderboard's November total opens the team's November, not its last 30 days.
// Each page names its period its own way: ?period= (overview, leaderboards, teams, projects, runs
// pages), ?month= (finance), ?from=&to= (the runs list, whose time filter is the billed days).
import { useCallback } from "react";
import { useLocation } from "react-router";

import { currentMonth, DEFAULT_PERIOD, isDay, isMonth, isPeriod, periodDates, rangePeriod } from "./urlState";

/** The period a page shows, from its path and query; null for the default (the last 30 days). */
export function pagePeriod(pathname: string, params: URLSearchParams): string | null {
  if (pathname === "/runs") {
    const from = params.get("from") ?? "";
    const to = params.get("to") ?? "";
    return isDay(from) && isDay(to) && from <= to ? rangePeriod(from, to) : null;
  }
  if (pathname === "/finance") {
    const month = params.get("month") ?? "";
    return isMonth(month) ? month : currentMonth();
  }
  const period = (params.get("period") ?? "").trim();
  return isPeriod(period) && period !== DEFAULT_PERIOD ? period : null;
}

/**
 * `path` with the period carried over in the target page's own terms. What the path already says
 * wins (a link to one day's runs keeps its day). Finance takes months only; another period does
 * not follow a link there.
 */
export function withPeriod(path: string, period: string | null, now: Date = new Date()): string {
  const [pathname, query = ""] = path.split("?", 2);
  const params = new URLSearchParams(query);
  if (period) {
    if (pathname === "/runs") {
      if (!params.has("from") && !params.has("to")) {
        const { start, end } = periodDates(period, now);
        params.set("from", start);
        params.set("to", end);
      }
    } else if (pathname === "/finance") {
      if (isMonth(period) && !params.has("month")) params.set("month", period);
    } else if (pathname !== "/settings" && !params.has("period")) {
      params.set("period", period);
    }
  }
  const search = params.toString();
  return search ? `${pathname}?${search}` : pathname;
}

/** The period of the page being shown, and a function that carries it onto a link. */
export function usePeriodLink(): { period: string | null; link: (path: string) => string } {
  const location = useLocation();
  const period = pagePeriod(location.pathname, new URLSearchParams(location.search));
  const link = useCallback((path: string) => withPeriod(path, period), [period]);
  return { period, link };
}

/** The runs list filtered to a scope over a range of days (a period, or one day of a chart). */
export function runsPath(filters: { team?: string; project?: string; from: string; to: string }): string {
  const params = new URLSearchParams();
  if (filters.team) params.set("team", filters.team);
  if (filters.project) params.set("project", filters.project);
  params.set("from", filters.from);
  params.set("to", filters.to);
  return `/runs?${params.toString()}`;
}
