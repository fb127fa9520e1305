// A real OpenID provider for the sign-on tests: node-oidc-provider with its development login
// form (any password), a test client, users with a groups claim, and RP-initiated logout.
// Configured by environment: PORT, CLIENTS (a JSON file {"client_id": {client metadata}}, read at each
// request, so one provider serves a test after another, each with its app on its own port: the test
// client's redirect URIs are the current app's), KEYS (a JSON file of private JWKs, the first signs),
// USERS (a JSON file {"name": {"groups": [...]}}, read at each sign-in so a test can change someone's
// groups). Restart it with other KEYS to rotate.
// ID_TOKEN names a JSON file that, while it exists, makes the token endpoint hand out a wrong ID token
// (read at each token request, so a test can switch): an object changes claims and signs again with the
// provider's key ({"aud": "other-app"}, {"iss": "..."}, {"nonce": "..."}, {"exp_offset": -3600}: expiry
// that many seconds from now); "tamper" changes a claim after signing (the signature no longer matches);
// "foreign_key" signs with a key the provider never published (an unknown kid).
import { existsSync, readFileSync } from "node:fs";
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair, importJWK } from "jose";
import Provider from "oidc-provider";
// The library's own in-memory store for everything but the clients (sessions, codes, grants). No package
// "exports" field closes this path; package-lock.json pins the version.
import { createMemoryAdapter } from "oidc-provider/lib/adapters/memory_adapter.js";

const port = Number(process.env.PORT);
const keys = JSON.parse(readFileSync(process.env.KEYS, "utf8"));

const memory = createMemoryAdapter();
// Clients as the CLIENTS file has them now: the client cache is keyed by their metadata, so a change takes.
const clients = {
  async find(id) {
    return JSON.parse(readFileSync(process.env.CLIENTS, "utf8"))[id];
  },
};

const provider = new Provider(`http://127.0.0.1:${port}`, {
  adapter: (model) => (model === "Client" ? clients : memory(model)),
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
