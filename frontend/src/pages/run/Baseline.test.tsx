import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter } from "react-router";

import type { BaselineComparison, BaselineMetric } from "../../api/types";
import { BaselineCard } from "./Baseline";

function metric(name: string, label: string, baseline: number, run: number, baseStep: number, usdMonth: number): BaselineMetric {
  // usd per month as the server prices it: (run - baseline) / baseline step x project cost (30 d)
  const usd = name === "mfu_step_time" ? null : ((run - baseline) / baseStep) * usdMonth;
  return {
    metric: name,
    label,
    unit: name === "mfu_step_time" ? "ratio" : "ms",
    baseline,
    run,
    delta: run - baseline,
    delta_pct: run / baseline - 1,
    baseline_share: name === "step_ms" || name === "mfu_step_time" ? null : baseline / baseStep,
    run_share: null,
    delta_usd_per_month: usd,
    explain: {
      value: usd,
      unit: "USD/month",
      formula: "delta_usd_per_month = (run_ms - baseline_ms) / baseline_step_ms * project_gpu_hours_30d * usd_per_gpu_hour_30d",
      inputs: { run_ms: run, baseline_ms: baseline, baseline_step_ms: baseStep, project_gpu_hours_30d: 1000, usd_per_gpu_hour_30d: 4 },
      input_units: { run_ms: "ms", baseline_ms: "ms", baseline_step_ms: "ms", project_gpu_hours_30d: "GPU-h", usd_per_gpu_hour_30d: "USD/GPU-h" },
    },
  };
}

function compared(): BaselineComparison {
  const usdMonth = 4000; // 1,000 GPU-h at $4
  return {
    status: "compared",
    reason: null,
    complete: true,
    gpu_key: "H100-SXM",
    signature: { flops_per_step: 1e15, tokens_per_step: 4096, samples_per_step: 8 },
    tolerance: 0.1,
    candidates: 5,
    baseline_runs: [
      { id: "22222222-2222-4222-8222-222222222222", name: "nightly-1", started_at: "2026-11-19T10:00:00Z", step_ms: 100, mfu_step_time: 0.4 },
      { id: "33333333-3333-4333-8333-333333333333", name: "nightly-2", started_at: "2026-11-18T10:00:00Z", step_ms: 100, mfu_step_time: 0.4 },
    ],
    volume: { days: 30, project_gpu_hours_30d: 1000, project_usd_30d: usdMonth, usd_per_gpu_hour_30d: 4 },
    metrics: [
      metric("step_ms", "Step time", 100, 107, 100, usdMonth),
      metric("data_ms", "Data wait", 10, 17, 100, usdMonth),
      metric("mfu_step_time", "MFU over step time", 0.4, 0.374, 100, usdMonth),
    ],
    delta_usd_per_month: 280,
    summary: "+7% step time ≈ +$280/month at this project's recent volume",
  };
}

function show(b: BaselineComparison) {
  return render(
    <MemoryRouter>
      <BaselineCard baseline={b} />
    </MemoryRouter>,
  );
}

describe("BaselineCard", () => {
  it("shows each figure against the baseline and the difference in dollars a month", async () => {
    show(compared());
    expect(screen.getByTestId("baseline-summary")).toHaveTextContent("+7% step time ≈ +$280/month at this project's recent volume");
    const table = screen.getByTestId("baseline-table");
    const step = within(table).getByText("Step time").closest("tr")!;
    expect(step).toHaveTextContent("100 ms");
    expect(step).toHaveTextContent("107 ms");
    expect(step).toHaveTextContent("+7.00 ms (+7.0%)");
    expect(step).toHaveTextContent("+$280.00"); // (107 - 100) / 100 x $4,000
    const data = within(table).getByText("Data wait").closest("tr")!;
    expect(data).toHaveTextContent("10.0 ms (10%)");
    expect(data).toHaveTextContent("+$280.00");
    const mfu = within(table).getByText("MFU over step time").closest("tr")!;
    expect(mfu).toHaveTextContent("40.0%");
    expect(mfu).toHaveTextContent("37.4%");
    expect(mfu).toHaveTextContent("−2.6 pp");
    expect(screen.getByRole("link", { name: "nightly-1" })).toHaveAttribute("href", "/runs/22222222-2222-4222-8222-222222222222");
    await userEvent.click(within(step).getByRole("button", { name: /How Step time: difference in dollars a month is computed/ }));
    const panel = screen.getByRole("dialog");
    expect(panel).toHaveTextContent("project GPU hours 30d1,000 GPU-h");
    expect(panel).toHaveTextContent("USD per GPU hour 30d$4.00 per GPU-hour");
    expect(within(panel).getByTestId("explain-raw")).toHaveTextContent("delta_usd_per_month = (run_ms - baseline_ms) / baseline_step_ms");
  });

  it("says why there is no baseline instead of showing zeros", () => {
    show({ ...compared(), status: "no_baseline", reason: "No comparable finished runs: this project has no finished run on H100-SXM before this one.", metrics: [], volume: null, summary: "", delta_usd_per_month: null, baseline_runs: [] });
    expect(screen.getByTestId("baseline-none")).toHaveTextContent("No comparable finished runs");
    expect(screen.queryByTestId("baseline-table")).toBeNull();
    expect(screen.queryByText(/\$0/)).toBeNull();
  });
});
