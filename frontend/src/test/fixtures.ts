// Test data shaped like the portal API's answers (docs/portal-api.md). Used only by tests.
import type { Analysis, Leaderboard, RunDetail, RunRow, Series } from "../api/types";

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

export function analysis(over: Partial<Analysis> = {}): Analysis {
  const usd = [40, 10, 25, 5, 3, 21];
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
    usd_per_month_at_run_rate: 38000,
    categories: Object.fromEntries(
      CATS.map((c, i) => [c, { gpu_seconds: usd[i] * 550, usd: usd[i], share: usd[i] / 104, recoverability: 0.5, recoverable_usd: usd[i] / 2 }]),
    ) as Analysis["categories"],
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
    recommendations: [
      {
        code: "DATA_STALL",
        title: "GPUs wait for input batches",
        category: "data_stall",
        severity: "high",
        evidence: [{ observation: "mean wait for the next batch per step", value: 116.5, unit: "ms" }],
        fixes: ["Raise DataLoader(num_workers=...)"],
        estimated_saving_usd_per_month: 9388.93,
      },
    ],
    warnings: [],
    analysed_at: "2026-11-20T12:05:00+00:00",
    complete: true,
    explain: {
      cost_usd: { value: 104, unit: "USD", formula: "round_half_up(Σ_segments gpu_count * seconds * usd_per_gpu_hour / 3600, cents)", inputs: { gpu_count: 8, segment_0_usd_per_gpu_hour: 6.52 } },
      recoverable_usd: { value: 33.5, unit: "USD", formula: "Σ_categories usd * recoverability", inputs: {} },
    },
    ...over,
  };
}

export function series(n = 4): Series {
  const col = (v: number | null) => Array.from({ length: n }, () => v);
  return {
    width_ns: 1e9,
    t_start_ns: Array.from({ length: n }, (_, i) => 1_790_000_000e9 + i * 1e9),
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
