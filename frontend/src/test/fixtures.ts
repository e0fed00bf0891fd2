// Test data shaped like the portal API's answers (docs/portal-api.md). Used only by tests.
import type { Analysis, CategoryEvidence, CategoryFigure, CheckpointAdvice, JobAttempt, JobDetail, Leaderboard, Recommendation, RunDetail, RunRow, Series } from "../api/types";

export function runRow(over: Partial<RunRow> = {}): RunRow {
  return {
    id: "11111111-1111-4111-8111-111111111111",
    name: "pretrain-a",
    team: "nlp",
    project: "llm",
    status: "finished",
    gpu_model: "H100-SXM",
    gpu_key: "H100-SXM",
    gpu_count: 8,
    tags: [],
    started_at: "2026-11-20T10:00:00+00:00",
    finished_at: "2026-11-20T12:00:00+00:00",
    gpu_hours: 16,
    cost_usd: 104.32,
    waste_usd: 40.1,
    recoverable_usd: 21.5,
    waste_share: 0.3844,
    mfu: 0.31,
    analysed: true,
    ...over,
  };
}

export function leaderboard(rows: { key: string; name: string; recoverable_usd: number; cost_usd: number }[]): Leaderboard {
  return {
    period: { start: "2026-11-01", end: "2026-11-30", label: "30d" },
    previous: { start: "2026-10-02", end: "2026-10-31" },
    rows: rows.map((r) => ({
      ...r,
      runs: 3,
      gpu_hours: 10,
      waste_usd: r.cost_usd / 2,
      waste_share: 0.5,
      mfu: 0.3,
      previous: null,
      change: null,
    })),
  };
}

const CATS = ["useful_compute", "compute_inefficiency", "data_stall", "comm_exposed", "host_overhead", "idle"] as const;
type Cat = (typeof CATS)[number];

export const PEER_RUN_IDS = ["22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333"];
/** The run's allocation start (ns): the fixture series starts here; the data-stall stretch is 0:01–0:03. */
export const T0_NS = Date.UTC(2026, 10, 20, 10, 0, 0) * 1e6;

export function evidence(over: Partial<CategoryEvidence> = {}): CategoryEvidence {
  return {
    kind: "none",
    summary: "",
    unit: "ms/step",
    run_value: null,
    reference_value: null,
    low_reference: null,
    high_reference: null,
    window: null,
    peer_run_ids: [],
    capped: false,
    ...over,
  };
}

/**
 * One category of each evidence kind: compute inefficiency against peers, data stall against the
 * run's own best stretch, exposed communication with no evidence (so $0 recoverable), host
 * overhead against a target and capped at 50%, idle against the project's median start-up.
 */
function categories(): Record<Cat, CategoryFigure> {
  const fig = (usd: number, recoverable: [number, number, number], cap: number, ev: CategoryEvidence): CategoryFigure => ({
    gpu_seconds: usd * 550,
    usd,
    share: usd / 104,
    recoverable_usd: recoverable[0],
    recoverable_low_usd: recoverable[1],
    recoverable_high_usd: recoverable[2],
    cap,
    evidence: ev,
  });
  return {
    useful_compute: fig(40, [0, 0, 0], 0, evidence()),
    compute_inefficiency: fig(10, [4, 3, 6], 1, evidence({
      kind: "peers",
      summary: "Two comparable runs of this project on H100-SXM reached 38.0% MFU; this run averaged 31.0%.",
      unit: "MFU",
      run_value: 0.31,
      reference_value: 0.38,
      low_reference: 0.35,
      high_reference: 0.41,
      peer_run_ids: PEER_RUN_IDS,
    })),
    data_stall: fig(25, [20.1, 15, 22], 1, evidence({
      kind: "own_stretch",
      summary: "The run's best 200-step stretch waited 2.1 ms per step for data; the run averaged 45.3 ms.",
      run_value: 45.3,
      reference_value: 2.1,
      low_reference: 4.2,
      high_reference: 1.5,
      window: { t_start_ns: T0_NS + 1e9, t_end_ns: T0_NS + 3e9, steps: 200 },
    })),
    comm_exposed: fig(5, [0, 0, 0], 1, evidence({ kind: "none", summary: "No stretch of the run overlapped communication with compute, so none of it is called recoverable." })),
    host_overhead: fig(3, [1.5, 1.2, 1.5], 0.5, evidence({ kind: "target", summary: "Host overhead of 10.0 ms per step against a target of 2.0 ms per step.", run_value: 10, reference_value: 2, low_reference: 4, high_reference: 2, capped: true })),
    idle: fig(21, [7.9, 6, 9], 1, evidence({ kind: "project_median", summary: "Start-up took 3 m 00 s; the project's median start-up is 1 m 10 s.", unit: "s", run_value: 180, reference_value: 70, low_reference: 90, high_reference: 60 })),
  };
}

