import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ReactNode } from "react";

import { apiFetch, onUnauthenticated, setCsrfToken } from "./client";
import type { Session, SessionUser, SignInMethods } from "./types";

interface SessionContextValue {
  /** undefined while the first GET session is in flight. */
  user: SessionUser | null | undefined;
  error: string | null;
  /** What the sign-in page offers; null until the first GET session answers. */
  methods: SignInMethods | null;
  /** Why the session ended under the person's feet (an error code the sign-in page explains). */
  ended: string | null;
  signIn: (username: string, password: string) => Promise<void>;
  signOut: () => Promise<void>;
  refresh: () => Promise<void>;
}

const SessionContext = createContext<SessionContextValue | null>(null);

export function SessionProvider({ children }: { children: ReactNode }) {
  const [user, setUser] = useState<SessionUser | null | undefined>(undefined);
  const [error, setError] = useState<string | null>(null);
  const [methods, setMethods] = useState<SignInMethods | null>(null);
  const [ended, setEnded] = useState<string | null>(null);

  const apply = useCallback((s: Session) => {
    setCsrfToken(s.csrf_token);
    setUser(s.authenticated ? s.user : null);
    setMethods(s.sign_in ?? { oidc: null, local_passwords: true });
    if (s.authenticated) setEnded(null);
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
    return onUnauthenticated((code) => {
      setUser(null);
      if (code === "session_ended") {
        setEnded(code);
        void refresh(); // the sign-in methods and a fresh CSRF token for the next sign-in
      }
    });
  }, [refresh]);

  const signIn = useCallback(
    async (username: string, password: string) => {
      apply(await apiFetch<Session>("session", { method: "POST", body: { username, password } }));
    },
    [apply],
  );

  const signOut = useCallback(async () => {
    let leaving: string | undefined;
    try {
      const answer = await apiFetch<{ logout_url?: string } | undefined>("session", { method: "DELETE" });
      leaving = answer?.logout_url;
    } finally {
      if (!leaving) {
        setUser(null);
        await refresh();
      }
    }
    if (leaving) {
      // A single sign-on session: the provider ends its own too, then sends the browser back to
      // /login. The page is left, so this never settles (the caller's navigation never runs).
      window.location.assign(leaving);
      await new Promise<void>(() => {});
    }
  }, [refresh]);

  const value = useMemo(
    () => ({ user, error, methods, ended, signIn, signOut, refresh }),
    [user, error, methods, ended, signIn, signOut, refresh],
  );
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
