import { formatMonth } from "../lib/format";
import { currentMonth, isMonth, recentMonths, ROLLING_PERIODS } from "../lib/urlState";

/** 7 / 30 / 90 days, or a calendar month (the last twelve). */
export function PeriodPicker({ value, onChange }: { value: string; onChange: (period: string) => void }) {
  const months = recentMonths(currentMonth(), 12);
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
        {months.map((m) => (
          <option key={m} value={m}>
            {formatMonth(m)}
          </option>
        ))}
      </select>
    </div>
  );
}