export function recommendation(over: Partial<Recommendation> = {}): Recommendation {
  return {
    code: "DATA_STALL",
    title: "GPUs wait for input batches",
    category: "data_stall",
    severity: "high",
    evidence: [{ observation: "data_stall share of billed GPU time", value: 0.24, unit: "ratio" }],
    fixes: ["Raise DataLoader(num_workers=...)"],
    saving_usd: 20.1,
    claims: { data_stall: 20.1 },
    saving_usd_per_month: 1256.25,
    recurrence: { kind: "recurring", project_gpu_hours_30d: 1000, other_runs_30d: 41, run_gpu_hours: 16 },
    explain: { value: 20.1, unit: "USD", formula: "claims.data_stall", inputs: { data_stall: 20.1 } },
    ...over,
  };
}

export function analysis(over: Partial<Analysis> = {}): Analysis {
  return {
    run_id: "r",
    cost_usd: 104,
    gpu_seconds: 57600,
    gpu_hours: 16,
    unpriced_gpu_seconds: 0,
    mfu: 0.31,
    mfu_step_time: 0.4,
    target_mfu: 0.5,
    peak_known: true,
    gpu_util_pct: 93,
    waste_usd: 64,
    recoverable_usd: 33.5,
    recoverable_low_usd: 25.2,
    recoverable_high_usd: 38.5,
    usd_per_month_at_run_rate: 38000,
    categories: categories(),
    dropped_rows: { non_rising_start: 0, reused_step: 0 },
    idle: [{ label: "startup", gpu_seconds: 11000, usd_cents: 2100 }],
    ranks: [],
    stragglers: [],
    memory: {
      capacity_bytes: 85899345920,
      peak_bytes_max: 60e9,
      peak_rank: 0,
      peak_fraction_of_capacity: 0.7,
      headroom_bytes: 25e9,
      reserved_bytes_max: 62e9,
      allocated_bytes_max: 50e9,
      fragmentation_mean: 0.2,
      alloc_retries_total: 3,
      alloc_retries_per_1k_steps: 0.5,
      oom_count: 0,
    },
    host: { hosts: [], gpu_util_pct_mean: 93, host_overhead_share: 0.03 },
    recommendations: [recommendation()],
    warnings: [],
    analysed_at: "2026-11-20T12:05:00+00:00",
    complete: true,
    explain: {
      cost_usd: { value: 104, unit: "USD", formula: "round_half_up(Σ_segments gpu_count * seconds * usd_per_gpu_hour / 3600, cents)", inputs: { gpu_count: 8, segment_0_usd_per_gpu_hour: 6.52 } },
      recoverable_usd: { value: 33.5, unit: "USD", formula: "Σ_categories recoverable_usd", inputs: {} },
    },
    ...over,
  };
}

export function series(n = 4): Series {
  const col = (v: number | null) => Array.from({ length: n }, () => v);
  return {
    width_ns: 1e9,
    t_start_ns: Array.from({ length: n }, (_, i) => T0_NS + i * 1e9),
    steps: col(3) as number[],
    step_ms: col(300),
    data_ms: col(100),
    forward_ms: col(60),
    backward_ms: col(120),
    optimizer_ms: col(10),
    comm_ms: col(null),
    host_ms: col(10),
    tokens_per_s: col(1000),
    samples_per_s: col(10),
    mfu: col(0.3),
    mem_allocated_bytes: col(4e9),
    mem_reserved_bytes: col(5e9),
    mem_peak_bytes: col(4.5e9),
    gpu_util_pct: col(95),
    alloc_retries: col(0) as number[],
  };
}

export function runDetail(over: Partial<RunDetail> = {}): RunDetail {
  return {
    run: {
      id: "11111111-1111-4111-8111-111111111111",
      name: "pretrain-a",
      team: "nlp",
      project: "llm",
      status: "finished",
      gpu_model: "H100-SXM",
      gpu_count: 8,
      world_size: 8,
      nodes: 1,
      provider: "",
      region: "",
      pricing_tier: "on_demand",
      dtype: "bf16",
      allocation_start: "2026-11-20T10:00:00Z",
      started_at: "2026-11-20T10:03:00Z",
      finished_at: "2026-11-20T12:00:00Z",
      last_seen_at: "2026-11-20T12:00:00Z",
      tags: ["demo"],
      config: {},
      environment: {},
      ranks: [{ rank: 0, host: "node-0", counters: {} }],
    },
    analysis: analysis(),
    series: series(),
    phases: [],
    ...over,
  };
}

/** A fetch stand-in answering by path prefix; records every request. */
export function mockFetch(routes: Record<string, unknown | ((url: string, init?: RequestInit) => unknown)>) {
  const calls: { url: string; init?: RequestInit }[] = [];
  const fn = async (input: RequestInfo | URL, init?: RequestInit) => {
    const url = String(input);
    calls.push({ url, init });
    const key = Object.keys(routes)
      .filter((k) => url.startsWith(k))
      .sort((a, b) => b.length - a.length)[0];
    if (key === undefined) return new Response(JSON.stringify({ error: { code: "not_found", message: `no route for ${url}` } }), { status: 404 });
    const body = routes[key];
    const value = await (typeof body === "function" ? (body as (u: string, i?: RequestInit) => unknown)(url, init) : body);
    if (value instanceof Response) return value;
    return new Response(JSON.stringify(value), { status: 200, headers: { "Content-Type": "application/json" } });
  };
  return { fn, calls };
}

