// The six-category breakdown of a run's cost, with each category's recoverable dollars, their
// low–high range and the evidence they rest on.
import { Link, useLocation } from "react-router";

import type { Analysis, CategoryEvidence, CategoryFigure } from "../../api/types";
import { Explain } from "../../components/Explain";
import { runPath } from "../../components/RunTable";
import { CategoryName } from "../../components/ui";
import { CATEGORIES, CATEGORY_LABEL, type Category } from "../../lib/categories";
import { elapsedLabel } from "../../lib/charts";
import { largestRemainder } from "../../lib/footing";
import { formatEvidenceValue, formatNumber, formatPct, formatUsd, formatUsdRange, gpuHoursDigits, isNum, plainWords } from "../../lib/format";
import { capShown, EVIDENCE_HELP, evidenceLabel, hasEvidence, isNotWaste, keptSearch } from "./evidence";
import { runMoney, type RunMoney } from "./money";

interface Props {
  a: Analysis;
  /** The run's dollars as the page shows them (run/money.ts); computed here when not given. */
  money?: RunMoney;
  /** Start of the run's clock (ns), to say where a stretch lies as elapsed time. */
  t0Ns: number;
  /** The category whose stretch is highlighted on the step-time chart, if any. */
  highlighted: Category | null;
  /** Absent when the run has no step-time chart to highlight on. */
  onHighlight?: (category: Category | null) => void;
}

/** One figure per category as the table shows it, rounded so that each column adds up to its total. */
export interface FootedColumns {
  gpuDigits: number;
  gpuHours: Record<Category, number>;
  sharePct: Record<Category, number>;
  recoverable: Record<Category, number>;
  low: Record<Category, number>;
  high: Record<Category, number>;
}

function byCategory(values: number[]): Record<Category, number> {
  return Object.fromEntries(CATEGORIES.map((c, i) => [c, values[i]])) as Record<Category, number>;
}

/**
 * The breakdown's columns footed (largest remainder, src/lib/footing.ts): GPU-hours at one
 * precision for the column, shares to a tenth of a percent adding up to 100.0%, recoverable
 * dollars and their low and high ends to the cent adding up to the run's figures.
 */
export function footBreakdown(a: Analysis): FootedColumns {
  const col = (pick: (f: CategoryFigure) => number) => CATEGORIES.map((c) => pick(a.categories[c]));
  const gpuDigits = gpuHoursDigits(a.gpu_hours); // the GPU-hours card's precision: the card and the total agree
  const shares = col((f) => f.share * 100);
  return {
    gpuDigits,
    gpuHours: byCategory(largestRemainder(col((f) => f.gpu_seconds / 3600), a.gpu_hours, gpuDigits)),
    sharePct: byCategory(largestRemainder(shares, shares.reduce((x, y) => x + y, 0) > 0 ? 100 : 0, 1)),
    recoverable: byCategory(largestRemainder(col((f) => f.recoverable_usd), a.recoverable_usd, 2)),
    low: byCategory(largestRemainder(col((f) => f.recoverable_low_usd), a.recoverable_low_usd, 2)),
    high: byCategory(largestRemainder(col((f) => f.recoverable_high_usd), a.recoverable_high_usd, 2)),
  };
}

export function BreakdownTable({ a, money: given, t0Ns, highlighted, onHighlight }: Props) {
  const ex = a.explain ?? {};
  const money = given ?? runMoney(a);
  const usd = (v: number) => formatUsd(v, { digits: money.digits });
  const showCap = CATEGORIES.some((c) => capShown(c, a.categories[c]));
  const columns = showCap ? 6 : 5;
  const foot = footBreakdown(a);
  const gpuH = (v: number) => `${formatNumber(v, foot.gpuDigits)} GPU-h`;
  return (
    <table className="table table-dense breakdown" data-testid="breakdown">
      <caption className="visually-hidden">Cost by waste category, with the recoverable part and its evidence</caption>
      <thead>
        <tr>
          <th scope="col">Category</th>
          <th scope="col" className="align-right col-gpu-hours">
            GPU-hours
          </th>
          <th scope="col" className="align-right">
            Cost
          </th>
          <th scope="col" className="align-right">
            Share
          </th>
          <th scope="col" className="align-right" title="Recoverable dollars, with the low–high range under them">
            Recoverable
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
              <td className="align-right nowrap col-gpu-hours">
                {gpuH(foot.gpuHours[c])}
                <Explain label={`${CATEGORY_LABEL[c]} GPU time`} entry={ex[`categories.${c}.gpu_seconds`]} />
              </td>
              <td className="align-right nowrap">
                {usd(money.usd[c])}
                <Explain label={`${CATEGORY_LABEL[c]} cost`} entry={ex[`categories.${c}.usd`]} shown={money.tiny ? money.usd[c] : undefined} />
              </td>
              <td className="align-right">{`${foot.sharePct[c].toFixed(1)}%`}</td>
              <RecoverableCell category={c} f={{ ...f, recoverable_usd: foot.recoverable[c], recoverable_low_usd: foot.low[c], recoverable_high_usd: foot.high[c] }} a={a} />
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
        <tr data-testid="breakdown-total">
          <th scope="row">Total</th>
          <td className="align-right col-gpu-hours">{gpuH(a.gpu_hours)}</td>
          <td className="align-right">{usd(money.cost)}</td>
          <td className="align-right">{a.cost_usd > 0 ? "100.0%" : "–"}</td>
          <td className="align-right nowrap">
            <strong>{formatUsd(a.recoverable_usd)}</strong>
            {formatUsdRange(a.recoverable_low_usd, a.recoverable_high_usd) !== formatUsd(a.recoverable_usd) && (
              <div className="cell-range" data-testid="recoverable-range-total">
                {formatUsdRange(a.recoverable_low_usd, a.recoverable_high_usd)}
              </div>
            )}
          </td>
          {showCap && <td />}
        </tr>
      </tfoot>
    </table>
  );
}

