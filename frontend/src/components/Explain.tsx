import { useEffect, useId, useLayoutEffect, useRef, useState } from "react";
import { createPortal } from "react-dom";

import type { Explained } from "../api/types";
import { formatExplainValue, formatInput, humanFormula, inputName } from "../lib/format";

export interface ExplainSource {
  formula: string;
  inputs?: Record<string, unknown>;
  /** Units of the inputs by name, where the analysis gives them. */
  input_units?: Record<string, string>;
  value?: unknown;
  unit?: string;
}

interface Props {
  /** The figure's name as people read it ("Recoverable spend"). */
  label: string;
  /** The analysis' own explanation (analysis.explain[name]). */
  entry?: Explained;
  /** Where a figure without an explain entry comes from (the API field and how it is derived). */
  source?: ExplainSource;
  /** The figure as the page shows it, unrounded (dollars of a run under a dime), where the entry keeps it in cents. */
  shown?: number;
}

const PANEL_W = 420;
const GAP = 6;

/** Where the panel goes: under the button (above it when there is no room), inside the window. */
function place(button: DOMRect, panelHeight: number): { top: number; left: number; width: number } {
  const width = Math.min(PANEL_W, window.innerWidth - 16);
  const left = Math.max(8, Math.min(button.right - width + 12, window.innerWidth - width - 8));
  const below = button.bottom + GAP;
  const top = below + panelHeight > window.innerHeight - 8 && button.top - GAP - panelHeight > 8 ? button.top - GAP - panelHeight : below;
  return { top, left, width };
}

/**
 * The "ƒ" button beside a figure: its formula and inputs, as the analysis computed them. The panel
 * is drawn over the page (a layer of its own, fixed to the window), so opening it inside a table
 * never scrolls the table or covers its header.
 */
export function Explain({ label, entry, source, shown }: Props) {
  const [open, setOpen] = useState(false);
  const [pos, setPos] = useState<{ top: number; left: number; width: number } | null>(null);
  const id = useId();
  const wrap = useRef<HTMLSpanElement>(null);
  const button = useRef<HTMLButtonElement>(null);
  const panel = useRef<HTMLDivElement>(null);
  const info = entry ?? source;

  useLayoutEffect(() => {
    if (!open) return;
    const update = () => {
      if (button.current) setPos(place(button.current.getBoundingClientRect(), panel.current?.offsetHeight ?? 240));
    };
    update();
    window.addEventListener("resize", update);
    window.addEventListener("scroll", update, true);
    return () => {
      window.removeEventListener("resize", update);
      window.removeEventListener("scroll", update, true);
    };
  }, [open]);

  useEffect(() => {
    if (!open) return;
    panel.current?.focus({ preventScroll: true });
    const onDown = (e: MouseEvent) => {
      const target = e.target as Node;
      if (wrap.current?.contains(target) || panel.current?.contains(target)) return;
      setOpen(false);
    };
    // Escape closes it wherever the focus is (a click elsewhere may have moved it off the panel).
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape") return;
      setOpen(false);
      button.current?.focus();
    };
    document.addEventListener("mousedown", onDown);
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("mousedown", onDown);
      document.removeEventListener("keydown", onKey);
    };
  }, [open]);

  if (!info) return null;
  const unit = info.unit ?? "";
  const inputs = Object.entries(info.inputs ?? {});
  const units = info.input_units ?? {};

  return (
    <span className="explain" ref={wrap}>
      <button
        ref={button}
        type="button"
        className="explain-btn"
        aria-label={`How ${label} is computed`}
        aria-expanded={open}
        aria-controls={open ? id : undefined}
        title="Formula and inputs"
        onClick={(e) => {
          e.stopPropagation();
          if (!open && button.current) setPos(place(button.current.getBoundingClientRect(), 240));
          setOpen((o) => !o);
        }}
      >
        ƒ
      </button>
      {open &&
        createPortal(
        <div
          ref={panel}
          id={id}
          className="explain-panel"
          style={pos ? { top: pos.top, left: pos.left, width: pos.width } : undefined}
          role="dialog"
          aria-label={`${label}: formula and inputs`}
          tabIndex={-1}
          onClick={(e) => e.stopPropagation()}
          onKeyDown={(e) => {
            if (e.key === "Escape") {
              e.stopPropagation();
              setOpen(false);
              button.current?.focus();
            }
          }}
        >
          <div className="explain-title">{label}</div>
          {info.value !== undefined && (
            <div className="explain-value">
              {shown !== undefined ? formatExplainValue(shown, unit, info.formula, { exact_usd: shown }) : formatExplainValue(info.value, unit, info.formula, info.inputs)}
            </div>
          )}
          {shown !== undefined && <div className="explain-note">Shown unrounded: the run cost under a dime, so its cents ({formatExplainValue(info.value, unit, info.formula)}) would hide its split.</div>}
          <div className="explain-label">Formula</div>
          <code className="explain-formula">{humanFormula(info.formula)}</code>
          {inputs.length > 0 && (
            <>
              <div className="explain-label">Inputs</div>
              <table className="explain-inputs">
                <tbody>
                  {inputs.map(([k, v]) => (
                    <tr key={k}>
                      <th scope="row">{inputName(k)}</th>
                      <td>{formatInput(k, v, units[k])}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
          {!entry && <div className="explain-note">Figure as stored by the analysis; formula as the waste model defines it.</div>}
          <details className="explain-raw" data-testid="explain-raw">
            <summary>As the analysis writes it</summary>
            <code>{info.formula}</code>
            {inputs.length > 0 && <code>{inputs.map(([k, v]) => `${k} = ${String(v)}`).join("\n")}</code>}
          </details>
        </div>,
          document.body,
        )}
    </span>
  );
}
