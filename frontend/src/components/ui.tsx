import type { ReactNode } from "react";
import { Link } from "react-router";

import { CATEGORIES, CATEGORY_COLOR, CATEGORY_HELP, CATEGORY_LABEL, categoryColor, categoryLabel } from "../lib/categories";
import { formatNumber, formatPct, formatPctPoints, formatUsd, formatUsdChange, isNum } from "../lib/format";

export function PageHeader({ title, subtitle, actions, crumbs }: { title: ReactNode; subtitle?: ReactNode; actions?: ReactNode; crumbs?: { to: string; label: string }[] }) {
  return (
    <header className="page-header">
      <div>
        {crumbs && crumbs.length > 0 && (
          <nav className="crumbs" aria-label="Breadcrumb">
            {crumbs.map((c) => (
              <span key={c.to}>
                <Link to={c.to}>{c.label}</Link>
                <span aria-hidden="true"> / </span>
              </span>
            ))}
          </nav>
        )}
        <h1>{title}</h1>
        {subtitle && <div className="page-subtitle">{subtitle}</div>}
      </div>
      {actions && <div className="page-actions">{actions}</div>}
    </header>
  );
}

export function Card({ title, actions, children, className, id }: { title?: ReactNode; actions?: ReactNode; children: ReactNode; className?: string; id?: string }) {
  return (
    <section className={`card ${className ?? ""}`} aria-labelledby={id && title ? `${id}-title` : undefined} id={id}>
      {(title || actions) && (
        <div className="card-head">
          {title && (
            <h2 className="card-title" id={id ? `${id}-title` : undefined}>
              {title}
            </h2>
          )}
          {actions && <div className="card-actions">{actions}</div>}
        </div>
      )}
      {children}
    </section>
  );
}

export type ChangeKind = "usd" | "pp";

/** A change against the previous period, coloured by whether it is good news. */
export function Change({ value, kind, goodWhen, title }: { value: number | null | undefined; kind: ChangeKind; goodWhen: "up" | "down"; title?: string }) {
  if (!isNum(value))
    return (
      <span className="change change-none" title={title}>
        no previous
      </span>
    );
  const text = kind === "usd" ? formatUsdChange(value) : formatPctPoints(value);
  const flat = Math.abs(value) < (kind === "usd" ? 0.005 : 0.0005);
  const good = flat ? null : (value > 0) === (goodWhen === "up");
  const cls = flat ? "change-flat" : good ? "change-good" : "change-bad";
  return (
    <span className={`change ${cls}`}>
      <span aria-hidden="true">{flat ? "→" : value > 0 ? "▲" : "▼"}</span> {text}
    </span>
  );
}

export function Stat({ label, value, unit, sub, change, explain, testId, tone }: { label: string; value: ReactNode; unit?: string; sub?: ReactNode; change?: ReactNode; explain?: ReactNode; testId?: string; tone?: "accent" | "warn" }) {
  return (
    <div className={`stat${tone ? ` stat-${tone}` : ""}`} data-testid={testId}>
      <div className="stat-label">
        {label}
        {explain}
      </div>
      <div className="stat-value">
        {value}
        {unit && <span className="stat-unit">{unit}</span>}
      </div>
      {(sub || change) && (
        <div className="stat-sub">
          {change}
          {sub && <span>{sub}</span>}
        </div>
      )}
    </div>
  );
}

export function CategoryDot({ name }: { name: string }) {
  return <span className="cat-dot" style={{ background: categoryColor(name) }} aria-hidden="true" />;
}

export function CategoryName({ name }: { name: string }) {
  return (
    <span className="cat-name" title={(CATEGORY_HELP as Record<string, string>)[name]}>
      <CategoryDot name={name} />
      {categoryLabel(name)}
    </span>
  );
}

