import { fireEvent, render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";

import { DataTable, type Column } from "./DataTable";
import { Explain } from "./Explain";
import { ErrorState } from "./States";
import { CategoryBar, Change } from "./ui";
import { ApiError } from "../api/client";

type Row = { id: string; name: string; cost: number };
const rows: Row[] = [
  { id: "a", name: "alpha", cost: 10 },
  { id: "b", name: "beta", cost: 20 },
];
const columns: Column<Row>[] = [
  { key: "name", header: "Name", render: (r) => r.name },
  { key: "cost", header: "Cost", render: (r) => `$${r.cost}`, sortable: true, align: "right" },
];

describe("DataTable", () => {
  it("makes sortable headers buttons and marks the current sort for assistive technology", async () => {
    const onSort = vi.fn();
    render(<DataTable caption="t" columns={columns} rows={rows} rowKey={(r) => r.id} sort="-cost" onSort={onSort} />);
    const header = screen.getByRole("columnheader", { name: /Cost/ });
    expect(header).toHaveAttribute("aria-sort", "descending");
    expect(screen.getByRole("columnheader", { name: "Name" })).not.toHaveAttribute("aria-sort");
    await userEvent.click(screen.getByRole("button", { name: "Sort by Cost" }));
    expect(onSort).toHaveBeenCalledWith("cost");
  });

  it("lets a keyboard reach rows with Tab and open one with Enter", async () => {
    const onOpen = vi.fn();
    render(<DataTable caption="t" columns={columns} rows={rows} rowKey={(r) => r.id} onOpen={onOpen} />);
    await userEvent.tab();
    expect(document.activeElement?.getAttribute("data-row-key")).toBe("a");
    await userEvent.tab();
    await userEvent.keyboard("{Enter}");
    expect(onOpen).toHaveBeenCalledWith(rows[1]);
  });

  it("opens a row on click but not when a control inside it is used", async () => {
    const onOpen = vi.fn();
    const withButton: Column<Row>[] = [...columns, { key: "x", header: "", render: () => <button type="button">Revoke</button> }];
    render(<DataTable caption="t" columns={withButton} rows={rows} rowKey={(r) => r.id} onOpen={onOpen} />);
    await userEvent.click(screen.getAllByRole("button", { name: "Revoke" })[0]);
    expect(onOpen).not.toHaveBeenCalled();
    await userEvent.click(screen.getByText("beta"));
    expect(onOpen).toHaveBeenCalledWith(rows[1]);
  });
});

describe("Explain", () => {
  const entry = { value: 5.29, unit: "USD", formula: "Σ gpu_count * seconds * price / 3600", inputs: { gpu_count: 8, segment_0_usd_per_gpu_hour: 6.52 } };

  it("shows a figure's formula and inputs, and closes with Escape", async () => {
    render(<Explain label="cost" entry={entry} />);
    const button = screen.getByRole("button", { name: "How cost is computed" });
    expect(button).toHaveAttribute("aria-expanded", "false");
    await userEvent.click(button);
    const dialog = screen.getByRole("dialog", { name: "cost: formula and inputs" });
    // In the product's words (× for *, names as the inputs are named), the analysis' own text kept below.
    expect(within(dialog).getByText("Σ GPUs × seconds × price")).toBeInTheDocument(); // no unit factor (/ 3600)
    expect(within(dialog).getByText(entry.formula)).toBeInTheDocument();
    expect(within(dialog).getByText("$5.29")).toBeInTheDocument();
    expect(within(dialog).getByText("price period 1: price").closest("tr")).toHaveTextContent("$6.52 per GPU-hour");
    expect(within(dialog).getByText("GPUs").closest("tr")).toHaveTextContent("8");
    fireEvent.keyDown(dialog, { key: "Escape" });
    expect(screen.queryByRole("dialog")).not.toBeInTheDocument();
    expect(button).toHaveFocus();
  });

  it("shows an input in its unit where the analysis names one", async () => {
    render(<Explain label="data stall recoverable" entry={{ value: 20.1, unit: "USD", formula: "usd * max(0, 1 - reference_ms_per_step / run_ms_per_step)", inputs: { usd: 25, reference_ms_per_step: 2.1, evidence: "own_stretch" }, input_units: { usd: "USD", reference_ms_per_step: "ms/step", evidence: "" } }} />);
    await userEvent.click(screen.getByRole("button", { name: "How data stall recoverable is computed" }));
    const dialog = screen.getByRole("dialog");
    expect(within(dialog).getByText("reference time per step").closest("tr")).toHaveTextContent("2.10 ms per step");
    expect(within(dialog).getByText("USD").closest("tr")).toHaveTextContent("$25.00");
    expect(within(dialog).getByText("evidence").closest("tr")).toHaveTextContent("best stretch");
  });

  it("draws its panel over the page, outside any table that would scroll for it", async () => {
    render(
      <table>
        <tbody>
          <tr>
            <td>
              <Explain label="cost" entry={entry} />
            </td>
          </tr>
        </tbody>
      </table>,
    );
    await userEvent.click(screen.getByRole("button", { name: "How cost is computed" }));
    const dialog = screen.getByRole("dialog");
    expect(dialog.closest("table")).toBeNull();
    expect(dialog.parentElement).toBe(document.body);
  });

  it("reads every input in its unit: nanoseconds as time, epoch nanoseconds as a date, no exponent form", async () => {
    const inputs = { excess_ns_mean: 2_175_978_311.49, t_start_ns: 1_795_700_000_000_000_000, comm_exposed_rank_ns: 32_696_661_262_392, flops_reported: 2.3557e19, gpu_util_sum_pct: 97, alloc_retries_count: 0 };
    render(<Explain label="straggler wait" source={{ formula: "caused_wait_gpu_seconds * comm_exposed_usd", inputs }} />);
    await userEvent.click(screen.getByRole("button", { name: "How straggler wait is computed" }));
    const table = screen.getByRole("dialog").querySelector(".explain-inputs")!;
    const text = table.textContent ?? "";
    expect(text).toContain("excess time (mean)2.18 s");
    expect(text).toContain("start");
    expect(text).toMatch(/start\w{3} \d+, 2026, \d\d:\d\d UTC/);
    expect(text).toContain("exposed communication time (all ranks)");
    expect(text).toContain("23.6 EFLOP");
    expect(text).toContain("97%");
    expect(text).not.toMatch(/e\+\d|\d{7}|_/);
    expect(screen.getByText("caused wait GPU time × exposed communication")).toBeInTheDocument();
  });

  it("closes when clicking elsewhere", async () => {
    render(
      <div>
        <Explain label="cost" entry={entry} />
        <p>outside</p>
      </div>,
    );
    await userEvent.click(screen.getByRole("button", { name: "How cost is computed" }));
    await userEvent.click(screen.getByText("outside"));
    expect(screen.queryByRole("dialog")).not.toBeInTheDocument();
  });

  it("renders nothing when there is nothing to explain", () => {
    const { container } = render(<Explain label="cost" />);
    expect(container).toBeEmptyDOMElement();
  });
});

describe("Change", () => {
  it("colours a fall in spend as good and a fall in MFU as bad", () => {
    const { rerender } = render(<Change value={-12.5} kind="usd" goodWhen="down" />);
    expect(screen.getByText(/−\$12\.50/).closest(".change")).toHaveClass("change-good");
    rerender(<Change value={-0.02} kind="pp" goodWhen="up" />);
    expect(screen.getByText(/−2\.0 pp/).closest(".change")).toHaveClass("change-bad");
    rerender(<Change value={null} kind="usd" goodWhen="down" />);
    expect(screen.getByText("no previous")).toBeInTheDocument();
  });
});

describe("CategoryBar", () => {
  it("lists all six categories with their dollars and shares", () => {
    render(<CategoryBar usd={{ useful_compute: 75, data_stall: 25 }} />);
    const items = screen.getAllByRole("listitem");
    expect(items).toHaveLength(6);
    expect(items[0]).toHaveTextContent("Useful compute$75.0075.0%");
    expect(items[2]).toHaveTextContent("Data stall$25.0025.0%");
    expect(items[5]).toHaveTextContent("Idle$0.000.0%");
  });
});

describe("ErrorState", () => {
  it("says what went wrong and offers a retry for server errors only", async () => {
    const retry = vi.fn();
    const { rerender } = render(<ErrorState error={new ApiError(500, "server_error", "boom")} onRetry={retry} />);
    expect(screen.getByRole("alert")).toHaveTextContent("The server had a problem");
    await userEvent.click(screen.getByRole("button", { name: "Try again" }));
    expect(retry).toHaveBeenCalled();
    rerender(<ErrorState error={new ApiError(404, "not_found", "run not found")} onRetry={retry} />);
    expect(screen.getByRole("alert")).toHaveTextContent("Not found, or not visible to you");
    expect(screen.queryByRole("button")).not.toBeInTheDocument();
  });
});
