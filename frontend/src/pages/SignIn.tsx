import { useState, type FormEvent } from "react";
import { Navigate, useSearchParams } from "react-router";

import { ApiError } from "../api/client";
import { useSession } from "../api/session";
import { Logo, ThemeToggle } from "../components/Layout";

/** What each refusal code of the server's sign-in (`/login?error=<code>`, or a 401 that ended the
 * session) means, in words; docs/identity.md, "Troubleshooting", lists the causes. */
export const SIGN_IN_ERRORS: Record<string, string> = {
  access_denied: "The identity provider did not sign you in (the sign-in was cancelled or refused there).",
  login_required: "The identity provider asks you to sign in there first.",
  consent_required: "The identity provider needs your consent before PhantomHub may sign you in.",
  interaction_required: "The identity provider needs you to finish signing in there first.",
  provider_error: "The identity provider answered with an error. Try again; if it persists, tell your administrator.",
  provider_unavailable: "The identity provider could not be reached or answered something unusable. Try again later or tell your administrator.",
  token_refused: "The identity provider refused to complete the sign-in (the sign-in code was invalid or already used). Try again.",
  bad_signature: "The identity provider's token is not signed by a key it publishes, so it was refused.",
  wrong_issuer: "The identity provider's token was issued by another provider (wrong issuer), so it was refused.",
  wrong_audience: "The identity provider's token was issued for another application (wrong audience), so it was refused.",
  token_expired: "The identity provider's token had already expired. Check the clocks of PhantomHub and the provider, then try again.",
  token_not_yet_valid: "The identity provider's token is dated in the future. Check the clocks of PhantomHub and the provider, then try again.",
  nonce_mismatch: "The identity provider's token does not belong to this sign-in (missing or wrong nonce), so it was refused. Start again.",
  state_missing: "The answer from the identity provider carried no sign-in state, so it was refused. Start again from this page.",
  state_mismatch: "That sign-in link was already used, expired, or belongs to another browser. Start again from this page.",
  claims_missing: "The identity provider did not say who you are (no subject or name), so you cannot be signed in.",
  account_inactive: "Your PhantomHub account is deactivated. Ask an administrator.",
  oidc_off: "Single sign-on is not configured on this PhantomHub.",
  session_ended: "Your single sign-on session has ended; sign in again.",
  breakglass_invalid: "That emergency sign-in link is invalid, expired or already used. Ask for a new one.",
  local_passwords_off: "Password sign-in is switched off on this PhantomHub: sign in with single sign-on.",
};

export function signInErrorText(code: string): string {
  // Own keys only: `?error=constructor` must not read Object.prototype.
  return Object.hasOwn(SIGN_IN_ERRORS, code) ? SIGN_IN_ERRORS[code] : "Signing in failed. Try again; if it persists, tell your administrator.";
}

/** Only same-site paths are followed after signing in (no open redirect via ?next=). */
export function safeNext(next: string | null): string {
  if (!next || !next.startsWith("/") || next.startsWith("//") || next.startsWith("/\\")) return "/";
  return next;
}

export function SignInPage() {
  const { user, signIn, methods, ended } = useSession();
  const [params] = useSearchParams();
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const next = safeNext(params.get("next"));
  const refusal = params.get("error") ?? ended;
  const passwords = methods?.local_passwords ?? true;
  const oidc = methods?.oidc ?? null;
  const oidcHref = oidc ? (next === "/" ? oidc.url : `${oidc.url}?next=${encodeURIComponent(next)}`) : "";

  if (user) return <Navigate to={next} replace />;

  async function submit(e: FormEvent) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(username, password);
    } catch (err) {
      if (err instanceof ApiError && err.code === "invalid_credentials") setError("That username and password do not match.");
      else if (err instanceof ApiError && Object.hasOwn(SIGN_IN_ERRORS, err.code)) setError(signInErrorText(err.code));
      else setError((err as Error).message);
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
        {refusal && !error && (
          <div className="form-error" role="alert">
            {signInErrorText(refusal)}
          </div>
        )}
        {oidc && (
          <a className={passwords ? "btn btn-block" : "btn btn-primary btn-block"} href={oidcHref}>
            {oidc.label}
          </a>
        )}
        {oidc && passwords && <div className="signin-or muted">or with a password</div>}
        {passwords && (
          <>
            <label className="field">
              <span>Username</span>
              <input className="input" name="username" autoComplete="username" value={username} onChange={(e) => setUsername(e.target.value)} required autoFocus={!oidc} />
            </label>
            <label className="field">
              <span>Password</span>
              <input className="input" name="password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} required />
            </label>
          </>
        )}
        {error && (
          <div className="form-error" role="alert">
            {error}
          </div>
        )}
        {passwords && (
          <button className="btn btn-primary btn-block" type="submit" disabled={busy || user === undefined}>
            {busy ? "Signing in…" : "Sign in"}
          </button>
        )}
      </form>
    </div>
  );
}
