// A real OpenID provider for PhantomHub's browser tests (tests/e2e/test_oidc_sign_in.py):
// oidc-provider (the certified Node implementation) with one confidential client, PKCE required,
// refresh tokens issued, RP-initiated logout on, and a plain login page of its own.
//
//   node provider.mjs --port 20123 --config /tmp/oidc.json
//
// The config file holds {"client": {client_id, client_secret, redirect_uris, post_logout_redirect_uris},
// "users": {"<sub>": {"username", "password", "email", "groups": [...]}}}; the users are read again at
// every lookup, so a test removes someone from a group by rewriting the file.
//
// Test-only, not part of the provider proper: POST /_test/next-id-token {"tamper": ...} makes the next
// token response carry its ID token changed and re-signed with the provider's own key: "wrong_iss",
// "wrong_aud", "expired", "no_nonce" or "other_nonce". PhantomHub's own checks are what refuse it.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { SignJWT, decodeJwt, exportJWK, generateKeyPair, importJWK } from "jose";
import Provider from "oidc-provider";

const { values: args } = parseArgs({ options: { port: { type: "string" }, config: { type: "string" } } });
const port = Number(args.port);
const issuer = `http://127.0.0.1:${port}`;
const config = () => JSON.parse(readFileSync(args.config, "utf8"));

const { privateKey } = await generateKeyPair("RS256", { extractable: true });
const signingJwk = { ...(await exportJWK(privateKey)), kid: "phantomhub-test", alg: "RS256", use: "sig" };
const signingKey = await importJWK(signingJwk, "RS256");

let nextTamper = null;
const TAMPER = {
  wrong_iss: (p) => ({ ...p, iss: "https://someone-else.example" }),
  wrong_aud: (p) => ({ ...p, aud: "another-application", azp: "another-application" }),
  expired: (p) => ({ ...p, iat: p.iat - 7200, exp: p.iat - 3600 }),
  no_nonce: ({ nonce, ...p }) => p,
  other_nonce: (p) => ({ ...p, nonce: "a-nonce-this-browser-never-sent" }),
};

const html = (title, body) => `<!doctype html><html><head><meta charset="utf-8"><title>${title}</title></head>
<body><main><h1>${title}</h1>${body}</main></body></html>`;
const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

const provider = new Provider(issuer, {
  clients: [{ ...config().client, grant_types: ["authorization_code", "refresh_token"], response_types: ["code"],
    token_endpoint_auth_method: "client_secret_post" }],
  jwks: { keys: [signingJwk] },
  cookies: { keys: ["phantomhub-test-provider-only"] },
  scopes: ["openid", "offline_access", "email", "profile", "groups"],
  claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["preferred_username", "name"], groups: ["groups"] },
  pkce: { required: () => true },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed("refresh_token"),
  features: {
    devInteractions: { enabled: false },
    rpInitiatedLogout: {
      enabled: true,
      logoutSource: async (ctx, form) => {
        ctx.body = html("Sign out of the test provider", `${form}<button type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>`);
      },
      postLogoutSuccessSource: async (ctx) => {
        ctx.body = html("Signed out of the test provider", "");
      },
    },
  },
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, RefreshToken: 86400, Interaction: 600, Session: 86400, Grant: 86400 },
  async findAccount(ctx, sub) {
    const user = config().users[sub];
    if (!user) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, email: user.email, email_verified: true, preferred_username: user.username, name: user.username, groups: user.groups };
      },
    };
  },
});

async function readForm(req) {
  let body = "";
  for await (const chunk of req) {
    body += chunk;
    if (body.length > 4096) throw new Error("form too large");
  }
  return new URLSearchParams(body);
}

// The login page, the test switch, and the ID token changer, ahead of the provider's own routes.
provider.use(async (ctx, next) => {
  const match = ctx.path.match(/^\/interaction\/([\w-]+)(\/login|\/abort)?$/);
  if (ctx.path === "/_test/next-id-token" && ctx.method === "POST") {
    const form = await readForm(ctx.req);
    const tamper = form.get("tamper");
    if (!(tamper in TAMPER)) ctx.throw(400, `unknown tamper ${tamper}`);
    nextTamper = tamper;
    ctx.body = { armed: tamper };
    return;
  }
  if (match) {
    const details = await provider.interactionDetails(ctx.req, ctx.res);
    if (match[2] === "/abort") {
      const to = await provider.interactionResult(ctx.req, ctx.res, { error: "access_denied", error_description: "the person cancelled" });
      ctx.redirect(to);
      return;
    }
    if (match[2] === "/login" && ctx.method === "POST") {
      const form = await readForm(ctx.req);
      const users = config().users;
      const sub = Object.keys(users).find((s) => users[s].username === form.get("username"));
      if (!sub || users[sub].password !== form.get("password")) {
        ctx.body = loginPage(details.uid, "Unknown username or wrong password.");
        return;
      }
      const grant = new provider.Grant({ accountId: sub, clientId: details.params.client_id });
      grant.addOIDCScope(details.params.scope);
      const grantId = await grant.save();
      const to = await provider.interactionResult(ctx.req, ctx.res, { login: { accountId: sub }, consent: { grantId } },
        { mergeWithLastSubmission: false });
      ctx.redirect(to);
      return;
    }
    ctx.body = loginPage(details.uid, "");
    return;
  }
  await next();
  if (ctx.path === "/token" && nextTamper && ctx.body && ctx.body.id_token) {
    const claims = TAMPER[nextTamper](decodeJwt(ctx.body.id_token));
    nextTamper = null;
    const idToken = await new SignJWT(claims).setProtectedHeader({ alg: "RS256", kid: signingJwk.kid, typ: "JWT" }).sign(signingKey);
    ctx.body = { ...ctx.body, id_token: idToken };
  }
});

function loginPage(uid, error) {
  return html("Test provider sign-in", `
<form method="post" action="/interaction/${escape(uid)}/login">
  ${error ? `<p role="alert">${escape(error)}</p>` : ""}
  <label>Provider username <input name="username" autocomplete="off"></label>
  <label>Provider password <input name="password" type="password"></label>
  <button type="submit">Continue</button>
</form>
<a href="/interaction/${escape(uid)}/abort">Cancel</a>`);
}

provider.listen(port, "127.0.0.1", () => {
  console.log(`test OpenID provider on ${issuer}`);
});
