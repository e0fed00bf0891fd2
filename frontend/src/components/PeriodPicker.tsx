import { useEffect, useState, type FormEvent } from "react";

import { formatMonth } from "../lib/format";
import { currentMonth, daysBetween, isDay, isMonth, isRange, MAX_RANGE_DAYS, periodDates, periodLabel, rangePeriod, recentMonths, ROLLING_PERIODS } from "../lib/urlState";

/** 7 / 30 / 90 days, a calendar month (the last twelve), or any range of days. */
export function PeriodPicker({ value, onChange }: { value: string; onChange: (period: string) => void }) {
  const months = recentMonths(currentMonth(), 12);
  const custom = isRange(value);
  const [open, setOpen] = useState(false);
  return (
    <div className="period-picker">
      <div className="segmented" role="radiogroup" aria-label="Period">
        {ROLLING_PERIODS.map((p) => (
          <button key={p} type="button" role="radio" aria-checked={value === p} className={value === p ? "is-active" : ""} onClick={() => onChange(p)}>
            {p}
          </button>
        ))}
      </div>
      <label className="visually-hidden" htmlFor="period-month">
        Month
      </label>
      <select id="period-month" className={`select${isMonth(value) ? " is-active" : ""}`} value={isMonth(value) ? value : ""} onChange={(e) => e.target.value && onChange(e.target.value)}>
        <option value="">Month…</option>
        {isMonth(value) && !months.includes(value) && <option value={value}>{formatMonth(value)}</option>}
        {months.map((m) => (
          <option key={m} value={m}>
            {formatMonth(m)}
          </option>
        ))}
      </select>
      <button type="button" className={`btn${custom ? " is-active" : ""}`} aria-expanded={open} aria-controls="period-custom" onClick={() => setOpen((o) => !o)}>
        {custom ? periodLabel(value) : "Custom…"}
      </button>
      {open && (
        <CustomRange
          value={value}
          onApply={(p) => {
            setOpen(false);
            onChange(p);
          }}
          onCancel={() => setOpen(false)}
        />
      )}
    </div>
  );
}

function CustomRange({ value, onApply, onCancel }: { value: string; onApply: (period: string) => void; onCancel: () => void }) {
  const initial = periodDates(value);
  const [from, setFrom] = useState(initial.start);
  const [to, setTo] = useState(initial.end);
  useEffect(() => {
    document.getElementById("period-from")?.focus();
  }, []);
  const problem = !isDay(from) || !isDay(to) ? "Give both days." : to < from ? "The range ends before it starts." : daysBetween(from, to) > MAX_RANGE_DAYS ? `At most ${MAX_RANGE_DAYS} days.` : null;
  const submit = (e: FormEvent) => {
    e.preventDefault();
    if (!problem) onApply(rangePeriod(from, to));
  };
  return (
    <form
      id="period-custom"
      className="period-custom"
      aria-label="Custom range of days"
      onSubmit={submit}
      onKeyDown={(e) => {
        if (e.key === "Escape") onCancel();
      }}
    >
      <label className="filter" htmlFor="period-from">
        <span className="filter-label">From</span>
        <input id="period-from" className="input" type="date" value={from} onChange={(e) => setFrom(e.target.value)} />
      </label>
      <label className="filter" htmlFor="period-to">
        <span className="filter-label">to (included)</span>
        <input id="period-to" className="input" type="date" value={to} onChange={(e) => setTo(e.target.value)} />
      </label>
      <div className="period-custom-actions">
        <button type="submit" className="btn btn-primary btn-small" disabled={!!problem}>
          Apply
        </button>
        <button type="button" className="btn btn-ghost btn-small" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {problem && from && to && (
        <span className="muted small" role="status">
          {problem}
        </span>
      )}
    </form>
  );
}

/** Says that a period or month in the URL was not one, and what is shown instead. */
export function ParamNotice({ name, value, shown }: { name: "period" | "month"; value: string | null; shown: string }) {
  if (!value) return null;
  const what = name === "period" ? "a period (7d, 30d, 90d, a month YYYY-MM or days YYYY-MM-DD..YYYY-MM-DD)" : "a month (YYYY-MM, 2000-01 to 2099-12)";
  return (
    <div className="notice" role="status" data-testid="param-notice">
      “{value}” is not {what}: showing {shown} instead.
    </div>
  );
}
