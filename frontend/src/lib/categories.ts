// The six waste categories, in the order the waste model defines them, with one colour each that
// every chart, bar and legend uses.

export const CATEGORIES = [
  "useful_compute",
  "compute_inefficiency",
  "data_stall",
  "comm_exposed",
  "host_overhead",
  "idle",
] as const;

export type Category = (typeof CATEGORIES)[number];

export const CATEGORY_LABEL: Record<Category, string> = {
  useful_compute: "Useful compute",
  compute_inefficiency: "Compute inefficiency",
  data_stall: "Data stall",
  comm_exposed: "Exposed communication",
  host_overhead: "Host overhead",
  idle: "Idle",
};

/** Column headers where six categories must fit beside other figures. */
export const CATEGORY_SHORT: Record<Category, string> = {
  useful_compute: "Useful",
  compute_inefficiency: "Ineffic.",
  data_stall: "Data",
  comm_exposed: "Comm",
  host_overhead: "Host",
  idle: "Idle",
};

export const CATEGORY_HELP: Record<Category, string> = {
  useful_compute: "Compute time that the target MFU would need for the FLOPs actually done",
  compute_inefficiency: "Remaining compute time: kernels running below the target MFU",
  data_stall: "Waiting for input batches",
  comm_exposed: "Waiting on gradient synchronization (stragglers included)",
  host_overhead: "Step time covered by no measured stage: Python, launches, logging, sync points",
  idle: "Allocated but no step running: start-up, gaps, checkpoints, tear-down",
};

export const CATEGORY_COLOR: Record<Category, string> = {
  useful_compute: "#2f9e6e",
  compute_inefficiency: "#e8a33d",
  data_stall: "#4a7fe0",
  comm_exposed: "#8e6ad8",
  host_overhead: "#d9607a",
  idle: "#8c96a8",
};

export const WASTE_CATEGORIES: Category[] = CATEGORIES.filter((c) => c !== "useful_compute");

export function isCategory(name: string): name is Category {
  return (CATEGORIES as readonly string[]).includes(name);
}

export function categoryLabel(name: string): string {
  return isCategory(name) ? CATEGORY_LABEL[name] : name.replace(/_/g, " ");
}

export function categoryColor(name: string): string {
  return isCategory(name) ? CATEGORY_COLOR[name] : "#8c96a8";
}
