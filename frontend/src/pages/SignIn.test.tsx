import { render, screen, waitFor } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter } from "react-router";

import { AppRoutes } from "../App";
import { SessionProvider } from "../api/session";
import { ThemeProvider } from "../lib/theme";
import { renderAt } from "../test/render";
import { mockFetch } from "../test/fixtures";
import { SIGN_IN_ERRORS, SignInPage, signInErrorText } from "./SignIn";

vi.mock("../components/EChart", () => ({
  EChart: ({ label }: { label: string }) => <div data-testid="chart">{label}</div>,
}));

afterEach(() => vi.unstubAllGlobals());

const signedOut = (sign_in: unknown) => ({ authenticated: false, user: null, csrf_token: "tok", sign_in });
const SSO = { label: "Sign in with Example SSO", url: "/api/v1/auth/oidc/start" };

describe("Sign-in page", () => {
  it("offers single sign-on beside the password form, carrying where the person was going", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedOut({ oidc: SSO, local_passwords: true }) }).fn);
    renderAt("/login?next=%2Fruns%3Fstatus%3Dfailed", <SignInPage />, "/login");
    const button = await screen.findByRole("link", { name: "Sign in with Example SSO" });
    expect(button).toHaveAttribute("href", "/api/v1/auth/oidc/start?next=%2Fruns%3Fstatus%3Dfailed");
    expect(screen.getByLabelText("Password")).toBeInTheDocument();
  });

  it("shows only the single sign-on button when local passwords are off", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedOut({ oidc: SSO, local_passwords: false }) }).fn);
    renderAt("/login", <SignInPage />, "/login");
    expect(await screen.findByRole("link", { name: "Sign in with Example SSO" })).toHaveAttribute("href", SSO.url);
    expect(screen.queryByLabelText("Password")).not.toBeInTheDocument();
    expect(screen.queryByRole("button", { name: "Sign in" })).not.toBeInTheDocument();
  });

  it("keeps the password form alone for a server that names no sign-in methods", async () => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": { authenticated: false, user: null, csrf_token: "tok" } }).fn);
    renderAt("/login", <SignInPage />, "/login");
    expect(await screen.findByLabelText("Password")).toBeInTheDocument();
    expect(screen.queryByRole("link")).not.toBeInTheDocument();
  });

  it.each([
    ["wrong_audience", "The identity provider's token was issued for another application (wrong audience), so it was refused."],
    ["wrong_issuer", "The identity provider's token was issued by another provider (wrong issuer), so it was refused."],
    ["token_expired", "The identity provider's token had already expired. Check the clocks of PhantomHub and the provider, then try again."],
    ["state_mismatch", "That sign-in link was already used, expired, or belongs to another browser. Start again from this page."],
    ["nonce_mismatch", "The identity provider's token does not belong to this sign-in (missing or wrong nonce), so it was refused. Start again."],
  ])("says what the refusal %s means", async (code, sentence) => {
    vi.stubGlobal("fetch", mockFetch({ "/api/v1/portal/session": signedOut({ oidc: SSO, local_passwords: false }) }).fn);
    renderAt(`/login?error=${code}`, <SignInPage />, "/login");
    expect(await screen.findByRole("alert")).toHaveTextContent(sentence);
  });

  it("has a sentence for every code and a general one for a code it does not know", () => {
    for (const [code, sentence] of Object.entries(SIGN_IN_ERRORS)) expect(signInErrorText(code)).toBe(sentence);
    expect(signInErrorText("something_new")).toBe("Signing in failed. Try again; if it persists, tell your administrator.");
    expect(signInErrorText("constructor")).toBe(signInErrorText("something_new")); // not Object.prototype's
  });

  it("explains a refused password sign-in when passwords are off", async () => {
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": (_url: string, init?: RequestInit) =>
        init?.method === "POST"
          ? new Response(JSON.stringify({ error: { code: "local_passwords_off", message: "off" } }), { status: 403 })
          : signedOut({ oidc: null, local_passwords: true }),
    }).fn);
    renderAt("/login", <SignInPage />, "/login");
    await userEvent.type(await screen.findByLabelText("Username"), "ada");
    await userEvent.type(screen.getByLabelText("Password"), "pw");
    await userEvent.click(screen.getByRole("button", { name: "Sign in" }));
    expect(await screen.findByRole("alert")).toHaveTextContent(SIGN_IN_ERRORS.local_passwords_off);
  });

  it("sends a person whose single sign-on session ended to the sign-in page with the reason", async () => {
    let ended = false;
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": () =>
        ended
          ? signedOut({ oidc: SSO, local_passwords: false })
          : { authenticated: true, user: { username: "ann", is_finance: false, is_org_admin: false, teams: [] }, csrf_token: "tok" },
      "/api/v1/portal/runs": () => {
        ended = true;
        return new Response(JSON.stringify({ error: { code: "session_ended", message: "Your single sign-on session has ended; sign in again." } }), { status: 401 });
      },
      "/api/v1/pricing/gpus": [],
    }).fn);
    render(
      <ThemeProvider>
        <SessionProvider>
          <MemoryRouter initialEntries={["/runs"]}>
            <AppRoutes />
          </MemoryRouter>
        </SessionProvider>
      </ThemeProvider>,
    );
    await screen.findByRole("heading", { name: "Sign in" });
    await waitFor(() => expect(screen.getByRole("alert")).toHaveTextContent(SIGN_IN_ERRORS.session_ended));
    expect(screen.getByRole("link", { name: SSO.label })).toBeInTheDocument();
  });
});

describe("Signing out of a single sign-on session", () => {
  it("sends the browser to the provider's end-session URL the server gives", async () => {
    const assign = vi.fn();
    vi.stubGlobal("location", { ...window.location, assign });
    vi.stubGlobal("fetch", mockFetch({
      "/api/v1/portal/session": (_url: string, init?: RequestInit) =>
        init?.method === "DELETE"
          ? { logout_url: "https://idp.example/logout?id_token_hint=x" }
          : { authenticated: true, user: { username: "ann", is_finance: false, is_org_admin: false, teams: [] }, csrf_token: "tok" },
      "/api/v1/portal/overview": { error: "x" },
    }).fn);
    render(
      <ThemeProvider>
        <SessionProvider>
          <MemoryRouter initialEntries={["/jobs"]}>
            <AppRoutes />
          </MemoryRouter>
        </SessionProvider>
      </ThemeProvider>,
    );
    await userEvent.click(await screen.findByRole("button", { name: "Sign out" }));
    await waitFor(() => expect(assign).toHaveBeenCalledWith("https://idp.example/logout?id_token_hint=x"));
  });
});
