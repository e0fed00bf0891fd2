import { useCallback, useEffect, useRef, useState } from "react";

import { ApiError, apiFetch } from "./client";

export interface ApiState<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  /** Fetch again (after a write, or from an error state's "Try again"). */
  reload: () => void;
}

/**
 * Reads `path` (null: nothing to read yet) and re-reads when it changes. Keeps the previous data
 * while a new path loads, so a table does not blink when a filter changes; stale answers of an
 * earlier path are discarded.
 */
export function useApi<T>(path: string | null): ApiState<T> {
  const [state, setState] = useState<{ path: string | null; data?: T; error?: ApiError; loading: boolean }>({
    path,
    loading: path !== null,
  });
  const [nonce, setNonce] = useState(0);
  const current = useRef(path);
  current.current = path;

  useEffect(() => {
    if (path === null) {
      setState({ path, loading: false });
      return;
    }
    const controller = new AbortController();
    setState((s) => ({ ...s, path, loading: true, error: undefined }));
    apiFetch<T>(path, { signal: controller.signal })
      .then((data) => {
        if (current.current === path) setState({ path, data, loading: false });
      })
      .catch((err: unknown) => {
        if ((err as Error).name === "AbortError") return;
        const error = err instanceof ApiError ? err : new ApiError(0, "client", String(err));
        if (current.current === path) setState((s) => ({ ...s, path, error, loading: false }));
      });
    return () => controller.abort();
  }, [path, nonce]);

  const reload = useCallback(() => setNonce((n) => n + 1), []);
  return { data: state.data, error: state.error, loading: state.loading, reload };
}
