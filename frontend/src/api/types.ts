// Shapes of the portal API (docs/portal-api.md) and the analysis it embeds. Fields the UI does
// not rely on are typed loosely on purpose: the API may add fields, never rename them.

import type { Category } from "../lib/categories";

export interface TeamRef {
  slug: string;
  name: string;
  role: string;
}

export interface SessionUser {
  username: string;
  is_finance: boolean;
  is_org_admin: boolean;
  teams: TeamRef[];
}

/** The ways in the sign-in page offers (docs/identity.md); absent from older servers. */
export interface SignInMethods {
  oidc: { label: string; url: string } | null;
  local_passwords: boolean;
}

export interface Session {
  authenticated: boolean;
  user: SessionUser | null;
  csrf_token: string;
  sign_in?: SignInMethods;
}

export interface RunRow {
  id: string;
  name: string;
  /** Who launched the run ("" when its agent did not say; absent from older servers). */
  launched_by?: string;
  team: string;
  team_name?: string;
  project: string;
  project_name?: string;
  status: string;
  gpu_model: string;
  gpu_key: string;
  gpu_count: number;
  tags: string[];
  /** The start of the run's billed time (its allocation_start), as every page dates a run. */
  started_at: string | null;
  /** The end of its billed time. */
  ended_at?: string | null;
  finished_at: string | null;
  gpu_hours: number | null;
  cost_usd: number | null;
  waste_usd: number | null;
  recoverable_usd: number | null;
  /** Lost to failures (rework, restarts, checkpoints); absent from older servers. */
  lost_usd?: number | null;
  waste_share: number | null;
  mfu: number | null;
  analysed: boolean;
  /** The whole run's cost (the same as `cost_usd` in the runs list). */
  whole_cost_usd?: number | null;
  /** With billed days (`from`/`to`): the run's figures on those days, from the run-days finance
   * sums; null without them, or before the run is analysed. */
  period_cost_usd?: number | null;
  period_gpu_hours?: number | null;
  period_waste_usd?: number | null;
  period_recoverable_usd?: number | null;
  period_lost_usd?: number | null;
}

/** The runs list's totals over every matching run (all pages), whole and within the billed days. */
export interface RunTotals {
  runs: number;
  gpu_hours: number;
  cost_usd: number;
  whole_cost_usd: number;
  waste_usd: number;
  recoverable_usd: number;
  lost_usd?: number;
  waste_share: number | null;
  period_gpu_hours: number | null;
  period_cost_usd: number | null;
  period_waste_usd: number | null;
  period_recoverable_usd: number | null;
  period_lost_usd?: number | null;
  period_waste_share: number | null;
}

/**
 * A run as tables list it. The runs list gives full rows; leaderboards, the overview's worst runs
 * and team/project top runs give figures over the period keyed by `key` (the run id).
 */
export type RunListItem = Partial<RunRow> & { id?: string; key?: string; name: string };

export interface Page<T> {
  count: number;
  page: number;
  page_size: number;
  /** Pages the count fills (at least 1). */
  pages?: number;
  results: T[];
  /** The runs list: its billed days (null without `from`/`to`) and totals over every page. */
  period?: { start: string | null; end: string | null } | null;
  totals?: RunTotals;
}

export interface Explained {
  value: unknown;
  unit: string;
  formula: string;
  inputs: Record<string, unknown>;
  input_units?: Record<string, string>;
}

/** What a category's recoverable dollars rest on (the reference a better run actually achieved). */
export type EvidenceKind = "own_stretch" | "peers" | "target" | "straggler" | "project_median" | "none";

export interface StretchWindow {
  t_start_ns: number;
  t_end_ns: number;
  steps: number;
}

export interface CategoryEvidence {
  kind: EvidenceKind | string;
  /** One plain-English sentence: what was compared with what. */
  summary: string;
  /** Unit of run_value and the references: "ms/step", "MFU" (a fraction) or "s". */
  unit: string;
  run_value: number | null;
  reference_value: number | null;
  low_reference: number | null;
  high_reference: number | null;
  /** The run's best stretch (own_stretch only), in the same clock as the series' t_start_ns. */
  window: StretchWindow | null;
  /** Comparable finished runs of the same project and GPU (peers only). */
  peer_run_ids: string[];
  /** The same runs with their names (older analyses have only the ids). */
  peer_runs?: { id: string; name: string }[];
  /** The organization's cap cut the figure down. */
  capped: boolean;
}

