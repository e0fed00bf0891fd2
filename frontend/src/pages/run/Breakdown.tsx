// The six-category breakdown of a run's cost, with each category's recoverable dollars, their
// low–high range and the evidence they rest on.
import { Link, useLocation } from "react-router";

import type { Analysis, CategoryEvidence, CategoryFigure } from "../../api/types";
import { Explain } from "../../components/Explain";
import { runPath } from "../../components/RunTable";
import { CategoryName } from "../../components/ui";
import { CATEGORIES, CATEGORY_LABEL, type Category } from "../../lib/categories";
import { elapsedLabel } from "../../lib/charts";
import { formatEvidenceValue, formatGpuHours, formatNumber, formatPct, formatUsd, formatUsdRange, isNum, plainWords } from "../../lib/format";
import { capShown, EVIDENCE_HELP, evidenceLabel, hasEvidence, isNotWaste, keptSearch } from "./evidence";

interface Props {
  a: Analysis;
  /** Start of the run's clock (ns), to say where a stretch lies as elapsed time. */
  t0Ns: number;
  /** The category whose stretch is highlighted on the step-time chart, if any. */
  highlighted: Category | null;
  /** Absent when the run has no step-time chart to highlight on. */
  onHighlight?: (category: Category | null) => void;
}

export function BreakdownTable({ a, t0Ns, highlighted, onHighlight }: Props) {
  const ex = a.explain ?? {};
  const showCap = CATEGORIES.some((c) => capShown(c, a.categories[c]));
  const columns = showCap ? 7 : 6;
  return (
    <table className="table table-dense breakdown" data-testid="breakdown">
      <caption className="visually-hidden">Cost by waste category, with the recoverable part and its evidence</caption>
      <thead>
        <tr>
          <th scope="col">Category</th>
          <th scope="col" className="align-right">
            GPU-hours
          </th>
          <th scope="col" className="align-right">
            Cost
          </th>
          <th scope="col" className="align-right">
            Share
          </th>
          <th scope="col" className="align-right">
            Recoverable
          </th>
          <th scope="col" className="align-right">
            Range
          </th>
          {showCap && (
            <th scope="col" className="align-right" title="The organization's cap on the share of a category that may be called recoverable">
              Cap
            </th>
          )}
        </tr>
      </thead>
      {CATEGORIES.map((c) => {
        const f = a.categories[c];
        return (
          <tbody key={c} className="breakdown-group">
            <tr data-category={c}>
              <td>
                <CategoryName name={c} />
              </td>
              <td className="align-right nowrap">
                {formatGpuHours(f.gpu_seconds / 3600)}
                <Explain label={`${CATEGORY_LABEL[c]} GPU time`} entry={ex[`categories.${c}.gpu_seconds`]} />
              </td>
              <td className="align-right nowrap">
                {formatUsd(f.usd)}
                <Explain label={`${CATEGORY_LABEL[c]} cost`} entry={ex[`categories.${c}.usd`]} />
              </td>
              <td className="align-right">{formatPct(f.share)}</td>
              <RecoverableCells category={c} f={f} a={a} />
              {showCap && <CapCell category={c} f={f} />}
            </tr>
            {!isNotWaste(c) && f.usd > 0 && (
              <tr className="evidence-row" data-evidence-for={c}>
                <td colSpan={columns}>
                  <EvidenceLine category={c} f={f} t0Ns={t0Ns} highlighted={highlighted === c} onHighlight={onHighlight} />
                </td>
              </tr>
            )}
          </tbody>
        );
      })}
      <tfoot>
        <tr>
          <th scope="row">Total</th>
          <td className="align-right">{formatGpuHours(a.gpu_hours)}</td>
          <td className="align-right">{formatUsd(a.cost_usd)}</td>
          <td className="align-right">100%</td>
          <td className="align-right">
            <strong>{formatUsd(a.recoverable_usd)}</strong>
          </td>
          <td className="align-right nowrap muted">{formatUsdRange(a.recoverable_low_usd, a.recoverable_high_usd)}</td>
          {showCap && <td />}
        </tr>
      </tfoot>
    </table>
  );
}

function RecoverableCells({ category: c, f, a }: { category: Category; f: CategoryFigure; a: Analysis }) {
  const entry = a.explain?.[`categories.${c}.recoverable_usd`];
  if (isNotWaste(c)) {
    return (
      <>
        <td className="align-right muted" title="Useful compute is the work itself: never recoverable">
          not waste
        </td>
        <td />
      </>
    );
  }
  if (f.usd <= 0) {
    return (
      <>
        <td className="align-right muted" data-testid={`recoverable-${c}`} title="Nothing was spent in this category">
          –
        </td>
        <td />
      </>
    );
  }
  if (!hasEvidence(f.evidence)) {
    return (
      <>
        <td className="align-right nowrap" data-testid={`recoverable-${c}`}>
          <span className="no-evidence" title={EVIDENCE_HELP.none}>
            no evidence
          </span>
          <Explain label={`${CATEGORY_LABEL[c]} recoverable`} entry={entry} />
        </td>
        <td />
      </>
    );
  }
  return (
    <>
      <td className="align-right nowrap" data-testid={`recoverable-${c}`}>
        {formatUsd(f.recoverable_usd)}
        <Explain label={`${CATEGORY_LABEL[c]} recoverable`} entry={entry} />
      </td>
      <td className="align-right nowrap muted" data-testid={`recoverable-range-${c}`}>
        {formatUsdRange(f.recoverable_low_usd, f.recoverable_high_usd)}
      </td>
    </>
  );
}

