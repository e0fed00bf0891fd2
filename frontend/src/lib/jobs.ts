// Jobs and their attempts: the API's paths, the product's words for causes and end causes, and
// the timeline's layout (a pure function of the API's answer, tested without a browser).
import type { JobAttempt, LostCause, SegmentKind } from "../api/types";
import { formatDateTime, formatDuration } from "./format";

/** The jobs API, part of the portal API (docs/portal-api.md, Jobs): `/api/v1/portal/jobs`. */
export const JOBS_API = "jobs";

export function jobApiPath(id: string | number): string {
  return `${JOBS_API}/${encodeURIComponent(String(id))}`;
}

export function projectFailuresApiPath(project: string, month: string): string {
  return `projects/${encodeURIComponent(project)}/failures?month=${encodeURIComponent(month)}`;
}

export function jobPath(id: string | number): string {
  return `/jobs/${encodeURIComponent(String(id))}`;
}

export const JOB_SORTS = ["lost", "cost", "recent"] as const;
export type JobSort = (typeof JOB_SORTS)[number];
export const DEFAULT_JOB_SORT: JobSort = "lost";
export const JOBS_PAGE_SIZE = 50;

export const LOST_CAUSES: LostCause[] = ["rework", "restart", "checkpoint"];
export const SEGMENT_KINDS: SegmentKind[] = ["restart", "rework", "checkpoint", "work"];

export const CAUSE_LABEL: Record<SegmentKind, string> = {
  rework: "Rework",
  restart: "Restart",
  checkpoint: "Checkpoint",
  work: "Work",
};

/** What each cause is, in one line (legends and column tooltips). */
export const CAUSE_HELP: Record<SegmentKind, string> = {
  rework: "steps computed again after a restart, from the restored checkpoint to where the failed attempt had got",
  restart: "billed time between a failed attempt's last step and the next attempt's first step",
  checkpoint: "time training was blocked saving or restoring checkpoints",
  work: "the rest of the billed time: steps computed once",
};

export function isSegmentKind(kind: string): kind is SegmentKind {
  return (SEGMENT_KINDS as string[]).includes(kind);
}

const END_CAUSE_WORDS: Record<string, string> = {
  finished: "finished",
  oom: "out of memory",
  collective_timeout: "collective timeout",
  exception: "exception",
  sigterm: "terminated (SIGTERM)",
  sigkill: "killed (SIGKILL)",
  silent: "went silent",
};

/** An end cause in words; an attempt still running has none. */
export function endCauseLabel(cause: string, status?: string): string {
  if (!cause) return status === "running" ? "running" : "–";
  return END_CAUSE_WORDS[cause] ?? cause.replace(/_/g, " ");
}

/** Whether an end cause is a failure (anything but a clean finish, or still running). */
export function isFailure(cause: string): boolean {
  return !!cause && cause !== "finished";
}

/** "4 h 10 m" from seconds, "–" for none; an interval as a checkpoint schedule reads it. */
export function formatInterval(seconds: number | null | undefined): string {
  return formatDuration(seconds);
}

// --- The timeline -------------------------------------------------------------------------------

/** The timeline's drawing width (SVG user units); the SVG scales to its card's width. */
export const TIMELINE_WIDTH = 1000;
/**
 * The narrowest a lost-time segment is drawn, so a 20-second restart in a week-long job shows —
 * while the widened segments take at most a tenth of the lane; past that (hundreds of attempts)
 * every segment is drawn at its true width, so lost time never looks bigger than it was.
 */
export const MIN_LOST_WIDTH = 1.5;
/** The least room between two attempt labels above the lane. */
const LABEL_SPACING = 36;
/** Past this many attempts a start is a tick above the lane, not a line across it (which would hide the lane). */
export const FULL_BOUNDARIES_MAX = 100;

export interface TimelineRect {
  key: string;
  attempt: number;
  kind: SegmentKind;
  x: number;
  width: number;
  title: string;
}

export interface TimelineBoundary {
  attempt: number;
  x: number;
  /** Whether there is room for its label ("#12") above the lane. */
  label: boolean;
  title: string;
}

export interface TimelineLayout {
  start: number;
  end: number;
  rects: TimelineRect[];
  boundaries: TimelineBoundary[];
  /** Whether attempt starts are ticks above the lane (many attempts) rather than lines across it. */
  ticks: boolean;
  /** Seconds of each kind drawn (every attempt shown); work counts only time no lost segment covers. */
  seconds: Record<SegmentKind, number>;
}

function ms(iso: string | null | undefined): number | null {
  if (!iso) return null;
  const t = Date.parse(iso);
  return Number.isFinite(t) ? t : null;
}