export interface CategoryFigure {
  gpu_seconds: number;
  usd: number;
  /** The category's dollars before rounding to cents (a run under a cent shows its split with them). */
  usd_exact?: number;
  share: number;
  recoverable_usd: number;
  recoverable_low_usd: number;
  recoverable_high_usd: number;
  /** The organization's cap on the share of the category that may be called recoverable (0..1). */
  cap: number;
  evidence: CategoryEvidence;
}

/** Rows the server refused or left out, per reason. */
export interface DroppedRows {
  non_rising_start: number;
  reused_step: number;
}

export interface RankFigure {
  rank: number;
  host: string;
  steps: number;
  gpu_seconds: Record<string, number>;
  usd: Record<string, number>;
  step_ns_mean: number | null;
  compute_ns_mean: number | null;
  data_ns_mean: number | null;
  comm_ns_mean: number | null;
  host_ns_mean: number | null;
  mfu_step_time: number | null;
  tokens: number;
  flops: number;
  mem_peak_bytes: number | null;
  slow_step_share: number | null;
  caused_wait_gpu_seconds: number;
}

export interface Straggler {
  rank: number;
  host: string;
  aligned_steps: number;
  slow_step_share: number;
  blamed_steps: number;
  excess_ns_mean: number;
  compute_ns_mean: number | null;
  median_rank_compute_ns_mean: number | null;
  data_ns_mean: number | null;
  median_rank_data_ns_mean: number | null;
  caused_wait_gpu_seconds: number;
  caused_wait_usd: number;
  /** its data, compute and host time per step beyond the other ranks' median */
  lead_ns_mean: number;
  own_excess_gpu_seconds: number;
  /** category -> USD of its own excess */
  own_excess_usd: Record<string, number>;
}

export interface MemoryDiagnostics {
  capacity_bytes: number | null;
  peak_bytes_max: number | null;
  peak_rank: number | null;
  peak_fraction_of_capacity: number | null;
  headroom_bytes: number | null;
  reserved_bytes_max: number | null;
  allocated_bytes_max: number | null;
  fragmentation_mean: number | null;
  alloc_retries_total: number | null;
  alloc_retries_per_1k_steps: number | null;
  oom_count: number;
}

export interface HostFigure {
  host: string;
  ranks: number[];
  samples: number;
  cpu_other_pct_mean: number | null;
  cpu_other_pct_p95: number | null;
  cpu_steal_pct_mean: number | null;
  cpu_steal_pct_p95: number | null;
  gpu_util_pct_mean: number | null;
  host_overhead_share: number | null;
  data_stall_share: number | null;
  contended: boolean;
}

export interface Evidence {
  observation: string;
  value: number | string | null;
  unit: string;
}

export interface Recommendation {
  code: string;
  title: string;
  category: string;
  severity: "high" | "medium" | "low" | "info" | string;
  evidence: Evidence[];
  fixes: string[];
  /** What this run would have saved; null for diagnostics without a price (memory, OOM, setup). */
  saving_usd: number | null;
  /** The recoverable dollars this recommendation claims, by category (no dollar claimed twice). */
  claims?: Record<string, number>;
  /** Only for recurring work: the saving at the project's trailing-30-day volume. */
  saving_usd_per_month: number | null;
  recurrence?: Recurrence;
  explain?: Explained | null;
}

export interface Recurrence {
  kind: "recurring" | "one_off" | string;
  /** "as_of_now": the project's 30 days as of reading (a live project); "before_run_end": the 30 days before the run ended. */
  basis?: "as_of_now" | "before_run_end" | string;
  as_of?: string;
  project_gpu_hours_30d: number;
  other_runs_30d: number;
  run_gpu_hours: number;
}

export interface IdleFigure {
  label: string;
  gpu_seconds: number;
  usd_cents: number;
  /** This part's recoverable cents before idle's cap (the parts add up to idle's). */
  recoverable_cents?: number;
  evidence?: CategoryEvidence | null;
}

