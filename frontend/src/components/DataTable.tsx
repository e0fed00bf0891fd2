import type { KeyboardEvent, MouseEvent, ReactNode } from "react";

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
}

/** A table whose sortable headers are buttons and whose rows are reachable by Tab and open with Enter. */
export function DataTable<T>({ caption, columns, rows, rowKey, sort, onSort, onOpen, rowLabel, footer, dense, testId }: Props<T>) {
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

  return (
    <div className="table-wrap">
      <table className={`table${dense ? " table-dense" : ""}${onOpen ? " table-clickable" : ""}`} data-testid={testId}>
        <caption className="visually-hidden">{caption}</caption>
        <thead>
          <tr>
            {columns.map((col) => {
              const active = current?.key === col.key;
              const ariaSort = active ? (current!.desc ? "descending" : "ascending") : col.sortable ? "none" : undefined;
              return (
                <th key={col.key} scope="col" className={`align-${col.align ?? "left"} ${col.className ?? ""}`} aria-sort={ariaSort}>
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
        <tbody>
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
                <td key={col.key} className={`align-${col.align ?? "left"} ${col.className ?? ""}`}>
                  {col.render(row)}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
        {footer && <tfoot>{footer}</tfoot>}
      </table>
    </div>
  );
}
