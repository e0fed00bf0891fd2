import type { ReactNode } from "react";

import type { ApiError } from "../api/client";

export function Loading({ label = "Loading…", rows = 3 }: { label?: string; rows?: number }) {
  return (
    <div className="state state-loading" role="status" aria-live="polite">
      <span className="visually-hidden">{label}</span>
      {Array.from({ length: rows }, (_, i) => (
        <div key={i} className="skeleton" style={{ width: `${92 - i * 14}%` }} />
      ))}
    </div>
  );
}

export function Empty({ title, children }: { title: string; children?: ReactNode }) {
  return (
    <div className="state state-empty">
      <div className="state-icon" aria-hidden="true">
        ∅
      </div>
      <div className="state-title">{title}</div>
      {children && <div className="state-body">{children}</div>}
    </div>
  );
}

export function ErrorState({ error, onRetry }: { error: ApiError | Error; onRetry?: () => void }) {
  const status = "status" in error ? (error as ApiError).status : 0;
  const title =
    status === 404
      ? "Not found, or not visible to you"
      : status === 403
        ? "You do not have access to this"
        : status >= 500
          ? "The server had a problem"
          : "Could not load this";
  return (
    <div className="state state-error" role="alert">
      <div className="state-icon" aria-hidden="true">
        !
      </div>
      <div className="state-title">{title}</div>
      <div className="state-body">{error.message}</div>
      {onRetry && status !== 404 && status !== 403 && (
        <button type="button" className="btn" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

/** Renders loading / error / empty around data, so every page states what it is waiting for. */
export function Async<T>({
  state,
  empty,
  isEmpty,
  children,
  loadingRows,
}: {
  state: { data: T | undefined; error: ApiError | undefined; loading: boolean; reload: () => void };
  empty?: ReactNode;
  isEmpty?: (data: T) => boolean;
  children: (data: T) => ReactNode;
  loadingRows?: number;
}) {
  if (state.error) return <ErrorState error={state.error} onRetry={state.reload} />;
  if (state.data === undefined) return <Loading rows={loadingRows} />;
  if (isEmpty?.(state.data)) return <>{empty ?? <Empty title="Nothing here yet" />}</>;
  return <>{children(state.data)}</>;
}

/** A write the API refused: its message (which names the field at fault), as an alert. */
export function FieldErrors({ error }: { error: ApiError | null }) {
  if (!error) return null;
  return (
    <div className="form-error" role="alert">
      {error.message}
    </div>
  );
}