export interface Analysis {
  run_id: string;
  cost_usd: number;
  /** The run's dollars before rounding to cents: rates and shares are computed from it. */
  cost_exact_usd?: number;
  /** Exact dollars over priced GPU-hours: the price the run paid, whatever its rounding. */
  usd_per_gpu_hour?: number | null;
  gpu_seconds: number;
  gpu_hours: number;
  unpriced_gpu_seconds: number;
  mfu: number | null;
  mfu_step_time: number | null;
  target_mfu: number;
  peak_known: boolean;
  gpu_util_pct: number | null;
  waste_usd: number;
  recoverable_usd: number;
  recoverable_low_usd: number;
  recoverable_high_usd: number;
  usd_per_month_at_run_rate: number | null;
  categories: Record<Category, CategoryFigure>;
  dropped_rows?: DroppedRows;
  idle: IdleFigure[];
  ranks: RankFigure[];
  stragglers: Straggler[];
  memory: MemoryDiagnostics;
  host: { hosts: HostFigure[]; gpu_util_pct_mean: number | null; host_overhead_share: number | null };
  recommendations: Recommendation[];
  warnings: string[];
  analysed_at: string;
  complete: boolean;
  /** The latest re-analysis failed: these figures are older. */
  analysis_error?: AnalysisError | null;
  explain?: Record<string, Explained>;
}

export interface AnalysisError {
  message: string;
  failures: number;
  retry_at: string | null;
}

export interface Series {
  width_ns: number;
  t_start_ns: number[];
  steps?: number[];
  step_ms: (number | null)[];
  data_ms: (number | null)[];
  forward_ms: (number | null)[];
  backward_ms: (number | null)[];
  optimizer_ms: (number | null)[];
  comm_ms: (number | null)[];
  host_ms: (number | null)[];
  tokens_per_s: (number | null)[];
  samples_per_s: (number | null)[];
  mfu: (number | null)[];
  mem_allocated_bytes: (number | null)[];
  mem_reserved_bytes: (number | null)[];
  mem_peak_bytes: (number | null)[];
  gpu_util_pct: (number | null)[];
  alloc_retries: number[];
}

export interface Phase {
  name: string;
  t_start_ns: number;
  dur_ns: number;
  rank: number | null;
}

export interface RunMeta {
  id: string;
  name: string;
  /** Who launched the run, as its agent reported it ("" when it did not say; absent from older servers). */
  launched_by?: string;
  team: string;
  team_name?: string;
  project: string;
  project_name?: string;
  status: string;
  gpu_model: string;
  gpu_key?: string;
  gpu_count: number;
  world_size: number;
  nodes: number;
  provider: string;
  region: string;
  pricing_tier: string;
  dtype: string | null;
  allocation_start: string | null;
  started_at: string | null;
  /** The run's time as every page uses it: its billed span. */
  billed_from?: string | null;
  billed_to?: string | null;
  finished_at: string | null;
  last_seen_at: string | null;
  tags: string[];
  config: Record<string, unknown>;
  environment: Record<string, unknown>;
  ranks: { rank: number; host: string; counters: Record<string, unknown> }[];
  /** The job this run is an attempt of, with its place among the attempts; null when none. */
  job?: RunJobRef | null;
}

/** The job a run is an attempt of (the run page's `job`). */
export interface RunJobRef {
  id: string | number;
  key: string;
  /** This run's place among the job's attempts, by start (1-based). */
  index: number;
  attempts_total: number;
}

export interface RunDetail {
  run: RunMeta;
  analysis_status?: "analysed" | "pending" | "failed";
  analysis_error?: AnalysisError | null;
  analysis: Analysis | null;
  series: Series | null;
  phases: Phase[];
}

export interface Figures {
  runs: number;
  gpu_hours: number;
  cost_usd: number;
  waste_usd: number;
  recoverable_usd: number;
  waste_share: number | null;
  mfu: number | null;
  /** Dollars lost to failures (rework, restarts, checkpoints across a job's attempts); absent from older servers. */
  lost_usd?: number;
}

