import { useEffect, useId, useRef, useState } from "react";

import type { Explained } from "../api/types";
import { formatPlain, formatWithUnit } from "../lib/format";

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
}

/** The "ƒ" button beside a figure: its formula and inputs, as the analysis computed them. */
export function Explain({ label, entry, source }: Props) {
  const [open, setOpen] = useState(false);
  const id = useId();
  const wrap = useRef<HTMLSpanElement>(null);
  const button = useRef<HTMLButtonElement>(null);
  const panel = useRef<HTMLDivElement>(null);
  const info = entry ?? source;

  useEffect(() => {
    if (!open) return;
    panel.current?.focus();
    const onDown = (e: MouseEvent) => {
      if (wrap.current && !wrap.current.contains(e.target as Node)) setOpen(false);
    };
    document.addEventListener("mousedown", onDown);
    return () => document.removeEventListener("mousedown", onDown);
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
          setOpen((o) => !o);
        }}
      >
        ƒ
      </button>
      {open && (
        <div
          ref={panel}
          id={id}
          className="explain-panel"
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
          {info.value !== undefined && <div className="explain-value">{formatWithUnit(info.value, unit)}</div>}
          <div className="explain-label">Formula</div>
          <code className="explain-formula">{info.formula}</code>
          {inputs.length > 0 && (
            <>
              <div className="explain-label">Inputs</div>
              <table className="explain-inputs">
                <tbody>
                  {inputs.map(([k, v]) => (
                    <tr key={k}>
                      <th scope="row">{k}</th>
                      <td>{units[k] && typeof v === "number" ? formatWithUnit(v, units[k]) : formatPlain(v)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          )}
          {!entry && <div className="explain-note">Figure as stored by the analysis; formula as the waste model defines it.</div>}
        </div>
      )}
    </span>
  );
}