function attemptStart(a: JobAttempt): number | null {
  const starts = [ms(a.billed_from), ms(a.started_at), ...a.segments.map((s) => ms(s.start))].filter((t): t is number => t !== null);
  return starts.length ? Math.min(...starts) : null;
}

function segmentTitle(a: JobAttempt, kind: SegmentKind, from: number, to: number): string {
  return `Attempt ${a.index} · ${CAUSE_LABEL[kind].toLowerCase()} · ${formatDateTime(new Date(from).toISOString())} – ${formatDateTime(new Date(to).toISOString())} (${formatDuration((to - from) / 1000)})`;
}

/** Merged [from, to) spans (ms), sorted. */
function merged(spans: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  for (const [a, b] of [...spans].sort((p, q) => p[0] - q[0])) {
    const last = out[out.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/**
 * An attempt's work seconds: its work segments less the lost segments over them. The API draws
 * the billed span as work with what was lost on top; segments that only touch add up the same.
 */
export function netWorkSeconds(a: JobAttempt, now: number = Date.now()): number {
  const spans = (kind: (k: string) => boolean) =>
    merged(
      a.segments
        .filter((s) => kind(s.kind))
        .map((s): [number, number] => [ms(s.start) ?? 0, ms(s.end) ?? now])
        .filter(([p, q]) => q > p),
    );
  const work = spans((k) => k === "work" || !isSegmentKind(k));
  const lost = spans((k) => isSegmentKind(k) && k !== "work");
  let total = 0;
  for (const [p, q] of work) {
    let covered = 0;
    for (const [x, y] of lost) covered += Math.max(0, Math.min(q, y) - Math.max(p, x));
    total += q - p - covered;
  }
  return total / 1000;
}

/**
 * Every attempt on one shared lane of time: each segment a rect of its kind, every attempt's
 * start a boundary. `now` closes the segments of an attempt still running that have no end.
 */
export function timelineLayout(attempts: readonly JobAttempt[], now: number = Date.now()): TimelineLayout {
  const seconds: Record<SegmentKind, number> = { restart: 0, rework: 0, checkpoint: 0, work: 0 };
  let start = Infinity;
  let end = -Infinity;
  for (const a of attempts) {
    const s = attemptStart(a);
    if (s !== null) start = Math.min(start, s);
    for (const seg of a.segments) {
      const from = ms(seg.start);
      const to = ms(seg.end) ?? now;
      if (from !== null) start = Math.min(start, from);
      end = Math.max(end, to);
    }
    const e = ms(a.ended_at) ?? (a.segments.length ? null : now);
    if (e !== null) end = Math.max(end, e);
  }
  if (!Number.isFinite(start) || !Number.isFinite(end)) return { start: 0, end: 0, rects: [], boundaries: [], ticks: false, seconds };
  if (end <= start) end = start + 1000;
  const span = end - start;
  const x = (t: number) => ((t - start) / span) * TIMELINE_WIDTH;

  const rects: TimelineRect[] = [];
  const boundaries: TimelineBoundary[] = [];
  let lastLabel = -Infinity;
  const lostSegments = attempts.reduce((n, a) => n + a.segments.filter((s) => s.kind !== "work" && isSegmentKind(s.kind)).length, 0);
  const minWidth = lostSegments * MIN_LOST_WIDTH <= TIMELINE_WIDTH / 10 ? MIN_LOST_WIDTH : 0;
  for (const a of attempts) {
    const s = attemptStart(a);
    if (s !== null) {
      const bx = x(s);
      const label = bx - lastLabel >= LABEL_SPACING;
      if (label) lastLabel = bx;
      boundaries.push({ attempt: a.index, x: bx, label, title: `Attempt ${a.index} starts ${formatDateTime(new Date(s).toISOString())}` });
    }
    seconds.work += netWorkSeconds(a, now);
    a.segments.forEach((seg, i) => {
      const from = ms(seg.start);
      const to = ms(seg.end) ?? now;
      if (from === null || to < from) return;
      const kind: SegmentKind = isSegmentKind(seg.kind) ? seg.kind : "work";
      if (kind !== "work") seconds[kind] += (to - from) / 1000;
      const x0 = x(from);
      let width = Math.max(0, x(to) - x0);
      if (kind !== "work") width = Math.max(width, minWidth);
      rects.push({ key: `${a.index}-${i}`, attempt: a.index, kind, x: Math.min(x0, TIMELINE_WIDTH - width), width, title: segmentTitle(a, kind, from, to) });
    });
  }
  // Lost time drawn over work, so a short restart is never hidden under a neighbour's work.
  rects.sort((p, q) => (p.kind === "work" ? 0 : 1) - (q.kind === "work" ? 0 : 1));
  return { start, end, rects, boundaries, ticks: boundaries.length > FULL_BOUNDARIES_MAX, seconds };
}