export interface LeaderboardRow extends Figures {
  key: string;
  name: string;
  team?: string;
  team_name?: string;
  project?: string;
  project_name?: string;
  status?: string;
  gpu_model?: string;
  gpu_count?: number;
  started_at?: string;
  /** The first day with billed time; a previous period before it is not compared. */
  data_from?: string | null;
  previous: Figures | null;
  change: { cost_usd: number | null; recoverable_usd: number | null; waste_share: number | null; mfu: number | null } | null;
  /** Teams and projects: GPU time no run measured, from the node collectors (never in the run figures). */
  fleet?: { uninstrumented_usd: number; idle_held_usd: number };
  /** Runs: the period's cost (as `cost_usd`) and the whole run's beside it. */
  period_cost_usd?: number;
  whole_cost_usd?: number | null;
}

export interface PeriodInfo {
  start: string;
  end: string;
  label?: string;
}

export interface Leaderboard {
  period: PeriodInfo;
  previous: PeriodInfo;
  rows: LeaderboardRow[];
  /** Rows of the whole board (every page), the page shown, and what every row adds up to. */
  count?: number;
  page?: number;
  page_size?: number;
  pages?: number;
  totals?: Figures;
  /** The people board only: the runs with no launcher, beside the people's totals. */
  unattributed?: Figures;
  /** Set when the period is a closed month: its figures are the frozen ones. */
  closed_month?: ClosedMonthNote | null;
}

export interface DayFigures {
  day: string;
  runs?: number;
  gpu_hours?: number;
  cost_usd: number;
  waste_usd: number;
  recoverable_usd: number;
  categories_usd?: Record<string, number>;
}

export interface Overview {
  period: PeriodInfo;
  previous?: PeriodInfo;
  data_from?: string | null;
  totals: Figures;
  previous_totals: Figures | null;
  by_day: DayFigures[];
  by_category: Record<string, number>;
  by_gpu: { gpu: string; gpu_hours: number; cost_usd: number; recoverable_usd: number }[];
  worst_runs: RunListItem[];
  /** Set when the period is a closed month: its figures are the frozen ones. */
  closed_month?: ClosedMonthNote | null;
}

export interface EntityPage {
  period?: PeriodInfo;
  previous?: PeriodInfo;
  data_from?: string | null;
  team?: { slug: string; name: string; display_name?: string; [k: string]: unknown };
  project?: { slug: string; name: string; display_name?: string; team?: string; team_name?: string; [k: string]: unknown };
  totals: Figures;
  previous_totals?: Figures | null;
  by_day: DayFigures[];
  by_category: Record<string, number>;
  projects?: (Figures & { key?: string; slug?: string; name: string; team?: string; team_name?: string })[];
  top_runs: RunListItem[];
  /** Set when the period is a closed month: its figures are the frozen ones. */
  closed_month?: ClosedMonthNote | null;
}

export interface FinanceRow {
  team: string;
  team_name?: string;
  project: string;
  project_name?: string;
  price_entry_ids?: number[];
  runs: number;
  gpu_hours: number;
  cost_usd: number;
  categories_usd: Record<string, number>;
  waste_usd: number;
  recoverable_usd: number;
  /** Dollars lost to failures (rework, restarts, checkpoints); absent from older servers and closed months before it. */
  lost_usd?: number;
}

export interface PriceEntry {
  id: number;
  gpu: string;
  provider: string;
  region: string;
  tier: string;
  usd_per_gpu_hour: string | number;
  effective_from: string;
  effective_to: string | null;
  is_example: boolean;
  note?: string;
  updated_at?: string;
}

/** A price as the audit trail stored it; rows written by the example seed hold only some fields. */
export interface PriceSnapshot {
  gpu?: string;
  provider?: string;
  region?: string;
  tier?: string;
  usd_per_gpu_hour?: string;
  effective_from?: string;
  effective_to?: string | null;
  is_example?: boolean;
  note?: string;
}

/** One change to the price book (GET /api/v1/pricing/audit, newest first). */
export interface PriceAuditRow {
  id: number;
  entry_id: number | null;
  action: "create" | "update" | "close" | "delete" | string;
  actor: string;
  at: string;
  before: PriceSnapshot | null;
  after: PriceSnapshot | null;
}

