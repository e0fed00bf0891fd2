import { useMemo } from "react";

import type { JobAttempt, LostByCause } from "../../api/types";
import { formatDateTime, formatDuration, formatNumber, formatUsd } from "../../lib/format";
import { CAUSE_HELP, CAUSE_LABEL, SEGMENT_KINDS, TIMELINE_WIDTH, timelineLayout } from "../../lib/jobs";

const LANE_Y = 4;
const LANE_H = 28;
const HEIGHT = LANE_Y * 2 + LANE_H;

/**
 * Every attempt of a job on one shared lane of time: restart, rework, checkpoint and work shaded
 * by kind (the legend gives each cause's dollars), a line where each attempt starts and its number
 * above it where there is room. Drawn as an SVG that stretches to the card (rects only; labels are
 * HTML placed by percentage, so text never stretches); each segment names itself on hover.
 */
export function JobTimeline({ attempts, lost, cost, now }: { attempts: readonly JobAttempt[]; lost: LostByCause; cost: number; now?: number }) {
  const layout = useMemo(() => timelineLayout(attempts, now), [attempts, now]);
  const dollars = { ...lost, work: Math.max(0, cost - lost.total) };
  if (layout.rects.length === 0 && layout.boundaries.length === 0) {
    return <p className="muted">No attempt reported a step or a phase yet: nothing to draw.</p>;
  }
  const pct = (x: number) => `${(x / TIMELINE_WIDTH) * 100}%`;
  return (
    <div className="job-timeline" data-testid="job-timeline">
      <div className="timeline-labels" aria-hidden="true">
        {layout.boundaries
          .filter((b) => b.label)
          .map((b) => (
            <span key={b.attempt} className="timeline-label" style={{ left: pct(b.x) }}>
              #{b.attempt}
            </span>
          ))}
      </div>
      <svg
        className="timeline-svg"
        viewBox={`0 0 ${TIMELINE_WIDTH} ${HEIGHT}`}
        preserveAspectRatio="none"
        role="img"
        aria-label={`${formatNumber(attempts.length)} attempt${attempts.length === 1 ? "" : "s"} from ${formatDateTime(new Date(layout.start).toISOString())} to ${formatDateTime(new Date(layout.end).toISOString())}: ${SEGMENT_KINDS.map((k) => `${CAUSE_LABEL[k].toLowerCase()} ${formatDuration(layout.seconds[k])}`).join(", ")}`}
      >
        <rect className="timeline-track" x={0} y={LANE_Y} width={TIMELINE_WIDTH} height={LANE_H} />
        {layout.rects.map((r) => (
          <rect key={r.key} className={`seg seg-${r.kind}`} data-kind={r.kind} data-attempt={r.attempt} x={r.x} y={LANE_Y} width={r.width} height={LANE_H}>
            <title>{r.title}</title>
          </rect>
        ))}
        {layout.boundaries.map((b) => (
          <line key={b.attempt} className="timeline-boundary" data-attempt={b.attempt} x1={b.x} x2={b.x} y1={0} y2={layout.ticks ? LANE_Y + 5 : HEIGHT}>
            <title>{b.title}</title>
          </line>
        ))}
      </svg>
      <div className="timeline-axis muted small">
        <span>{formatDateTime(new Date(layout.start).toISOString())}</span>
        <span>{formatDuration((layout.end - layout.start) / 1000)} in all · gaps are time no attempt was billed</span>
        <span>{formatDateTime(new Date(layout.end).toISOString())}</span>
      </div>
      <ul className="timeline-legend" data-testid="timeline-legend">
        {SEGMENT_KINDS.map((k) => (
          <li key={k} data-kind={k} title={CAUSE_HELP[k]}>
            <span className={`seg-swatch seg-${k}`} aria-hidden="true" />
            <span>{k === "work" ? "Work" : CAUSE_LABEL[k]}</span>
            <strong>{formatUsd(dollars[k])}</strong>
            <span className="muted">{formatDuration(layout.seconds[k])}</span>
          </li>
        ))}
      </ul>
    </div>
  );
}
