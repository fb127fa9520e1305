// A real OpenID provider for the sign-on tests: node-oidc-provider with its development login
// form (any password), a test client, users with a groups claim, and RP-initiated logout.
// Configured by environment: PORT, REDIRECT_URI, POST_LOGOUT_URI, KEYS (a JSON file of private JWKs,
// the first signs), USERS (a JSON file {"name": {"groups": [...]}}, read at each sign-in so a test can
// change someone's groups). Restart it with other KEYS to rotate.
import { readFileSync } from "node:fs";
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
provider.listen(port, "127.0.0.1", () => console.log(`listening ${port}`));