/** What caused a closed month's live figures to move since it was closed. */
export interface ClosedMonthCause {
  kind: "price" | "policy" | "model" | "telemetry" | "telemetry_removed" | string;
  /** A policy change: the waste model settings before and after (target_mfu, recoverability). */
  before?: Record<string, unknown>;
  after?: Record<string, unknown>;
  at?: string;
  /** Who changed the price (null where the reader may not see the price audit). */
  by?: string | null;
  action?: string;
  price_entry_id?: number | null;
  gpu?: string;
  provider?: string;
  region?: string;
  tier?: string;
  before_usd_per_gpu_hour?: string | null;
  after_usd_per_gpu_hour?: string | null;
  from_version?: number;
  to_version?: number;
  runs_added?: number;
  runs_removed?: number;
}

type MoneyDiff = { cost_usd: number; waste_usd: number; recoverable_usd: number; gpu_hours?: number };

/** A page over a closed month shows its frozen figures; this says so, and what live figures say now. */
export interface ClosedMonthNote {
  month: string;
  closed_at: string;
  closed_by: string | null;
  frozen: MoneyDiff;
  live: MoneyDiff;
  difference: MoneyDiff;
  differs: boolean;
  as_of: string;
  causes: ClosedMonthCause[];
}

/** A closed review's dated adjustment: live against frozen, per row that differs, and why. */
export interface FinanceAdjustment {
  as_of: string;
  differs: boolean;
  live_totals: MoneyDiff & { runs: number };
  difference: MoneyDiff;
  rows: { team: string; team_name?: string; project: string; project_name?: string; frozen_cost_usd: number; live_cost_usd: number; difference: MoneyDiff }[];
  causes: ClosedMonthCause[];
}

export interface MonthHistoryEntry {
  action: "close" | "reopen" | string;
  by: string | null;
  at: string;
  reason: string;
  totals: { cost_usd?: number; [k: string]: unknown } | null;
}

export interface FinanceReport {
  month: string;
  closed: boolean;
  closed_at: string | null;
  closed_by: string | null;
  model_version?: number | null;
  adjustment?: FinanceAdjustment | null;
  history?: MonthHistoryEntry[];
  /** Whether the month can be closed now, and why not (not over yet, or no spend). */
  closable?: { ok: boolean; reason: string | null };
  rows: FinanceRow[];
  totals: Omit<FinanceRow, "team" | "project" | "team_name" | "project_name" | "price_entry_ids">;
  price_entries: PriceEntry[];
  /** The imported cloud invoice against the fleet's measured GPU cost (absent in months closed before it). */
  invoice?: InvoiceReconciliation | null;
}

export interface OrgSettings {
  target_mfu: number;
  recoverability: Record<string, number>;
  crash_after_s: number;
  /** A privacy setting: whether the people leaderboard exists (off by default). */
  people_leaderboard?: boolean;
  defaults: { target_mfu: number; recoverability: Record<string, number> };
}

export interface ApiTokenRow {
  id: number;
  prefix: string;
  kind: "project" | "personal" | "node" | "scim" | string;
  project: string | null;
  name: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  /** A node token's nodes (exact hostnames or globs like gpu-a-*); empty for other kinds. */
  hostnames: string[];
  token?: string;
  /** A personal token's person. */
  user: string | null;
  /** Whom it belongs to: a personal token's person, else whoever made it (null if unknown). */
  owner: string | null;
  expires_at: string | null;
  /** The client address of the last use (behind a trusted proxy, the forwarded one). */
  last_used_address: string | null;
  state: "active" | "expiring" | "rotated" | "expired" | "revoked";
  /** The id of the token that replaced it by rotation. */
  replaced_by: number | null;
  /** A rotated token works until then. */
  overlap_ends_at: string | null;
  /** When it stops (or stopped) working: the first of revocation, the overlap's end, expiry. */
  ends_at: string | null;
}

/** POST /portal/tokens/{id}/rotate: the new token (shown once) and the old one, now rotated. */
export interface TokenRotated {
  token: ApiTokenRow;
  old: ApiTokenRow;
}

export interface GpuSpec {
  key: string;
  vendor: string;
  name: string;
  memory_bytes: number | null;
  peak_tflops: Record<string, number>;
  sources: string[];
  notes: string;
}