function RecoverableCell({ category: c, f, a }: { category: Category; f: CategoryFigure; a: Analysis }) {
  const entry = a.explain?.[`categories.${c}.recoverable_usd`];
  if (isNotWaste(c)) {
    return (
      <td className="align-right muted" title="Useful compute is the work itself: never recoverable">
        not waste
      </td>
    );
  }
  if (f.usd <= 0) {
    return (
      <td className="align-right muted" data-testid={`recoverable-${c}`} title="Nothing was spent in this category">
        –
      </td>
    );
  }
  if (!hasEvidence(f.evidence)) {
    return (
      <td className="align-right nowrap" data-testid={`recoverable-${c}`}>
        <span className="no-evidence" title={EVIDENCE_HELP.none}>
          no evidence
        </span>
        <Explain label={`${CATEGORY_LABEL[c]} recoverable`} entry={entry} />
      </td>
    );
  }
  return (
    <td className="align-right nowrap" data-testid={`recoverable-${c}`}>
      {formatUsd(f.recoverable_usd)}
      <Explain label={`${CATEGORY_LABEL[c]} recoverable`} entry={entry} />
      {formatUsdRange(f.recoverable_low_usd, f.recoverable_high_usd) !== formatUsd(f.recoverable_usd) && (
        <div className="cell-range" data-testid={`recoverable-range-${c}`} title="Low–high range: the same counterfactual at the less and the more ambitious reference">
          {formatUsdRange(f.recoverable_low_usd, f.recoverable_high_usd)}
        </div>
      )}
    </td>
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
        <div className="ev-body">
          <div className="ev-summary muted">{ev?.summary ? plainWords(ev.summary) : "Nothing measured shows this could have been done better, so none of it is counted as recoverable."}</div>
        </div>
      </div>
    );
  }
  const refs = references(ev.unit, ev.reference_value, ev.low_reference, ev.high_reference);
  const w = ev.window;
  const links = ev.kind === "peers" || ev.peer_run_ids.length > 0;
  return (
    <div className="evidence">
      <span className={`badge ev-badge ev-${ev.kind}`} title={EVIDENCE_HELP[ev.kind]}>
        {evidenceLabel(ev.kind)}
      </span>
      <div className="ev-body">
        <div className="ev-summary">{plainWords(ev.summary)}</div>
        {(refs || links || ev.kind === "straggler" || (ev.kind === "own_stretch" && w)) && (
          <div className="ev-meta small">
            {refs && <span className="muted">{refs}</span>}
            {ev.kind === "own_stretch" && w && (
              <span className="ev-window">
                <span className="muted">
                  stretch {elapsedLabel((w.t_start_ns - t0Ns) / 1e9)}–{elapsedLabel((w.t_end_ns - t0Ns) / 1e9)} into the run{isNum(w.steps) ? `, ${formatNumber(w.steps)} steps` : ""}
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
            {links && <PeerLinks kind={ev.kind} runs={peerRuns(ev)} search={location.search} />}
            {ev.kind === "straggler" && <a href="#ranks">see Per rank</a>}
          </div>
        )}
      </div>
    </div>
  );
}

const PEERS_SHOWN = 6;

/** The runs the evidence compared with, by name (an analysis older than names has ids only). */
export function peerRuns(ev: CategoryEvidence): { id: string; name: string }[] {
  if (ev.peer_runs && ev.peer_runs.length > 0) return ev.peer_runs;
  return ev.peer_run_ids.map((id) => ({ id, name: "" }));
}

/** Links to the runs the evidence compared with, named as people named them, keeping the period. */
function PeerLinks({ kind, runs, search }: { kind: string; runs: { id: string; name: string }[]; search: string }) {
  if (runs.length === 0) return <span className="ev-links muted">no peer run listed</span>;
  const noun = kind === "peers" ? "peer run" : "compared with run";
  return (
    <span className="ev-links">
      <span className="muted">{runs.length === 1 ? noun : `${noun}s`}</span>
      {runs.slice(0, PEERS_SHOWN).map((r) => (
        <Link key={r.id} to={runPath(r.id) + keptSearch(search)} className={`ev-peer${r.name ? " peer-name" : " mono"}`} title={r.name ? `Open run ${r.name}` : `Open run ${r.id}`}>
          {r.name || `run ${r.id.slice(0, 8)}`}
        </Link>
      ))}
      {runs.length > PEERS_SHOWN && <span className="muted">and {runs.length - PEERS_SHOWN} more</span>}
    </span>
  );
}

/** "reference 2.10 ms per step (range 1.50 ms–3.00 ms per step)", or null when nothing to add. */
function references(unit: string, ref: number | null, low: number | null, high: number | null): string | null {
  if (!isNum(ref)) return null;
  const shown = formatEvidenceValue(ref, unit);
  let text = `reference ${shown}`;
  if (isNum(low) && isNum(high)) {
    const [a, b] = (low <= high ? [low, high] : [high, low]).map((v) => formatEvidenceValue(v, unit));
    if (a !== shown || b !== shown) text += ` (range ${a} to ${b})`;
  }
  return text;
}