/** One horizontal bar split into the six categories by dollars, with a legend. */
export function CategoryBar({ usd, showLegend = true, height = 14 }: { usd: Record<string, number>; showLegend?: boolean; height?: number }) {
  const total = CATEGORIES.reduce((s, c) => s + Math.max(usd[c] ?? 0, 0), 0);
  return (
    <div className="catbar-wrap">
      <div className="catbar" style={{ height }} role="img" aria-label={CATEGORIES.map((c) => `${CATEGORY_LABEL[c]} ${formatUsd(usd[c] ?? 0)}`).join(", ")}>
        {total > 0 ? (
          CATEGORIES.map((c) => {
            const v = Math.max(usd[c] ?? 0, 0);
            if (v <= 0) return null;
            return <span key={c} style={{ width: `${(v / total) * 100}%`, background: CATEGORY_COLOR[c] }} title={`${CATEGORY_LABEL[c]}: ${formatUsd(v)} (${formatPct(v / total)})`} />;
          })
        ) : (
          <span className="catbar-empty" style={{ width: "100%" }} />
        )}
      </div>
      {showLegend && (
        <ul className="catbar-legend">
          {CATEGORIES.map((c) => (
            <li key={c}>
              <CategoryDot name={c} />
              <span className="catbar-legend-name">{CATEGORY_LABEL[c]}</span>
              <span className="catbar-legend-value">{formatUsd(usd[c] ?? 0)}</span>
              <span className="muted">{total > 0 ? formatPct((usd[c] ?? 0) / total) : "–"}</span>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** A compact inline bar for a share (0..1) inside a table cell. */
export function ShareBar({ value, color }: { value: number | null | undefined; color?: string }) {
  if (!isNum(value)) return <span className="muted">–</span>;
  const pct = Math.max(0, Math.min(1, value)) * 100;
  return (
    <span className="sharebar">
      <span className="sharebar-track">
        <span className="sharebar-fill" style={{ width: `${pct}%`, background: color }} />
      </span>
      <span className="sharebar-text">{formatPct(value)}</span>
    </span>
  );
}

const STATUS_CLASS: Record<string, string> = {
  running: "badge-info",
  finished: "badge-ok",
  failed: "badge-bad",
  crashed: "badge-bad",
};

export function StatusBadge({ status }: { status: string }) {
  return <span className={`badge ${STATUS_CLASS[status] ?? ""}`}>{status}</span>;
}

const SEVERITY_CLASS: Record<string, string> = { high: "badge-bad", medium: "badge-warn", low: "badge-info", info: "" };

export function SeverityBadge({ severity }: { severity: string }) {
  return <span className={`badge ${SEVERITY_CLASS[severity] ?? ""}`}>{severity}</span>;
}

export function Segmented<T extends string>({ label, options, value, onChange }: { label: string; options: { value: T; label: string }[]; value: T; onChange: (v: T) => void }) {
  return (
    <div className="segmented" role="radiogroup" aria-label={label}>
      {options.map((o) => (
        <button key={o.value} type="button" role="radio" aria-checked={o.value === value} className={o.value === value ? "is-active" : ""} onClick={() => onChange(o.value)}>
          {o.label}
        </button>
      ))}
    </div>
  );
}

/** "1–50 of 1,234 · Previous · Page 1 of 25 · Next", for every paged table; `extra` goes after
 * the buttons (e.g. "Show all"), and `hideButtons` keeps only the count (everything is shown). */
export function Pager({ first, last, count, page, pages, onPage, testId, shownTestId, extra, hideButtons }: {
  first: number;
  last: number;
  count: number;
  page: number;
  pages: number;
  onPage: (page: number) => void;
  testId?: string;
  shownTestId?: string;
  extra?: ReactNode;
  hideButtons?: boolean;
}) {
  return (
    <nav className="pager" aria-label="Pages" data-testid={testId}>
      <span className="muted" data-testid={shownTestId}>
        {formatNumber(first)}–{formatNumber(last)} of {formatNumber(count)}
      </span>
      {!hideButtons && (
        <>
          <button type="button" className="btn btn-small" disabled={page <= 1} onClick={() => onPage(page - 1)}>
            Previous
          </button>
          <span className="muted">
            Page {formatNumber(page)} of {formatNumber(pages)}
          </span>
          <button type="button" className="btn btn-small" disabled={page >= pages} onClick={() => onPage(page + 1)}>
            Next
          </button>
        </>
      )}
      {extra}
    </nav>
  );
}
