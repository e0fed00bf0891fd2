// Saved views (docs/ui.md, "Saved views"): a runs list, leaderboard or finance filter saved under a
// name. The server stores the page and its query string; opening one opens that URL, so a saved view
// and a shared link are the same thing.
import { useCallback, useEffect, useState } from "react";

import { ApiError, apiFetch } from "../api/client";

export const SAVED_VIEW_PAGES = { "/runs": "runs", "/leaderboards": "leaderboards", "/finance": "finance" } as const;
export type SavedViewPage = (typeof SAVED_VIEW_PAGES)[keyof typeof SAVED_VIEW_PAGES];

export interface SavedView {
  id: number;
  name: string;
  page: SavedViewPage;
  query: string;
  url: string;
  team: string | null;
  team_name: string | null;
  owner: string;
  mine: boolean;
  can_delete: boolean;
  created_at: string;
  updated_at: string;
}

const VIEWS = "views";

/** The page a path shows, if it is one a view can be saved from. */
export function savedViewPage(pathname: string): SavedViewPage | null {
  return (SAVED_VIEW_PAGES as Record<string, SavedViewPage>)[pathname] ?? null;
}

/** A name to start from: the page and its filters, e.g. "Runs: team=nlp, status=failed". */
export function suggestedName(page: SavedViewPage, search: string): string {
  const label = { runs: "Runs", leaderboards: "Leaderboards", finance: "Finance" }[page];
  const parts = [...new URLSearchParams(search)].filter(([k, v]) => v && k !== "page").map(([k, v]) => `${k}=${v}`);
  return (parts.length ? `${label}: ${parts.join(", ")}` : label).slice(0, 100);
}

// Every mounted list re-reads when a view is saved, renamed or deleted anywhere in the app.
const listeners = new Set<() => void>();
export function savedViewsChanged(): void {
  listeners.forEach((l) => l());
}

export function useSavedViews(): { views: SavedView[]; error: ApiError | null; reload: () => void } {
  const [views, setViews] = useState<SavedView[]>([]);
  const [error, setError] = useState<ApiError | null>(null);
  const reload = useCallback(() => {
    apiFetch<{ views: SavedView[] }>(VIEWS)
      .then((data) => {
        setViews(data.views);
        setError(null);
      })
      .catch((err: unknown) => setError(err instanceof ApiError ? err : new ApiError(0, "client", String(err))));
  }, []);
  useEffect(() => {
    reload();
    listeners.add(reload);
    return () => {
      listeners.delete(reload);
    };
  }, [reload]);
  return { views, error, reload };
}

export async function saveView(body: { name: string; page: SavedViewPage; query: string; team: string | null }): Promise<SavedView> {
  const saved = await apiFetch<SavedView>(VIEWS, { method: "POST", body });
  savedViewsChanged();
  return saved;
}

/** Rename, share (team: a slug) or unshare (team: null): the owner's alone. */
export async function updateView(id: number, body: { name?: string; team?: string | null }): Promise<SavedView> {
  const saved = await apiFetch<SavedView>(`${VIEWS}/${id}`, { method: "PATCH", body });
  savedViewsChanged();
  return saved;
}

export async function deleteView(id: number): Promise<void> {
  await apiFetch<void>(`${VIEWS}/${id}`, { method: "DELETE" });
  savedViewsChanged();
}