/** One figure of a run against its project baseline (waste/baseline.py). */
export interface BaselineMetric {
  metric: string;
  label: string;
  unit: "ms" | "ratio" | string;
  baseline: number | null;
  run: number | null;
  delta: number | null;
  delta_pct: number | null;
  baseline_share: number | null;
  run_share: number | null;
  /** The difference priced at the project's trailing-30-day volume; null where not priced (MFU). */
  delta_usd_per_month: number | null;
  explain: Explained;
}

/** The run page's `baseline`: this run against the rolling median of comparable finished runs. */
export interface BaselineComparison {
  status: "compared" | "no_baseline" | "pending";
  /** Why there is no baseline (no comparable finished runs, no step signature, not analysed). */
  reason: string | null;
  complete: boolean;
  gpu_key: string | null;
  signature: { flops_per_step: number | null; tokens_per_step: number | null; samples_per_step: number | null } | null;
  tolerance: number;
  candidates: number;
  baseline_runs: { id: string; name: string; started_at: string | null; step_ms: number; mfu_step_time: number | null }[];
  volume: { days: number; project_gpu_hours_30d: number; project_usd_30d: number; usd_per_gpu_hour_30d: number | null } | null;
  metrics: BaselineMetric[];
  delta_usd_per_month: number | null;
  summary: string;
}

export type RunDetailWithBaseline = RunDetail & { baseline?: BaselineComparison | null };

/** GET /api/v1/portal/compare?runs=a,b: one side per run, in the order asked. */
export interface CompareSide {
  run: RunRow & { world_size: number; nodes: number; dtype: string };
  analysis_status: "analysed" | "pending" | "failed";
  analysis: {
    cost_usd: number;
    waste_usd: number;
    recoverable_usd: number;
    /** Lost to failures; absent from older servers. */
    lost_usd?: number | null;
    gpu_hours: number;
    categories: Partial<Record<Category, { usd: number; share: number; gpu_seconds: number }>>;
    composition: { step_ms: number; parts_ms: Record<string, number>; shares: Record<string, number | null>; mfu_step_time: number | null } | null;
    mfu: number | null;
    mfu_step_time: number | null;
    target_mfu: number | null;
    tokens_per_s: number | null;
    memory: MemoryDiagnostics | null;
    stragglers: { rank: number; host: string; slow_step_share: number; blamed_steps: number; caused_wait_usd: number }[];
    straggler_wait_usd: number;
    ranks_reporting: number | null;
    steps: number | null;
    complete: boolean;
  } | null;
}

export interface KeyDiff {
  differences: { key: string; values: { present: boolean; value: unknown }[] }[];
  same: number;
}

export interface CompareResult {
  runs: CompareSide[];
  parts: string[];
  config: KeyDiff;
  environment: KeyDiff;
}

/** Per team: the invoice's GPU lines (billed), the fleet's priced GPU time (measured), the rest. */
export interface InvoiceRow {
  team: string | null;
  team_name: string;
  billed_usd: number;
  measured_usd: number;
  unexplained_usd: number;
}

export interface InvoiceReconciliation {
  rows: InvoiceRow[];
  totals: Omit<InvoiceRow, "team" | "team_name">;
  unmatched_billed_usd: number | null;
  lines: number;
}

// Alerts (phantomhub/alerts/api.py, docs/alerts.md).
export type AlertRuleKind = "waste_rate" | "efficiency_drop" | "straggler" | "silent_run" | "idle_gpu" | "forecast_over_budget";

export interface AlertRule {
  id: number;
  name: string;
  kind: AlertRuleKind;
  scope: "org" | "team" | "project";
  team: string | null;
  project: string | null;
  params: Record<string, number | string>;
  for_s: number;
  window_s: number;
  /** null: hidden, shown only to those who may change the rule (writable). */
  webhook_url: string | null;
  webhook_format: "generic" | "slack";
  webhook_secret: string | null;
  email_to: string[] | null;
  enabled: boolean;
  muted: boolean;
  snoozed_until: string | null;
  firing: number;
  writable: boolean;
  created_at: string;
  updated_at: string;
}

export interface AlertParamSpec {
  name: string;
  lo: number;
  hi: number;
  choices: string[];
  help: string;
}

export interface AlertRuleList {
  rules: AlertRule[];
  kinds: Record<AlertRuleKind, AlertParamSpec[]>;
  /** How often rules are evaluated: the shortest duration a rule may ask for. */
  evaluation_interval_s?: number;
}