function CapCell({ category: c, f }: { category: Category; f: CategoryFigure }) {
  if (!capShown(c, f)) return <td />;
  const capped = !!f.evidence?.capped;
  return (
    <td
      className="align-right nowrap"
      data-testid={`cap-${c}`}
      title={
        capped
          ? `The organization calls at most ${formatPct(f.cap, 0)} of ${CATEGORY_LABEL[c].toLowerCase()} recoverable; that cap cut the evidence-based figure down`
          : `The organization calls at most ${formatPct(f.cap, 0)} of ${CATEGORY_LABEL[c].toLowerCase()} recoverable; the evidence-based figure stayed below it`
      }
    >
      {formatPct(f.cap, 0)}
      {capped && <span className="badge badge-warn badge-inline">applied</span>}
    </td>
  );
}

function EvidenceLine({ category: c, f, t0Ns, highlighted, onHighlight }: { category: Category; f: CategoryFigure; t0Ns: number; highlighted: boolean; onHighlight?: (c: Category | null) => void }) {
  const ev: CategoryEvidence | undefined = f.evidence;
  const location = useLocation();
  if (!ev || !hasEvidence(ev)) {
    return (
      <div className="evidence">
        <span className="badge ev-badge ev-none" title={EVIDENCE_HELP.none}>
          no evidence
        </span>
        <span className="muted">{ev?.summary ? plainWords(ev.summary) : "Nothing measured shows this could have been done better, so none of it is counted as recoverable."}</span>
      </div>
    );
  }
  const refs = references(ev.unit, ev.reference_value, ev.low_reference, ev.high_reference);
  const w = ev.window;
  return (
    <div className="evidence">
      <span className={`badge ev-badge ev-${ev.kind}`} title={EVIDENCE_HELP[ev.kind]}>
        {evidenceLabel(ev.kind)}
      </span>
      <span className="ev-summary">{plainWords(ev.summary)}</span>
      {refs && <span className="muted small ev-refs">{refs}</span>}
      {(ev.kind === "peers" || ev.peer_run_ids.length > 0) && <PeerLinks kind={ev.kind} ids={ev.peer_run_ids} search={location.search} />}
      {ev.kind === "straggler" && (
        <a className="small" href="#ranks">
          see Per rank
        </a>
      )}
      {ev.kind === "own_stretch" && w && (
        <span className="ev-window small">
          <span className="muted">
            {elapsedLabel((w.t_start_ns - t0Ns) / 1e9)}–{elapsedLabel((w.t_end_ns - t0Ns) / 1e9)} into the run{isNum(w.steps) ? `, ${formatNumber(w.steps)} steps` : ""}
          </span>
          {onHighlight && (
            <button
              type="button"
              className={`btn btn-small${highlighted ? " btn-primary" : ""}`}
              aria-pressed={highlighted}
              aria-label={`Highlight the ${CATEGORY_LABEL[c].toLowerCase()} stretch on the step-time chart`}
              onClick={() => onHighlight(highlighted ? null : c)}
            >
              {highlighted ? "Shown on chart" : "Show on chart"}
            </button>
          )}
        </span>
      )}
    </div>
  );
}

const PEERS_SHOWN = 6;

/** Links to the runs the evidence compared with, keeping the period the page was opened with. */
function PeerLinks({ kind, ids, search }: { kind: string; ids: string[]; search: string }) {
  if (ids.length === 0) return <span className="ev-peers small muted">no peer run listed</span>;
  const noun = kind === "peers" ? "peer run" : "compared with run";
  return (
    <span className="ev-peers small">
      <span className="muted">{ids.length === 1 ? noun : `${noun}s`}</span>
      {ids.slice(0, PEERS_SHOWN).map((id) => (
        <Link key={id} to={runPath(id) + keptSearch(search)} className="mono ev-peer" title={`Open run ${id}`}>
          {id.slice(0, 8)}
        </Link>
      ))}
      {ids.length > PEERS_SHOWN && <span className="muted">and {ids.length - PEERS_SHOWN} more</span>}
    </span>
  );
}

/** "reference 2.10 ms per step (range 1.50 ms–3.00 ms per step)", or null when nothing to add. */
function references(unit: string, ref: number | null, low: number | null, high: number | null): string | null {
  if (!isNum(ref)) return null;
  let text = `reference ${formatEvidenceValue(ref, unit)}`;
  if (isNum(low) && isNum(high) && (Math.abs(low - ref) > 1e-12 || Math.abs(high - ref) > 1e-12)) {
    const [a, b] = low <= high ? [low, high] : [high, low];
    text += ` (range ${formatEvidenceValue(a, unit)} to ${formatEvidenceValue(b, unit)})`;
  }
  return text;
}
