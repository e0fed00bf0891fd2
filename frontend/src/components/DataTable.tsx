import { useEffect, useRef, useState, type KeyboardEvent, type MouseEvent, type ReactNode } from "react";

import { parseSort } from "../lib/urlState";

export interface Column<T> {
  key: string;
  header: ReactNode;
  /** Plain text name, for the sort button's accessible label when the header is not text. */
  title?: string;
  render: (row: T) => ReactNode;
  align?: "left" | "right" | "center";
  sortable?: boolean;
  className?: string;
  /** "low": a detail column that gives way first on narrow screens (money columns never do). */
  priority?: "low";
  /** This column's cell in the totals row (a row under the others, drawn when any column has one). */
  footer?: ReactNode;
}

interface Props<T> {
  caption: string;
  columns: Column<T>[];
  rows: readonly T[];
  rowKey: (row: T) => string;
  sort?: string;
  onSort?: (key: string) => void;
  /** Opening a row: click, or Enter when the row has focus. */
  onOpen?: (row: T) => void;
  rowLabel?: (row: T) => string;
  footer?: ReactNode;
  dense?: boolean;
  testId?: string;
  /** Keep the first column in view while the others scroll sideways (wide tables). */
  stickyFirst?: boolean;
}

/** Whether a box scrolls sideways, and whether there is more to either side of what is shown. */
function useSideScroll() {
  const ref = useRef<HTMLDivElement>(null);
  const [state, setState] = useState({ overflow: false, left: false, right: false });
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    const measure = () => {
      const overflow = el.scrollWidth > el.clientWidth + 1;
      const left = overflow && el.scrollLeft > 1;
      const right = overflow && el.scrollLeft + el.clientWidth < el.scrollWidth - 1;
      setState((s) => (s.overflow === overflow && s.left === left && s.right === right ? s : { overflow, left, right }));
    };
    measure();
    el.addEventListener("scroll", measure, { passive: true });
    const observer = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(measure);
    observer?.observe(el);
    if (el.firstElementChild) observer?.observe(el.firstElementChild);
    return () => {
      el.removeEventListener("scroll", measure);
      observer?.disconnect();
    };
  }, []);
  return { ref, ...state };
}

/**
 * A box that scrolls a wide table sideways and shows that it does: shaded edges and a note above
 * it ("scroll sideways for more columns →"), so no column is hidden without a sign of it.
 */
export function ScrollBox({ children, label, testId, focusable = true }: { children: ReactNode; label: string; testId?: string; focusable?: boolean }) {
  const scroll = useSideScroll();
  return (
    <div className={`table-scroll${scroll.left ? " more-left" : ""}${scroll.right ? " more-right" : ""}`}>
      {scroll.overflow && (
        <div className="scroll-cue" data-testid={testId ? `${testId}-scroll-cue` : undefined} aria-hidden="true">
          {scroll.right ? "scroll sideways for more columns →" : "← more columns to the left"}
        </div>
      )}
      <div
        className="table-wrap"
        ref={scroll.ref}
        tabIndex={scroll.overflow && focusable ? 0 : undefined}
        role={scroll.overflow && focusable ? "region" : undefined}
        aria-label={scroll.overflow && focusable ? `${label} (scrolls sideways)` : undefined}
      >
        {children}
      </div>
    </div>
  );
}

/**
 * A table whose sortable headers are buttons and whose rows are reachable by Tab, move with the
 * arrow keys (Home/End for the first and last) and open with Enter. When it is wider than its card
 * it scrolls sideways, and says so: shaded edges and a "scroll for more columns" note.
 */
export function DataTable<T>({ caption, columns, rows, rowKey, sort, onSort, onOpen, rowLabel, footer, dense, testId, stickyFirst }: Props<T>) {
  const current = sort ? parseSort(sort) : null;

  const open = (row: T) => (e: MouseEvent | KeyboardEvent) => {
    if (!onOpen) return;
    const target = e.target as HTMLElement;
    if (target.closest("button, a, input, select, textarea") && target !== e.currentTarget) return;
    if ("key" in e) {
      if (e.key !== "Enter" && e.key !== " ") return;
      e.preventDefault();
    }
    onOpen(row);
  };

  const move = (e: KeyboardEvent<HTMLTableSectionElement>) => {
    const keys: Record<string, number> = { ArrowDown: 1, ArrowUp: -1 };
    if (!(e.key in keys) && e.key !== "Home" && e.key !== "End") return;
    const row = (e.target as HTMLElement).closest("tr");
    if (!row || row !== e.target) return;
    const all = Array.from(e.currentTarget.querySelectorAll<HTMLTableRowElement>(":scope > tr[tabindex]"));
    const at = all.indexOf(row);
    const next = e.key === "Home" ? 0 : e.key === "End" ? all.length - 1 : at + keys[e.key];
    if (next < 0 || next >= all.length) return;
    e.preventDefault();
    all[next].focus();
  };

  const cls = (col: Column<T>) => `align-${col.align ?? "left"} ${col.className ?? ""}${col.priority === "low" ? " col-low" : ""}`;

  return (
    <ScrollBox label={caption} testId={testId} focusable={!onOpen}>
        <table className={`table${dense ? " table-dense" : ""}${onOpen ? " table-clickable" : ""}${stickyFirst ? " table-sticky-first" : ""}`} data-testid={testId}>
          <caption className="visually-hidden">{caption}</caption>
          <thead>
            <tr>
              {columns.map((col) => {
                const active = current?.key === col.key;
                const ariaSort = active ? (current!.desc ? "descending" : "ascending") : col.sortable ? "none" : undefined;
                return (
                  <th key={col.key} scope="col" className={cls(col)} aria-sort={ariaSort}>
                    {col.sortable && onSort ? (
                      <button
                        type="button"
                        className={`sort-btn${active ? " is-active" : ""}`}
                        onClick={() => onSort(col.key)}
                        aria-label={`Sort by ${col.title ?? (typeof col.header === "string" ? col.header : col.key)}`}
                      >
                        <span>{col.header}</span>
                        <span className="sort-icon" aria-hidden="true">
                          {active ? (current!.desc ? "↓" : "↑") : "↕"}
                        </span>
                      </button>
                    ) : (
                      col.header
                    )}
                  </th>
                );
              })}
            </tr>
          </thead>
          <tbody onKeyDown={onOpen ? move : undefined}>
            {rows.map((row) => (
              <tr
                key={rowKey(row)}
                tabIndex={onOpen ? 0 : undefined}
                onClick={onOpen ? open(row) : undefined}
                onKeyDown={onOpen ? open(row) : undefined}
                aria-label={rowLabel?.(row)}
                data-row-key={rowKey(row)}
              >
                {columns.map((col) => (
                  <td key={col.key} className={cls(col)} data-col={col.key}>
                    {col.render(row)}
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
          {footer ? (
            <tfoot>{footer}</tfoot>
          ) : (
            columns.some((col) => col.footer !== undefined) && (
              <tfoot>
                <tr className="total-row" data-testid={testId ? `${testId}-totals` : undefined}>
                  {columns.map((col) => (
                    <td key={col.key} className={cls(col)} data-col={col.key}>
                      {col.footer}
                    </td>
                  ))}
                </tr>
              </tfoot>
            )
          )}
        </table>
    </ScrollBox>
  );
}