export interface AlertStateRow {
  id: number;
  rule: number;
  rule_name: string;
  subject: string;
  subject_label: string;
  run_id: string | null;
  url: string | null;
  state: "ok" | "pending" | "firing" | "resolved";
  value: number | null;
  figure: string | null;
  threshold: number | null;
  usd_per_hour: number | null;
  evidence: Record<string, unknown>;
  pending_since: string | null;
  fired_at: string | null;
  resolved_at: string | null;
  notified: boolean;
  muted: boolean;
  snoozed_until: string | null;
  evaluated_at: string | null;
  writable: boolean;
}

export interface AlertDeliveryRow {
  id: number;
  rule: number;
  rule_name: string;
  alert: number | null;
  subject_label: string | null;
  event: "firing" | "resolved" | "test";
  channel: "webhook" | "email";
  /** null: hidden, shown only to those who may change the rule. */
  target: string | null;
  status: "pending" | "sent" | "failed";
  attempts: number;
  status_code: number | null;
  error: string;
  next_attempt_at: string | null;
  created_at: string;
  sent_at: string | null;
}

// Jobs: one training objective across the attempts (runs) its launcher restarted (docs/api.md,
// Jobs and attempts). Money in USD, times ISO 8601.

/** The three ways a job loses money to failures, and their total. */
export interface LostByCause {
  rework: number;
  restart: number;
  checkpoint: number;
  total: number;
}

export type LostCause = "rework" | "restart" | "checkpoint";
export type SegmentKind = LostCause | "work";
export type EndCause = "finished" | "oom" | "collective_timeout" | "exception" | "sigterm" | "sigkill" | "silent" | "";

/** GET /api/v1/jobs: one row. */
export interface JobRow {
  id: string | number;
  key: string;
  source: string;
  project: string;
  team: string;
  attempts: number;
  failures: number;
  cost_usd: number;
  lost_usd: number;
  started_at: string | null;
  last_started_at: string | null;
  status: string;
}

export interface JobList {
  count: number;
  results: JobRow[];
}

export interface AttemptSegment {
  kind: SegmentKind | string;
  start: string;
  end: string;
}

export interface JobAttempt {
  run_id: string;
  name: string;
  /** Order by start, 1-based. */
  index: number;
  /** The launcher's restart count, where it gave one. */
  attempt: number | null;
  status: string;
  end_cause: EndCause | string;
  end_detail: string;
  started_at: string | null;
  billed_from: string | null;
  /** null while the attempt runs. */
  ended_at: string | null;
  cost_usd: number;
  lost_usd: LostByCause;
  restored_step: number | null;
  /** The steps recomputed after the restore, both ends included. */
  rework_steps: [number, number] | null;
  /** `async`: how many of the saves were asynchronous (older answers: whether any was). */
  checkpoints: { count: number; blocking_s: number; bytes: number; async: number | boolean };
  segments: AttemptSegment[];
}

export interface FailureRate {
  failures: number;
  wall_hours: number;
  mtbf_hours: number | null;
  /** Whose failures the rate is measured on: this job's, or its project's; null when none. */
  source: "job" | "project" | null;
  evidence: string;
}

export interface CheckpointAdvice {
  kind: "interval" | "async" | "both";
  text: string;
  checkpoint_cost_s: number | null;
  restart_cost_s: number | null;
  mtbf_s: number | null;
  current_interval_s: number | null;
  /** null where only asynchronous checkpoints are advised. */
  recommended_interval_s: number | null;
  young_daly_s: number | null;
  saving_usd_per_month: number | null;
  async_saving_usd_per_month: number | null;
  /** [interval in seconds, overhead in USD a month] along the interval. */
  curve: [number, number][];
}

/** GET /api/v1/jobs/{id}. */
export interface JobDetail {
  id: string | number;
  key: string;
  source: string;
  project: string;
  team: string;
  attempts_total: number;
  /** How many attempts `attempts` holds (a job of very many attempts is cut; a warning says so). */
  attempts_shown: number;
  cost_usd: number;
  lost_usd: LostByCause;
  lost_gpu_hours: LostByCause;
  attempts: JobAttempt[];
  failure_rate: FailureRate;
  advice: CheckpointAdvice | null;
  warnings: string[];
}

