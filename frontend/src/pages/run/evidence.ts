// How the run page names the evidence behind a category's recoverable dollars, in product words.
import type { CategoryEvidence, CategoryFigure } from "../../api/types";
import type { Category } from "../../lib/categories";

export const EVIDENCE_LABEL: Record<string, string> = {
  own_stretch: "best stretch",
  peers: "peer runs",
  target: "target",
  straggler: "stragglers",
  project_median: "project median",
  none: "no evidence",
};

export const EVIDENCE_HELP: Record<string, string> = {
  own_stretch: "The run's own best sustained stretch: what it kept up for hundreds of steps, it can keep up throughout",
  peers: "Comparable finished runs of the same project on the same GPU model",
  target: "A configured or physical target: the target MFU, or no exposed communication where overlap was shown",
  straggler: "The time the other ranks waited for a slow rank",
  project_median: "The project's median, e.g. its typical start-up time",
  none: "Nothing measured shows this could have been done better, so none of it is counted as recoverable",
};

export function evidenceLabel(kind: string): string {
  return EVIDENCE_LABEL[kind] ?? kind.replace(/_/g, " ");
}

/** Kind "none" (or a missing evidence object, from an analysis older than the evidence model). */
export function hasEvidence(evidence: CategoryEvidence | null | undefined): boolean {
  return !!evidence && evidence.kind !== "none";
}

/** Useful compute is never waste: it has no recoverable dollars to find evidence for. */
export function isNotWaste(category: Category): boolean {
  return category === "useful_compute";
}

/**
 * The cap is worth showing only where it changed something: it cut the figure, or the
 * organization set it below 100% (useful compute's fixed 0 is not a choice, so it is left out).
 */
export function capShown(category: Category, f: CategoryFigure): boolean {
  if (isNotWaste(category)) return false;
  return !!f.evidence?.capped || (typeof f.cap === "number" && Math.abs(f.cap - 1) > 1e-9);
}

/** Query parameters the app keeps across pages (the period), carried onto links to other runs. */
export function keptSearch(search: string): string {
  const from = new URLSearchParams(search);
  const out = new URLSearchParams();
  for (const key of ["period"]) {
    const v = from.get(key);
    if (v) out.set(key, v);
  }
  const s = out.toString();
  return s ? `?${s}` : "";
}