// Jobs (GET /api/v1/jobs/{id}): three attempts of one job, the first two ended by failures.
const JOB_DAY = "2026-11-20T";
const at = (hhmm: string) => `${JOB_DAY}${hhmm}:00Z`;
type Seg = [kind: string, from: string, to: string];

export function jobAttempt(over: Partial<JobAttempt> & { index: number }, segs: Seg[] = []): JobAttempt {
  return {
    run_id: `a${over.index}a${over.index}a${over.index}a-0000-4000-8000-00000000000${over.index}`,
    name: `pretrain-attempt-${over.index}`,
    attempt: over.index - 1,
    status: "finished",
    end_cause: "finished",
    end_detail: "",
    started_at: segs.length ? at(segs[0][1]) : null,
    billed_from: segs.length ? at(segs[0][1]) : null,
    ended_at: segs.length ? at(segs[segs.length - 1][2]) : null,
    cost_usd: 100,
    lost_usd: { rework: 0, restart: 0, checkpoint: 0, total: 0 },
    restored_step: null,
    rework_steps: null,
    checkpoints: { count: 0, blocking_s: 0, bytes: 0, async: false },
    segments: segs.map(([kind, from, to]) => ({ kind, start: at(from), end: at(to) })),
    ...over,
  };
}

/** 11 segments: restart 2, rework 2, checkpoint 2, work 5. */
export function jobAttempts(): JobAttempt[] {
  return [
    jobAttempt(
      { index: 1, status: "failed", end_cause: "oom", end_detail: "torch.OutOfMemoryError", cost_usd: 280, lost_usd: { rework: 0, restart: 0, checkpoint: 1.5, total: 1.5 }, checkpoints: { count: 1, blocking_s: 120, bytes: 40 * 2 ** 30, async: false } },
      [["work", "00:00", "01:00"], ["checkpoint", "01:00", "01:02"], ["work", "01:02", "03:30"]],
    ),
    jobAttempt(
      { index: 2, status: "crashed", end_cause: "sigkill", cost_usd: 270, lost_usd: { rework: 42, restart: 13.5, checkpoint: 0.75, total: 56.25 }, restored_step: 1200, rework_steps: [1200, 2999], checkpoints: { count: 1, blocking_s: 60, bytes: 40 * 2 ** 30, async: false } },
      [["restart", "03:40", "03:50"], ["rework", "03:50", "04:20"], ["work", "04:20", "06:00"], ["checkpoint", "06:00", "06:01"], ["work", "06:01", "07:00"]],
    ),
    jobAttempt(
      { index: 3, attempt: null, cost_usd: 260, lost_usd: { rework: 21, restart: 13.5, checkpoint: 0, total: 34.5 }, restored_step: 3600, rework_steps: [3600, 4100] },
      [["restart", "07:05", "07:15"], ["rework", "07:15", "07:30"], ["work", "07:30", "10:00"]],
    ),
  ];
}

export function checkpointAdvice(over: Partial<CheckpointAdvice> = {}): CheckpointAdvice {
  return {
    kind: "interval",
    text: "Checkpoint every 40 m instead of every 2 h: lost rework shrinks more than the extra checkpoints cost.",
    checkpoint_cost_s: 90,
    restart_cost_s: 600,
    mtbf_s: 12600,
    current_interval_s: 7200,
    recommended_interval_s: 2400,
    young_daly_s: 1506,
    saving_usd_per_month: 1840.5,
    async_saving_usd_per_month: null,
    curve: [[600, 5200], [1200, 3100], [2400, 2400], [4800, 3300], [7200, 4240]],
    ...over,
  };
}

export function jobDetail(over: Partial<JobDetail> = {}): JobDetail {
  const attempts = over.attempts ?? jobAttempts();
  return {
    id: 42,
    key: "torchelastic/3f2a9c",
    source: "torchelastic",
    project: "llm",
    team: "nlp",
    attempts_total: attempts.length,
    attempts_shown: attempts.length,
    cost_usd: 810,
    lost_usd: { rework: 63, restart: 27, checkpoint: 2.25, total: 92.25 },
    lost_gpu_hours: { rework: 6, restart: 2.5, checkpoint: 0.25, total: 8.75 },
    attempts,
    failure_rate: { failures: 2, wall_hours: 10, mtbf_hours: 3.5, source: "job", evidence: "2 failures in 10.0 hours of this job's attempts: one every 3.5 hours." },
    advice: checkpointAdvice(),
    warnings: [],
    ...over,
  };
}