/** GET /api/v1/projects/{slug}/failures?month=YYYY-MM. */
export interface ProjectFailureRow {
  end_cause: EndCause | string;
  end_detail: string;
  host: string;
  attempts: number;
  rework_usd: number;
  restart_usd: number;
  lost_usd: number;
}

export interface ProjectFailures {
  month: string;
  rows: ProjectFailureRow[];
}

// Settings → People & groups (/api/v1/portal/group-mapping, /api/v1/portal/people).

export type MappingGrant = "org_admin" | "finance" | "team_lead" | "team_member" | "team_viewer";

/** A group mapping rule: people in a group matching `pattern` (exact name or glob) get `grant`. */
export interface GroupMappingRule {
  pattern: string;
  grant: MappingGrant;
  /** The team's slug for team grants; null for org_admin and finance. */
  team: string | null;
}

/** One kind of change a mapping makes: who would join, change role in, or leave a team, or gain or lose an organization role. */
export interface MappingChange {
  action: "join" | "role" | "leave";
  grant: MappingGrant;
  team: string | null;
  people: string[];
  count: number;
}

export interface MappingPersonChanges {
  username: string;
  changes: { action: MappingChange["action"]; grant: MappingGrant; team: string | null }[];
}

/** GET /group-mapping; POST /group-mapping/preview and PUT /group-mapping add the changes. */
export interface GroupMappingView {
  rules: (GroupMappingRule & { matches: string[] })[];
  /** The directory's groups, with their active members. */
  groups: { name: string; members: number }[];
  /** Every team's slug, for the team grants. */
  teams: string[];
  changes?: MappingChange[];
  people?: MappingPersonChanges[];
  /** PUT: how many people were re-synced. */
  synced?: number;
  /** PUT: deactivated people whose stored access changed too (not counted in `changes`, as in the preview). */
  deactivated?: string[];
}

export type AccessSource = "local" | "directory";

export interface PersonMembership {
  team: string;
  team_name: string;
  role: "viewer" | "member" | "admin";
  source: AccessSource;
  /** Where a synced membership comes from ("the identity provider's group nlp-leads (rule nlp-* → team lead)"). */
  origin: string | null;
}

export interface PersonFlag {
  flag: "is_org_admin" | "is_finance";
  on: boolean;
  source: AccessSource | null;
  origin: string | null;
}

export interface PersonRow {
  username: string;
  name: string;
  email: string;
  is_active: boolean;
  from_directory: boolean;
  memberships: PersonMembership[];
  /** Organization admins only (null for a team's lead). */
  flags: PersonFlag[] | null;
  groups: string[] | null;
  synced_at: string | null;
}

export interface PeoplePage {
  people: PersonRow[];
  count: number;
  page: number;
  page_size: number;
  /** The teams this viewer may manage memberships of. */
  teams: { slug: string; name: string }[];
  can_edit_flags: boolean;
}

/** Scheduled reports (docs/reports.md): a subscription and one period's delivery on one channel. */
export type ReportKind = "finance_month" | "digest_team" | "digest_project" | "saved_view";

export interface ReportSubscription {
  id: number;
  owner: string;
  kind: ReportKind;
  team: string | null;
  project: string | null;
  saved_view: { id: number; name: string; page: string } | null;
  email_to: string[];
  webhook_url: string;
  webhook_format: "generic" | "slack";
  webhook_secret: string | null;
  cadence: "monthly" | "weekly";
  day_of_month: number | null;
  weekday: number | null;
  hour: number;
  minute: number;
  timezone: string;
  enabled: boolean;
  next_due_at: string | null;
  last_delivery: { period_key: string; status: string; sent_at: string | null } | null;
  created_at: string;
}

export interface ReportDeliveryRow {
  id: number;
  subscription: number;
  kind: ReportKind;
  owner: string;
  period_key: string;
  period_start: string;
  period_end: string;
  channel: "email" | "webhook";
  target: string | null;
  status: "pending" | "sent" | "failed";
  attempts: number;
  status_code: number | null;
  error: string;
  totals: Record<string, number | null>;
  note: string | null;
  created_at: string;
  next_attempt_at: string | null;
  sent_at: string | null;
}
