import { useState, type FormEvent } from "react";
import { Navigate, useSearchParams } from "react-router";

import { ApiError } from "../api/client";
import { useSession } from "../api/session";
import { Logo, ThemeToggle } from "../components/Layout";

/** Only same-site paths are followed after signing in (no open redirect via ?next=). */
export function safeNext(next: string | null): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/";
  return next;
}

export function SignInPage() {
  const { user, signIn } = useSession();
  const [params] = useSearchParams();
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const next = safeNext(params.get("next"));

  if (user) return <Navigate to={next} replace />;

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(username, password);
    } catch (err) {
      setError(err instanceof ApiError && err.code === "invalid_credentials" ? "That username and password do not match." : (err as Error).message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <div className="signin">
      <div className="signin-theme">
        <ThemeToggle />
      </div>
      <form className="signin-card" onSubmit={submit} aria-labelledby="signin-title">
        <Logo />
        <h1 id="signin-title">Sign in</h1>
        <p className="muted">See where your GPU spend goes, and what you can win back.</p>
        <label className="field">
          <span>Username</span>
          <input className="input" name="username" autoComplete="username" value={username} onChange={(e) => setUsername(e.target.value)} required autoFocus />
        </label>
        <label className="field">
          <span>Password</span>
          <input className="input" name="password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} required />
        </label>
        {error && (
          <div className="form-error" role="alert">
            {error}
          </div>
        )}
        <button className="btn btn-primary btn-block" type="submit" disabled={busy || user === undefined}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </div>
  );
}
