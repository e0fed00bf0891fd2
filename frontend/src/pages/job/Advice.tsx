import { useMemo } from "react";

import type { CheckpointAdvice, FailureRate } from "../../api/types";
import { EChart } from "../../components/EChart";
import { Empty } from "../../components/States";
import { Card } from "../../components/ui";
import { checkpointCurveOption } from "../../lib/charts";
import { formatNumber, formatSeconds, formatUsd, isNum, plainWords } from "../../lib/format";
import { useChartPalette } from "../../lib/useChartPalette";

const KIND_LABEL: Record<string, string> = { interval: "checkpoint interval", async: "asynchronous checkpoints", both: "interval and asynchronous checkpoints" };

function seconds(v: number | null | undefined): string {
  return isNum(v) ? formatSeconds(v) : "–";
}

/** How often the job (or its project) fails, and the sentence that says what the rate rests on. */
export function FailureRateCard({ rate }: { rate: FailureRate }) {
  const source = rate.source === "job" ? "this job's attempts" : rate.source === "project" ? "the project's jobs" : null;
  return (
    <Card title="Failure rate" id="failure-rate">
      <ul className="kv-list kv-grid" data-testid="failure-rate">
        <li>
          <span className="muted">Failures</span>
          <span>{formatNumber(rate.failures)}</span>
        </li>
        <li>
          <span className="muted">Over</span>
          <span>{formatNumber(rate.wall_hours, rate.wall_hours < 10 ? 2 : 1)} hours</span>
        </li>
        <li>
          <span className="muted">Mean time between failures</span>
          <span data-testid="mtbf">{isNum(rate.mtbf_hours) ? formatSeconds(rate.mtbf_hours * 3600) : "no failure to measure it by"}</span>
        </li>
        <li>
          <span className="muted">Measured on</span>
          <span>{source ?? "–"}</span>
        </li>
      </ul>
      {rate.evidence && (
        <p className="small evidence-line" data-testid="failure-rate-evidence">
          {plainWords(rate.evidence)}
        </p>
      )}
    </Card>
  );
}

/**
 * The checkpoint advice: what to change and what it saves a month, the current interval against
 * the recommended one and Young/Daly's, and the overhead curve with both intervals marked. Without
 * advice, says why, in the failure rate's words.
 */
export function AdviceCard({ advice, rate }: { advice: CheckpointAdvice | null; rate: FailureRate }) {
  const palette = useChartPalette();
  const option = useMemo(() => (advice && advice.curve.length > 1 ? checkpointCurveOption(advice.curve, advice.current_interval_s, advice.recommended_interval_s, palette) : null), [advice, palette]);
  if (!advice) {
    return (
      <Card title="Checkpoint advice" id="advice">
        <div data-testid="no-advice">
          <Empty title="No advice">{rate.evidence ? plainWords(rate.evidence) : "There is no failure rate to plan checkpoints by."}</Empty>
        </div>
      </Card>
    );
  }
  return (
    <Card title="Checkpoint advice" id="advice" actions={<span className="badge badge-info">{KIND_LABEL[advice.kind] ?? advice.kind}</span>}>
      <div data-testid="advice">
        <p className="advice-text">{plainWords(advice.text)}</p>
        <div className="stats stats-compact">
          <div className="stat" data-testid="advice-current">
            <div className="stat-label">Interval now</div>
            <div className="stat-value">{isNum(advice.current_interval_s) ? seconds(advice.current_interval_s) : "unknown"}</div>
          </div>
          {isNum(advice.recommended_interval_s) ? (
            <div className="stat stat-accent" data-testid="advice-recommended">
              <div className="stat-label">Recommended</div>
              <div className="stat-value">{seconds(advice.recommended_interval_s)}</div>
            </div>
          ) : (
            <div className="stat" data-testid="advice-recommended">
              <div className="stat-label">Recommended</div>
              <div className="stat-value">keep it</div>
              <div className="stat-sub">
                <span>the interval is not what to change</span>
              </div>
            </div>
          )}
          {isNum(advice.young_daly_s) && (
            <div className="stat" data-testid="advice-young-daly">
              <div className="stat-label">Young/Daly</div>
              <div className="stat-value">{seconds(advice.young_daly_s)}</div>
              <div className="stat-sub">
                <span>√(2 × checkpoint cost × MTBF)</span>
              </div>
            </div>
          )}
          <div className="stat stat-accent" data-testid="advice-saving">
            <div className="stat-label">Saving a month</div>
            <div className="stat-value">{formatUsd(advice.saving_usd_per_month)}</div>
            {isNum(advice.async_saving_usd_per_month) && (
              <div className="stat-sub">
                <span data-testid="advice-async-saving">{formatUsd(advice.async_saving_usd_per_month)} / month with asynchronous checkpoints</span>
              </div>
            )}
          </div>
        </div>
        <ul className="kv-list kv-grid">
          <li>
            <span className="muted">A checkpoint blocks</span>
            <span>{seconds(advice.checkpoint_cost_s)}</span>
          </li>
          <li>
            <span className="muted">A restart costs</span>
            <span>{seconds(advice.restart_cost_s)}</span>
          </li>
          <li>
            <span className="muted">Mean time between failures</span>
            <span>{seconds(advice.mtbf_s)}</span>
          </li>
        </ul>
        {option ? (
          <EChart option={option} height={200} label={`Checkpoint overhead a month against the interval: now ${isNum(advice.current_interval_s) ? seconds(advice.current_interval_s) : "unknown"}${isNum(advice.recommended_interval_s) ? `, recommended ${seconds(advice.recommended_interval_s)}` : ""}`} />
        ) : isNum(advice.recommended_interval_s) ? (
          <p className="muted small">No curve to draw.</p>
        ) : null}
      </div>
    </Card>
  );
}
