import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";

import { apiFetch, onUnauthenticated, setCsrfToken } from "./client";
import type { Session, SessionUser } from "./types";

interface SessionContextValue {
  /** undefined while the first GET session is in flight. */
  user: SessionUser | null | undefined;
  error: string | null;
  signIn: (username: string, password: string) => Promise<void>;
  signOut: () => Promise<void>;
  refresh: () => Promise<void>;
}

const SessionContext = createContext<SessionContextValue | null>(null);

export function SessionProvider({ children }: { children: ReactNode }) {
  const [user, setUser] = useState<SessionUser | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);

  const apply = useCallback((s: Session) => {
    setCsrfToken(s.csrf_token);
    setUser(s.authenticated ? s.user : null);
    setError(null);
  }, []);

  const refresh = useCallback(async () => {
    try {
      apply(await apiFetch<Session>("session"));
    } catch (err) {
      setError((err as Error).message);
      setUser(null);
    }
  }, [apply]);

  useEffect(() => {
    void refresh();
    return onUnauthenticated(() => setUser(null));
  }, [refresh]);

  const signIn = useCallback(
    async (username: string, password: string) => {
      apply(await apiFetch<Session>("session", { method: "POST", body: { username, password } }));
    },
    [apply],
  );

  const signOut = useCallback(async () => {
    try {
      await apiFetch("session", { method: "DELETE" });
    } finally {
      setUser(null);
      await refresh();
    }
  }, [refresh]);

  const value = useMemo(() => ({ user, error, signIn, signOut, refresh }), [user, error, signIn, signOut, refresh]);
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): SessionContextValue {
  const ctx = useContext(SessionContext);
  if (!ctx) throw new Error("useSession outside SessionProvider");
  return ctx;
}

/** Who may do what, as the API decides it; the UI only hides controls the API would refuse. */
export function canCloseMonth(user: SessionUser | null | undefined): boolean {
  return !!user && (user.is_finance || user.is_org_admin);
}

export function canReopenMonth(user: SessionUser | null | undefined): boolean {
  return !!user && user.is_org_admin;
}

export function isAdmin(user: SessionUser | null | undefined): boolean {
  return !!user && user.is_org_admin;
}
