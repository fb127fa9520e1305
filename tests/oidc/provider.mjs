// A real OpenID provider for the sign-on tests: node-oidc-provider with its development login
// form (any password), a test client, users with a groups claim, and RP-initiated logout.
// Configured by environment: PORT, REDIRECT_URI, POST_LOGOUT_URI, KEYS (a JSON file of private JWKs,
// the first signs), USERS (a JSON file {"name": {"groups": [...]}}, read at each sign-in so a test can
// change someone's groups). Restart it with other KEYS to rotate.
// ID_TOKEN names a JSON file that, while it exists, makes the token endpoint hand out a wrong ID token
// (read at each token request, so a test can switch): an object changes claims and signs again with the
// provider's key ({"aud": "other-app"}, {"iss": "..."}, {"nonce": "..."}, {"exp_offset": -3600}: expiry
// that many seconds from now); "tamper" changes a claim after signing (the signature no longer matches);
// "foreign_key" signs with a key the provider never published (an unknown kid).
import { existsSync, readFileSync } from "node:fs";
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair, importJWK } from "jose";
import Provider from "oidc-provider";

const port = Number(process.env.PORT);
const keys = JSON.parse(readFileSync(process.env.KEYS, "utf8"));

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [
    {
      client_id: "approvals",
      client_secret: "test-secret",
      redirect_uris: [process.env.REDIRECT_URI],
      post_logout_redirect_uris: [process.env.POST_LOGOUT_URI],
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
    {
      // another application at the same provider: its codes and tokens are not for approvals
      client_id: "other-app",
      client_secret: "other-secret",
      redirect_uris: [process.env.REDIRECT_URI],
      grant_types: ["authorization_code"],
      response_types: ["code"],
    },
  ],
  jwks: { keys },
  claims: {
    openid: ["sub"],
    profile: ["preferred_username", "groups"],
    email: ["email", "email_verified"],
  },
  scopes: ["openid", "profile", "email"],
  features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  pkce: { required: () => true },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        const user = JSON.parse(readFileSync(process.env.USERS, "utf8"))[id] || {};
        return {
          sub: id,
          preferred_username: id,
          groups: user.groups || [],
          email: `${id}@example.com`,
          email_verified: true,
        };
      },
    };
  },
});

const foreign = await generateKeyPair("RS256");

async function wrongIdToken(idToken, mode) {
  const header = decodeProtectedHeader(idToken);
  const payload = decodeJwt(idToken);
  if (mode === "tamper") {
    const [head, , signature] = idToken.split(".");
    const changed = Buffer.from(JSON.stringify({ ...payload, sub: "mallory" })).toString("base64url");
    return `${head}.${changed}.${signature}`;
  }
  if (mode === "foreign_key") {
    return new SignJWT(payload).setProtectedHeader({ ...header, kid: "never-published" }).sign(foreign.privateKey);
  }
  const { exp_offset: expOffset, ...claims } = mode;
  const changed = { ...payload, ...claims };
  if (expOffset !== undefined) {
    changed.exp = Math.floor(Date.now() / 1000) + expOffset;
    changed.iat = changed.exp - (payload.exp - payload.iat);
  }
  const jwk = keys.find((key) => key.kid === header.kid) || keys[0];
  return new SignJWT(changed).setProtectedHeader(header).sign(await importJWK(jwk, header.alg));
}

provider.use(async (ctx, next) => {
  await next();
  const file = process.env.ID_TOKEN;
  if (ctx.path !== "/token" || !file || !existsSync(file) || typeof ctx.body?.id_token !== "string") return;
  const mode = JSON.parse(readFileSync(file, "utf8"));
  if (mode) ctx.body = { ...ctx.body, id_token: await wrongIdToken(ctx.body.id_token, mode) };
});

provider.listen(port, "127.0.0.1", () => console.log(`listening ${port}`));
