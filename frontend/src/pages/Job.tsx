import { Link, useParams } from "react-router";

import type { ApiError } from "../api/client";
import { useApi } from "../api/hooks";
import type { JobDetail } from "../api/types";
import { Async, ErrorState } from "../components/States";
import { Card, PageHeader, Stat } from "../components/ui";
import { formatGpuHours, formatNumber, formatPct, formatUsd } from "../lib/format";
import { CAUSE_HELP, CAUSE_LABEL, isFailure, jobApiPath, LOST_CAUSES } from "../lib/jobs";
import { usePeriodLink } from "../lib/links";
import { AdviceCard, FailureRateCard } from "./job/Advice";
import { AttemptsTable } from "./job/Attempts";
import { JobTimeline } from "./job/Timeline";

const SOURCE_LABEL: Record<string, string> = { explicit: "named by the agent", torchelastic: "torchelastic", slurm: "Slurm", kubernetes: "Kubernetes" };

export function JobPage() {
  const { id = "" } = useParams();
  return <JobLoader key={id} id={id} />;
}

function JobLoader({ id }: { id: string }) {
  const state = useApi<JobDetail>(jobApiPath(id));
  if (state.error) return <JobNotFound error={state.error} onRetry={state.reload} />;
  return (
    <div className="page">
      <Async state={state} loadingRows={8}>
        {(job) => <JobView job={job} />}
      </Async>
    </div>
  );
}

/** A job that is not there (or not yours to see) still leaves a way back. */
function JobNotFound({ error, onRetry }: { error: ApiError; onRetry: () => void }) {
  const { link } = usePeriodLink();
  return (
    <div className="page" data-testid="job-not-found">
      <ErrorState error={error} onRetry={onRetry} />
      <nav className="card-links state-links" aria-label="Ways back">
        <Link to={link("/jobs")}>← All jobs</Link>
        <Link to={link("/runs")}>Runs</Link>
        <Link to={link("/")}>Overview</Link>
      </nav>
    </div>
  );
}

export function JobView({ job, now }: { job: JobDetail; now?: number }) {
  const { link } = usePeriodLink();
  const shown = job.attempts.slice(0, Math.max(0, job.attempts_shown));
  const failures = job.attempts.filter((a) => isFailure(a.end_cause)).length;
  const capped = job.attempts_shown < job.attempts_total;
  const first = shown.length ? Math.min(...shown.map((a) => a.index)) : 0;
  const last = shown.length ? Math.max(...shown.map((a) => a.index)) : 0;
  return (
    <>
      <PageHeader
        crumbs={[
          { to: link(`/teams/${encodeURIComponent(job.team)}`), label: job.team },
          { to: link(`/projects/${encodeURIComponent(job.project)}`), label: job.project },
          { to: link(`/jobs?project=${encodeURIComponent(job.project)}`), label: "Jobs" },
        ]}
        title={<span className="mono job-key">{job.key}</span>}
        subtitle={
          <span className="meta-line">
            <span>Job</span>
            <span data-testid="job-attempts">
              {formatNumber(job.attempts_total)} attempt{job.attempts_total === 1 ? "" : "s"}
            </span>
            {!capped && <span>{formatNumber(failures)} ended by a failure</span>}
            {job.source && <span>launcher: {SOURCE_LABEL[job.source] ?? job.source}</span>}
          </span>
        }
      />
      {(job.warnings.length > 0 || capped) && (
        <div className="notice notice-bad job-warnings" role="status" data-testid="job-warnings">
          <ul className="warnings">
            {capped && (
              <li data-testid="attempts-capped">
                Only {formatNumber(job.attempts_shown)} of this job&apos;s {formatNumber(job.attempts_total)} attempts are drawn and listed (attempts {formatNumber(first)}–{formatNumber(last)}); the dollars above and the failure rate count every attempt.
              </li>
            )}
            {job.warnings.map((w, i) => (
              <li key={i}>{w}</li>
            ))}
          </ul>
        </div>
      )}
      <div className="stats stats-job" data-testid="job-stats">
        <Stat label="Cost" testId="job-cost" value={formatUsd(job.cost_usd)} sub={`${formatNumber(job.attempts_total)} attempt${job.attempts_total === 1 ? "" : "s"}`} />
        <Stat
          label="Lost to failures"
          tone="warn"
          testId="job-lost"
          value={formatUsd(job.lost_usd.total)}
          sub={
            <>
              {formatGpuHours(job.lost_gpu_hours.total)}
              {job.cost_usd > 0 && <> · {formatPct(job.lost_usd.total / job.cost_usd)} of cost</>}
            </>
          }
        />
        {LOST_CAUSES.map((c) => (
          <Stat key={c} label={CAUSE_LABEL[c]} testId={`job-lost-${c}`} value={formatUsd(job.lost_usd[c])} sub={<span title={CAUSE_HELP[c]}>{formatGpuHours(job.lost_gpu_hours[c])}</span>} />
        ))}
      </div>
      <Card
        title="Attempts over time"
        id="timeline"
        actions={<span className="muted small">{capped ? `attempts ${formatNumber(first)}–${formatNumber(last)} of ${formatNumber(job.attempts_total)}` : "every attempt, one lane · hover a segment for its times"}</span>}
      >
        <JobTimeline attempts={shown} lost={job.lost_usd} cost={job.cost_usd} now={now} />
      </Card>
      <div className="grid grid-1-1">
        <FailureRateCard rate={job.failure_rate} />
        <AdviceCard advice={job.advice} rate={job.failure_rate} />
      </div>
      <Card title="Attempts" id="attempts" actions={<span className="muted small">{capped ? `${formatNumber(shown.length)} of ${formatNumber(job.attempts_total)} shown` : `${formatNumber(shown.length)} in start order`} · open one for its run page</span>}>
        <AttemptsTable attempts={shown} />
      </Card>
    </>
  );
}
